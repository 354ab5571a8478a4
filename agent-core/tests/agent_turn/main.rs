//! The conversation loop against the scripted fake model and a real SQLite store: the tool
//! round trip and what is persisted, usage on the session row, retries, fallback, the
//! iteration limit, cancellation, and errors the loop hands back.
//!
//! - [`session`]: what a turn leaves on the session row: frozen prompt, cost, context size.
//! - [`interrupt`]: cancellation while streaming and inside tools.
//! - [`compaction`]: compression inside the loop (overflow, preflight, threshold, pausing).
//! - [`errors`]: the rest of the error table: retries, fallbacks, stops, the deadline.

#[path = "../common/mod.rs"]
mod common;
mod compaction;
mod errors;
mod interrupt;
mod session;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::agent::retry::{RetryNotice, RetryPolicy};
use agent_core::agent::{
    Agent, ConversationState, PromptBuilder, TurnConfig, TurnError, TurnEvent,
};
use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{ChatProvider, ErrorClass};
use agent_core::store::Role;
use agent_core::tools::ToolRegistry;
use agent_core::tools::clock::Clock;
use agent_core::tools::todo::Todo;
use testkit::Reply;
use testkit::openai::FakeOpenAi;
use tokio_util::sync::CancellationToken;

/// The user message of every scripted turn.
pub(crate) const USER: &str = "What time is it?";

pub(crate) struct Setup {
    pub(crate) agent: Agent,
    pub(crate) state: ConversationState,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) fn provider(fake: &FakeOpenAi, model: &str) -> Arc<dyn ChatProvider> {
    let mut config = OpenAiConfig::new(&fake.base_url, model);
    config.first_byte_timeout = Duration::from_secs(10);
    Arc::new(OpenAiProvider::new(config).expect("client"))
}

pub(crate) async fn setup(providers: Vec<Arc<dyn ChatProvider>>, max_iterations: u32) -> Setup {
    let common::Fresh {
        dir,
        store,
        conversation_id,
        session_id,
    } = common::fresh_session("api:turn").await;
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Clock));
    tools.register(Arc::new(Todo::default()));
    let config = TurnConfig {
        max_iterations,
        max_tokens: 256,
        temperature: None,
        tool_timeout: Duration::from_secs(5),
        turn_deadline: Duration::from_secs(30),
        retry: RetryPolicy {
            backoff_base: Duration::from_millis(10),
            backoff_cap: Duration::from_millis(50),
            retry_after_cap: Duration::from_millis(50),
            max_attempts: 3,
        },
        memory_flush: false,
    };
    Setup {
        agent: Agent {
            providers,
            tools,
            store,
            prompt: PromptBuilder::new("You are terse."),
            compressor: None,
            todo: None,
            config,
        },
        state: {
            let mut state = ConversationState::new(conversation_id, session_id);
            state.system_prompt = Some("You are terse.".into());
            state
        },
        dir,
    }
}

/// The current session's active messages, read from the store.
pub(crate) async fn stored(s: &Setup) -> Vec<agent_core::store::Message> {
    s.agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages")
}

pub(crate) fn recorder() -> (Arc<Mutex<Vec<TurnEvent>>>, impl Fn(TurnEvent) + Send + Sync) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    (events, move |e| sink.lock().expect("lock").push(e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_round_trip_is_persisted_message_by_message() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([
            ("clock", "{}"),
            ("todo", r#"{"op":"add","text":"check time"}"#),
        ])
        .usage(100, 10),
        Reply::text("It is noon.").usage(180, 5),
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
    assert_eq!(outcome.text, "It is noon.");
    assert_eq!(
        (
            outcome.api_calls,
            outcome.iterations,
            outcome.context_tokens,
            outcome.context_estimated
        ),
        (2, 2, 180, false)
    );

    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let roles: Vec<Role> = stored.iter().map(|m| m.body.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(
        stored[1]
            .body
            .tool_calls
            .as_ref()
            .and_then(|c| c.as_array())
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(stored[2].body.tool_call_id.as_deref(), Some("call_0"));
    assert_eq!(stored[2].body.tool_name.as_deref(), Some("clock"));
    assert!(
        stored[3]
            .body
            .content
            .as_deref()
            .is_some_and(|c| c.contains("check time"))
    );
    let session = s
        .agent
        .store
        .session(&s.state.session_id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(session.usage.api_call_count, 2);
    assert_eq!(session.usage.input_tokens, 280);
    assert_eq!(
        (outcome.usage.prompt_tokens, outcome.usage.completion_tokens),
        (280, 15),
        "the turn reports what all its calls used"
    );
    assert_eq!(session.usage.output_tokens, 15);
    assert_eq!(session.tool_call_count, 2);

    // The second request carried the tool results, answered by id.
    let second = &fake.requests()[1].body;
    let sent = second["messages"].as_array().expect("messages");
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent[3]["role"], "tool");
    assert_eq!(sent[3]["tool_call_id"], "call_0");
    assert_eq!(second["tools"].as_array().map(Vec::len), Some(2));
    let events = events.lock().expect("lock");
    assert!(events.contains(&TurnEvent::ToolFinished {
        name: "clock".into(),
        is_error: false
    }));
    assert!(events.iter().any(|e| matches!(e, TurnEvent::Text(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_and_counted() {
    let fake = FakeOpenAi::start([
        Reply::error(503, "busy"),
        Reply::error(502, "bad gateway"),
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
    assert_eq!((outcome.text.as_str(), outcome.api_calls), ("ok", 3));
    let retries: Vec<ErrorClass> = events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Retry(RetryNotice::Retrying { class, .. }) => Some(*class),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [ErrorClass::Overloaded, ErrorClass::ServerError]);
    let session = s
        .agent
        .store
        .session(&s.state.session_id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(session.usage.api_call_count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iteration_limit_ends_with_one_call_without_tools() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]),
        Reply::tool_calls([("clock", "{}")]),
        Reply::text("final"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 2).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!((outcome.text.as_str(), outcome.iterations), ("final", 3));
    let last = &fake.requests()[2].body;
    assert!(last.get("tools").is_none(), "the last call offers no tools");
    let messages = last["messages"].as_array().expect("messages");
    let note = messages.last().expect("note");
    assert_eq!(note["role"], "user");
    assert!(
        note["content"]
            .as_str()
            .is_some_and(|c| c.contains("Answer now"))
    );
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    assert!(
        stored.iter().all(|m| !m
            .body
            .content
            .as_deref()
            .unwrap_or("")
            .contains("Answer now")),
        "the note is scaffolding, never stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_abandons_a_hung_call_and_keeps_what_was_said() {
    let fake = FakeOpenAi::start([Reply::hang()]).await.expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = std::time::Instant::now();
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancel must not wait for the hung call"
    );
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    assert_eq!(stored.len(), 1, "the user message is kept");
    assert_eq!(stored[0].body.content.as_deref(), Some("What time is it?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_comes_back_to_the_caller_with_the_limit() {
    let fake = FakeOpenAi::start([Reply::error(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#,
    )])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect_err("overflow");
    match err {
        TurnError::Model(e) => assert_eq!(
            (e.class, e.context_limit),
            (ErrorClass::ContextOverflow, Some(8192))
        ),
        other => panic!("expected a model error, got {other:?}"),
    }
    assert_eq!(
        fake.requests().len(),
        1,
        "not retried blindly: compression must come first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_answer_is_continued_and_joined_once() {
    let fake = FakeOpenAi::start([
        Reply::text("The first half, ").finish_reason("length"),
        Reply::text("the second half.").finish_reason("length"),
        Reply::text(" The end."),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "The first half, the second half. The end.");
    assert_eq!(outcome.api_calls, 3);
    let second = fake.requests()[1].body["messages"].clone();
    let sent = second.as_array().expect("messages");
    let n = sent.len();
    assert_eq!(sent[n - 2]["content"], "The first half, ");
    assert!(
        sent[n - 1]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("Continue exactly"))
    );
    let third = fake.requests()[2].body["messages"].clone();
    assert_eq!(
        third[third.as_array().map_or(0, Vec::len) - 2]["content"],
        "The first half, the second half."
    );
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let bodies: Vec<_> = stored
        .iter()
        .map(|m| (m.body.role, m.body.content.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        bodies,
        [
            (Role::User, "What time is it?".to_owned()),
            (
                Role::Assistant,
                "The first half, the second half. The end.".to_owned()
            )
        ],
        "partials and the continue note are never stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_answer_is_nudged_then_given_up_honestly() {
    let fake = FakeOpenAi::start([Reply::text(""), Reply::text("Here it is.")])
        .await
        .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Here it is.");
    let nudge = fake.requests()[1].body["messages"].clone();
    let last = &nudge[nudge.as_array().map_or(0, Vec::len) - 1];
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("empty")),
        "{last}"
    );
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    assert_eq!(stored.len(), 2, "no empty answer or nudge stored");

    let silent = FakeOpenAi::start([
        Reply::text(""),
        Reply::text(""),
        Reply::text(""),
        Reply::text(""),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&silent, "main")], 90).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert!(outcome.text.contains("no answer"), "{outcome:?}");
    assert_eq!(silent.requests().len(), 4, "one call and three nudges");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_after_tools_reuses_the_text_written_beside_them() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]).saying("It is about noon; checking to be sure."),
        Reply::text(""),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "It is about noon; checking to be sure.");
    assert_eq!(fake.requests().len(), 2, "no nudge needed");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let last = stored.last().expect("answer");
    assert_eq!(last.body.role, Role::Assistant);
    assert_eq!(
        last.body.content.as_deref(),
        Some("It is about noon; checking to be sure.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_model_hands_over_to_the_fallback_after_three_nudges() {
    let silent = FakeOpenAi::start([
        Reply::text(""),
        Reply::text(""),
        Reply::text(""),
        Reply::text(""),
    ])
    .await
    .expect("fake");
    let backup = FakeOpenAi::start([Reply::text("The backup answers.")])
        .await
        .expect("fake");
    let mut s = setup(
        vec![provider(&silent, "main"), provider(&backup, "backup-model")],
        90,
    )
    .await;
    let (events, on_event) = recorder();
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &CancellationToken::new())
        .await
        .expect("turn");
    assert_eq!(outcome.text, "The backup answers.");
    assert_eq!(silent.requests().len(), 4, "one call and three nudges");
    assert_eq!(backup.requests().len(), 1);
    let asked = backup.requests()[0].body["messages"].clone();
    let last = &asked[asked.as_array().map_or(0, Vec::len) - 1];
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|c| c.contains("empty")),
        "the fallback sees the nudge: {last}"
    );
    assert!(events.lock().expect("lock").contains(&TurnEvent::Retry(
        RetryNotice::FallingBackAfterEmpty {
            to_model: "backup-model".into()
        }
    )));
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let bodies: Vec<_> = stored
        .iter()
        .map(|m| m.body.content.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        bodies,
        ["What time is it?", "The backup answers."],
        "no empty answers or nudges stored"
    );
}
