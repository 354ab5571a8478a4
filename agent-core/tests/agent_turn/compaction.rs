//! Compression inside the loop, driven through the fake servers: overflow errors in each
//! provider's real shape (OpenAI, Anthropic) and 413 are compressed and retried with the
//! window lowered to the parsed limit; preflight compresses a session too big for a small
//! window; a response whose real prompt passed the threshold compresses before the next
//! call; ineffective compressions pause automatic compression (with a warning) until
//! `/compress`; the session rotates with its lineage, and search still finds what was
//! compressed away.

use agent_core::agent::{CompressionReport, Trigger};
use agent_core::compress::{CompressionSettings, Compressor};
use agent_core::llm::ModelSpec;
use agent_core::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use agent_core::redact::Redactor;
use agent_core::store::{NewMessage, SearchQuery};
use testkit::anthropic::FakeAnthropic;

use super::*;

/// Turns compression on, summarising with the main provider.
fn compress_with(s: &mut Setup, settings: CompressionSettings) {
    s.agent.compressor = Some(Arc::new(Compressor::new(
        settings,
        None,
        s.agent.providers[0].clone(),
        Arc::new(Redactor::default()),
    )));
}

/// `pairs` user/assistant exchanges of `chars` characters each, the first saying `fact`.
async fn seed(s: &Setup, pairs: usize, chars: usize, fact: &str) {
    let mut messages = Vec::new();
    for i in 0..pairs {
        // The fact sits past the protected head, so compression takes it away.
        let text = if i == 2 {
            format!("{fact} {}", "x".repeat(chars))
        } else {
            format!("question {i} {}", "y".repeat(chars))
        };
        messages.push(NewMessage::text(Role::User, text));
        messages.push(NewMessage::text(
            Role::Assistant,
            format!("answer {i} {}", "z".repeat(chars)),
        ));
    }
    s.agent
        .store
        .append_messages(&s.state.session_id, &messages)
        .await
        .expect("seed");
}

/// The events `pick` selects, in order.
fn picked<T>(events: &Mutex<Vec<TurnEvent>>, pick: impl Fn(&TurnEvent) -> Option<T>) -> Vec<T> {
    events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(pick)
        .collect()
}

fn reports(events: &Mutex<Vec<TurnEvent>>) -> Vec<CompressionReport> {
    picked(events, |e| match e {
        TurnEvent::Compressed(r) => Some(r.clone()),
        _ => None,
    })
}

fn warnings(events: &Mutex<Vec<TurnEvent>>) -> Vec<String> {
    picked(events, |e| match e {
        TurnEvent::Warning(w) => Some(w.clone()),
        _ => None,
    })
}

fn message_count(body: &serde_json::Value) -> usize {
    body["messages"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_overflow_lowers_the_window_compresses_and_retries() {
    let fake = FakeOpenAi::start([
        Reply::error(
            400,
            r#"{"error":{"message":"This model's maximum context length is 1000 tokens. However, your messages resulted in 3100 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        ),
        Reply::text("SUMMARY: the user planted the fact"),
        Reply::text("Here is the answer."),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    seed(&s, 6, 1_000, "My locker code is 4417.").await;
    let old = s.state.session_id.clone();
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Here is the answer.");
    assert_eq!(outcome.compressions, 1);
    assert_eq!(
        s.state.context.context_length,
        Some(1_000),
        "lowered to the parsed limit"
    );
    assert_ne!(s.state.session_id, old, "moved to the new session");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        message_count(&requests[2].body) < message_count(&requests[0].body),
        "the retry is smaller"
    );
    let retried = requests[2].body["messages"].to_string();
    assert!(
        retried.contains("SUMMARY: the user planted the fact"),
        "{retried}"
    );
    assert!(retried.contains("END OF CONTEXT SUMMARY"));

    let report = &reports(&events)[0];
    assert_eq!(report.trigger, Trigger::Overflow);
    assert_eq!(
        (report.from_session.as_str(), report.to_session.as_str()),
        (old.as_str(), s.state.session_id.as_str())
    );
    let store = &s.agent.store;
    let new = store
        .session(&s.state.session_id)
        .await
        .expect("load")
        .expect("new");
    assert_eq!(new.parent_session_id.as_deref(), Some(old.as_str()));
    assert_eq!(new.compression_count, 1);
    let ended = store.session(&old).await.expect("load").expect("old");
    assert_eq!(ended.end_reason.as_deref(), Some("compression"));
    let stored = store.messages(&s.state.session_id).await.expect("messages");
    assert_eq!(
        stored
            .last()
            .and_then(|m| m.body.content.clone())
            .as_deref(),
        Some("Here is the answer.")
    );
    assert!(
        stored
            .iter()
            .any(|m| m.body.content.as_deref() == Some(USER)),
        "the newest user message moved with it"
    );

    // Search still finds the compressed-away fact, resolved to the lineage root.
    store.sync_search_index().await.expect("index");
    let hits = store
        .search(&SearchQuery {
            text: "locker".into(),
            ..SearchQuery::default()
        })
        .await
        .expect("search");
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].session_id, old);
    assert_eq!(hits[0].root_session_id, old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_prompt_too_long_is_recovered_the_same_way() {
    let fake = FakeAnthropic::start([
        Reply::error(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 3210 tokens > 2000 maximum"}}"#,
        ),
        Reply::text("SUMMARY written by claude"),
        Reply::text("Answer after compression."),
    ])
    .await
    .expect("fake");
    let mut config = AnthropicConfig::new(&fake.base_url, "claude-test");
    config.api_key = Some("sk-ant-test".into());
    config.first_byte_timeout = Duration::from_secs(10);
    let claude: Arc<dyn ChatProvider> = Arc::new(AnthropicProvider::new(config).expect("client"));
    let mut s = setup(vec![claude], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    seed(&s, 6, 1_000, "The project is called Heron.").await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Answer after compression.");
    assert_eq!(s.state.context.context_length, Some(2_000));
    let retried = &fake.requests()[2].body;
    assert!(
        retried["messages"]
            .to_string()
            .contains("SUMMARY written by claude")
    );
    assert_eq!(
        retried["messages"][0]["role"], "user",
        "Anthropic's first turn stays a user turn"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_413_compresses_and_retries_without_lowering_the_window() {
    let fake = FakeOpenAi::start([
        Reply::error(413, r#"{"error":{"message":"Request Entity Too Large"}}"#),
        Reply::text("SUMMARY"),
        Reply::text("fits now"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    seed(&s, 6, 1_000, "fact").await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(
        (outcome.text.as_str(), outcome.compressions),
        ("fits now", 1)
    );
    assert_eq!(
        s.state.context.context_length,
        Some(128_000),
        "the window stays as configured"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_with_nothing_to_compress_ends_the_turn_with_the_error() {
    let fake = FakeOpenAi::start([Reply::error(
        400,
        r#"{"error":{"message":"This model's maximum context length is 10 tokens.","code":"context_length_exceeded"}}"#,
    )])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("too big");
    match err {
        TurnError::Model(e) => assert_eq!(e.class, ErrorClass::ContextOverflow),
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.requests().len(), 1, "no blind retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_recovery_stops_after_three_attempts() {
    let overflow = || {
        Reply::error(
            400,
            r#"{"error":{"message":"This model's maximum context length is 100 tokens.","code":"context_length_exceeded"}}"#,
        )
    };
    let fake = FakeOpenAi::start([
        overflow(),
        Reply::text("S1"),
        overflow(),
        Reply::text("S2"),
        overflow(),
        Reply::text("S3"),
        overflow(),
        Reply::text("never used"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(
        &mut s,
        CompressionSettings {
            protect_first_n: 0,
            ..CompressionSettings::default()
        },
    );
    // Many exchanges, so each pass has something new to fold in.
    seed(&s, 30, 400, "fact").await;
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("gives up");
    assert!(
        matches!(err, TurnError::Model(ref e) if e.class == ErrorClass::ContextOverflow),
        "{err:?}"
    );
    let calls = fake.requests().len();
    assert!(calls <= 7, "at most 3 compressions and 4 attempts: {calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_compresses_a_session_too_big_for_a_small_window() {
    let fake = FakeOpenAi::start([
        Reply::text("SUMMARY of the long past"),
        Reply::text("answer"),
    ])
    .await
    .expect("fake");
    let mut config = OpenAiConfig::new(&fake.base_url, "small-window");
    config.first_byte_timeout = Duration::from_secs(10);
    config.spec = ModelSpec {
        context_length: 4_000,
        max_output_tokens: 256,
        ..ModelSpec::default()
    };
    let small: Arc<dyn ChatProvider> = Arc::new(OpenAiProvider::new(config).expect("client"));
    let mut s = setup(vec![small], 90).await;
    compress_with(
        &mut s,
        CompressionSettings {
            min_threshold_tokens: 1_000,
            ..CompressionSettings::default()
        },
    );
    seed(&s, 10, 1_000, "fact").await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "answer");
    let report = &reports(&events)[0];
    assert_eq!(report.trigger, Trigger::Preflight);
    assert!(report.after_tokens < 2_000, "{report:?}");
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        2,
        "the summary, then the answer: no failed call first"
    );
    assert!(
        requests[1].body["messages"]
            .to_string()
            .contains("SUMMARY of the long past")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_past_the_threshold_compresses_before_the_next_call() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]).usage(90_000, 10),
        Reply::text("SUMMARY mid-turn"),
        Reply::text("It is noon.").usage(2_000, 5),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(
        &mut s,
        CompressionSettings {
            min_threshold_tokens: 1_000,
            summary_target_ratio: 0.05,
            ..CompressionSettings::default()
        },
    );
    // A 4,000-token window: threshold 2,000. The session is under it (no preflight), but the
    // response reports 90,000 prompt tokens.
    s.state.context.context_length = Some(4_000);
    seed(&s, 3, 600, "fact").await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "It is noon.");
    assert_eq!(reports(&events)[0].trigger, Trigger::Threshold);
    assert_eq!(
        (outcome.context_tokens, outcome.context_estimated),
        (2_000, false)
    );
    // The tool call and its result moved to the new session with the tail.
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let roles: Vec<Role> = stored.iter().map(|m| m.body.role).collect();
    assert!(
        roles.windows(2).any(|w| w == [Role::Assistant, Role::Tool]),
        "{roles:?}"
    );
    assert_eq!(stored.last().map(|m| m.body.role), Some(Role::Assistant));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ineffective_compressions_pause_until_compress_is_asked_for() {
    // A huge first message sits in the protected head: every compression saves little.
    let fake = FakeOpenAi::start([
        Reply::text("s1"),
        Reply::text("ok1"),
        Reply::text("s2"),
        Reply::text("ok2"),
        Reply::text(format!("ok3 {}", "w".repeat(2_000))),
        Reply::text("s3"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(
        &mut s,
        CompressionSettings {
            min_threshold_tokens: 1_000,
            summary_target_ratio: 0.05,
            ..CompressionSettings::default()
        },
    );
    let store = s.agent.store.clone();
    store
        .append_messages(
            &s.state.session_id,
            &[
                NewMessage::text(Role::User, "z".repeat(40_000)),
                NewMessage::text(Role::Assistant, "got it"),
                NewMessage::text(Role::User, "q1"),
                NewMessage::text(Role::Assistant, "a".repeat(600)),
                NewMessage::text(Role::User, "u".repeat(600)),
                NewMessage::text(Role::Assistant, "b".repeat(600)),
            ],
        )
        .await
        .expect("seed");
    // Every window is 4000 tokens (threshold 2000): always over it.
    s.state.context.context_length = Some(4_000);
    let (events, on_event) = recorder();
    let cancel = CancellationToken::new();
    s.agent
        .run_turn(&mut s.state, "turn one", &on_event, &cancel)
        .await
        .expect("turn 1");
    assert_eq!(
        s.state.context.ineffective,
        1,
        "{:?} {:?}",
        reports(&events),
        fake.requests()
            .iter()
            .map(|r| r.body["messages"].as_array().map_or(0, Vec::len))
            .collect::<Vec<_>>()
    );
    s.agent
        .run_turn(&mut s.state, "turn two", &on_event, &cancel)
        .await
        .expect("turn 2");
    assert!(s.state.context.auto_paused());
    let said = warnings(&events);
    assert!(
        said.iter().any(|w| w.contains("compressed 2 times")),
        "{said:?}"
    );
    assert!(said.iter().any(|w| w.contains("paused")), "{said:?}");

    let before = fake.requests().len();
    s.agent
        .run_turn(&mut s.state, "turn three", &on_event, &cancel)
        .await
        .expect("turn 3");
    assert_eq!(
        fake.requests().len(),
        before + 1,
        "paused: no summary call, just the answer"
    );
    assert_eq!(reports(&events).len(), 2);

    let report = s
        .agent
        .compress_now(&mut s.state, Some("the big document"), &on_event, &cancel)
        .await
        .expect("compress")
        .expect("compressed");
    assert_eq!(report.trigger, Trigger::Manual);
    assert!(
        s.state.context.estimated && s.state.context.tokens > 10_000,
        "the new size is an estimate until real usage arrives: {:?}",
        s.state.context
    );
    assert_eq!(
        s.state.context.ineffective, 0,
        "/compress resumes automatic compression"
    );
    let last = fake
        .requests()
        .last()
        .map(|r| r.body.clone())
        .expect("summary request");
    assert!(
        last["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("Focus topic: the big document"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_flushes_memory_rebuilds_the_prompt_and_carries_the_todo_list() {
    use agent_core::tools::memory::MemoryStore;
    use agent_core::tools::{Tool, ToolContext};

    let fake = FakeOpenAi::start([
        Reply::error(
            400,
            r#"{"error":{"message":"This model's maximum context length is 1000 tokens.","code":"context_length_exceeded"}}"#,
        ),
        // The memory flush: the model saves a fact.
        Reply::tool_calls([(
            "memory",
            r#"{"op":"add","file":"user","text":"The user drinks green tea."}"#,
        )]),
        Reply::text("SUMMARY"),
        Reply::text("Answer in the new session."),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    let memory = Arc::new(MemoryStore::new(s.dir.path().join("memory")));
    let todo = Arc::new(Todo::default());
    s.agent.tools.register(memory.clone());
    s.agent.tools.register(todo.clone());
    s.agent.todo = Some(todo.clone());
    s.agent.prompt = PromptBuilder::new("You are terse.").with_memory(memory.clone());
    s.agent.config.memory_flush = true;
    let ctx = ToolContext {
        session_id: s.state.session_id.clone(),
        conversation_id: s.state.conversation_id,
    };
    let added = todo
        .call(
            serde_json::json!({"op": "add", "text": "book the flights"}),
            &ctx,
            &CancellationToken::new(),
        )
        .await;
    assert!(!added.is_error);
    seed(&s, 6, 1_000, "fact").await;
    let old_prompt = s.state.system_prompt.clone();

    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Answer in the new session.");

    let requests = fake.requests();
    let flush = &requests[1].body;
    let offered: Vec<&str> = flush["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(offered, ["memory"], "the flush offers only the memory tool");
    assert!(
        flush["messages"]
            .to_string()
            .contains("about to be compressed")
    );

    // The new session's prompt was rebuilt and includes what was just saved.
    assert_ne!(s.state.system_prompt, old_prompt);
    let prompt = s.state.system_prompt.clone().unwrap_or_default();
    assert!(prompt.contains("The user drinks green tea."), "{prompt}");
    let answer_request = &requests[3].body;
    assert_eq!(answer_request["messages"][0]["content"], prompt.as_str());

    // The todo list went with the conversation and is shown in the summary.
    assert_eq!(todo.items(&s.state.session_id).len(), 1);
    let sent = answer_request["messages"].to_string();
    assert!(
        sent.contains("Your todo list") && sent.contains("book the flights"),
        "{sent}"
    );

    // The flush's scaffolding is not in either transcript.
    for session in [&ctx.session_id, &s.state.session_id] {
        let stored = s.agent.store.messages(session).await.expect("messages");
        assert!(stored.iter().all(|m| {
            !m.body
                .content
                .as_deref()
                .unwrap_or("")
                .contains("about to be compressed")
        }));
        assert!(
            stored
                .iter()
                .all(|m| m.body.tool_name.as_deref() != Some("memory"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_another_process_is_compressing_is_left_alone() {
    let fake = FakeOpenAi::start([Reply::error(
        400,
        r#"{"error":{"message":"This model's maximum context length is 1000 tokens.","code":"context_length_exceeded"}}"#,
    )])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    compress_with(&mut s, CompressionSettings::default());
    seed(&s, 6, 1_000, "fact").await;
    let old = s.state.session_id.clone();
    assert!(
        s.agent
            .store
            .try_lock_session(&old, "another-process", Duration::from_secs(600))
            .await
            .expect("lock")
    );
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("cannot compress");
    assert!(
        matches!(err, TurnError::Model(ref e) if e.class == ErrorClass::ContextOverflow),
        "{err:?}"
    );
    assert_eq!(
        s.state.session_id, old,
        "not rotated under another holder's lease"
    );
    assert_eq!(fake.requests().len(), 1, "no summary call");
    let session = s
        .agent
        .store
        .session(&old)
        .await
        .expect("load")
        .expect("exists");
    assert!(session.ended_at.is_none());
}
