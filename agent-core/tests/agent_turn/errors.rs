//! Every row of DESIGN.md §5's error table, driven through the loop by the fake servers
//! answering in the provider's real error shape: what is retried, what falls back, what stops,
//! and that the per-turn deadline bounds the retries. (Context overflow and 413 are in
//! `compaction`; 502/503 retries in `main`.)

use agent_core::agent::retry::RetryPolicy;
use agent_core::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use testkit::anthropic::FakeAnthropic;

use super::*;

fn retries(events: &Mutex<Vec<TurnEvent>>) -> Vec<ErrorClass> {
    events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Retry(RetryNotice::Retrying { class, .. }) => Some(*class),
            _ => None,
        })
        .collect()
}

fn fell_back_after(events: &Mutex<Vec<TurnEvent>>) -> Vec<ErrorClass> {
    events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Retry(RetryNotice::FallingBack { after, .. }) => Some(*after),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_billing_missing_models_and_bad_requests_fall_back() {
    let cases = [
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}"#,
            ErrorClass::Auth,
        ),
        (
            402,
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota"}}"#,
            ErrorClass::Billing,
        ),
        (
            404,
            r#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","code":"model_not_found"}}"#,
            ErrorClass::ModelNotFound,
        ),
        (
            422,
            r#"{"error":{"message":"Invalid value for 'temperature': must be at most 2."}}"#,
            ErrorClass::FormatError,
        ),
    ];
    for (status, body, class) in cases {
        let main = FakeOpenAi::start([Reply::error(status, body)])
            .await
            .expect("fake");
        let backup = FakeOpenAi::start([Reply::text("from the backup")])
            .await
            .expect("fake");
        let mut s = setup(
            vec![provider(&main, "main"), provider(&backup, "backup")],
            90,
        )
        .await;
        let (events, on_event) = recorder();
        let outcome = s
            .agent
            .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
            .await
            .expect("turn");
        assert_eq!(outcome.text, "from the backup", "{status}");
        assert_eq!(
            main.requests().len(),
            1,
            "{status}: not retried on the same provider"
        );
        assert_eq!(fell_back_after(&events), [class], "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_failure_without_a_fallback_stops_with_the_providers_words() {
    let fake = FakeOpenAi::start([Reply::error(401, r#"{"error":{"message":"Incorrect API key provided: sk-xx***xx.","code":"invalid_api_key"}}"#)])
        .await
        .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("stops");
    match err {
        TurnError::Model(e) => {
            assert_eq!(e.class, ErrorClass::Auth);
            assert!(e.message.contains("Incorrect API key"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_policy_stops_without_retry_or_fallback() {
    let main = FakeOpenAi::start([Reply::error(
        400,
        r#"{"error":{"message":"Your request was rejected as a result of our safety system.","code":"content_policy_violation"}}"#,
    )])
    .await
    .expect("fake");
    let backup = FakeOpenAi::start([Reply::text("never")])
        .await
        .expect("fake");
    let mut s = setup(
        vec![provider(&main, "main"), provider(&backup, "backup")],
        90,
    )
    .await;
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("stops");
    assert!(
        matches!(err, TurnError::Model(ref e) if e.class == ErrorClass::ContentPolicy),
        "{err:?}"
    );
    assert_eq!((main.requests().len(), backup.requests().len()), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_filtered_answer_stops_and_keeps_what_came_before() {
    let fake = FakeOpenAi::start([
        Reply::text("The first part").finish_reason("content_filter"),
        Reply::text("never asked"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("stops");
    assert!(
        matches!(err, TurnError::Model(ref e) if e.class == ErrorClass::ContentPolicy),
        "{err:?}"
    );
    assert_eq!(fake.requests().len(), 1, "no nudge, no retry");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let last = stored.last().expect("stored");
    assert_eq!(last.body.content.as_deref(), Some("The first part"));
    assert_eq!(last.body.finish_reason.as_deref(), Some("content_filter"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_timeouts_and_dropped_streams_are_retried() {
    let fake = FakeOpenAi::start([
        Reply::error(
            500,
            r#"{"error":{"message":"The server had an error while processing your request."}}"#,
        ),
        Reply::hang(),
        Reply::dropped("half an ans"),
        Reply::text("finally"),
    ])
    .await
    .expect("fake");
    let mut config = OpenAiConfig::new(&fake.base_url, "main");
    config.first_byte_timeout = Duration::from_millis(300);
    let quick: Arc<dyn ChatProvider> = Arc::new(OpenAiProvider::new(config).expect("client"));
    let mut s = setup(vec![quick], 90).await;
    s.agent.config.retry.max_attempts = 5;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "finally");
    assert_eq!(
        retries(&events),
        [
            ErrorClass::ServerError,
            ErrorClass::Timeout,
            ErrorClass::Transport
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclassifiable_failure_is_retried() {
    let fake = FakeOpenAi::start([
        Reply::error(599, "network connect timeout error"),
        Reply::text("ok"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "ok");
    assert_eq!(retries(&events), [ErrorClass::Unknown]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_wait_retry_after_or_move_to_the_fallback() {
    // One provider: wait Retry-After (capped by the policy), then retry.
    let fake = FakeOpenAi::start([
        Reply::error(429, r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#).retry_after("0.02"),
        Reply::text("after the wait"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "after the wait");
    let waits: Vec<Duration> = events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Retry(RetryNotice::Retrying { wait, .. }) => Some(*wait),
            _ => None,
        })
        .collect();
    assert_eq!(
        waits,
        [Duration::from_millis(20)],
        "the server's Retry-After"
    );

    // With a fallback: no waiting for a provider that said it has no capacity.
    let main =
        FakeOpenAi::start([
            Reply::error(429, r#"{"error":{"message":"Rate limit reached"}}"#).retry_after("30"),
        ])
        .await
        .expect("fake");
    let backup = FakeOpenAi::start([Reply::text("backup")])
        .await
        .expect("fake");
    let mut s = setup(
        vec![provider(&main, "main"), provider(&backup, "backup")],
        90,
    )
    .await;
    let started = std::time::Instant::now();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "backup");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "did not wait 30 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_deadline_bounds_all_retries() {
    let fake = FakeOpenAi::start([
        Reply::error(503, "busy"),
        Reply::error(503, "busy"),
        Reply::text("too late"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    s.agent.config.turn_deadline = Duration::from_millis(150);
    s.agent.config.retry = RetryPolicy {
        backoff_base: Duration::from_millis(400),
        backoff_cap: Duration::from_secs(1),
        retry_after_cap: Duration::from_secs(1),
        max_attempts: 5,
    };
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("out of time");
    assert!(
        matches!(err, TurnError::Model(ref e) if e.class == ErrorClass::Overloaded),
        "{err:?}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "a wait past the deadline is not started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_overload_is_retried_and_a_bad_thinking_signature_is_stripped_once() {
    let fake = FakeAnthropic::start([
        Reply::tool_calls([("clock", "{}")]).thinking("the user wants the time", "sig-1"),
        Reply::error(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        Reply::error(400, r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#),
        Reply::text("It is noon."),
    ])
    .await
    .expect("fake");
    let mut config = AnthropicConfig::new(&fake.base_url, "claude-test");
    config.api_key = Some("sk-ant-test".into());
    config.first_byte_timeout = Duration::from_secs(10);
    let claude: Arc<dyn ChatProvider> = Arc::new(AnthropicProvider::new(config).expect("client"));
    let mut s = setup(vec![claude], 90).await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "It is noon.");
    assert_eq!(
        retries(&events),
        [ErrorClass::Overloaded, ErrorClass::ThinkingSignature]
    );
    let requests = fake.requests();
    let thinking = |i: usize| {
        requests[i].body["messages"]
            .to_string()
            .contains("\"thinking\"")
    };
    assert!(
        thinking(1) && thinking(2),
        "the signed block is resent within the turn"
    );
    assert!(!thinking(3), "stripped after the signature was refused");
}
