//! Cancellation: a stream stalled mid-answer is abandoned within a second of the cancel and
//! what it said is stored as `interrupted`; a tool still running is stopped and its call
//! answered as cancelled, so the transcript stays valid.

use agent_core::agent::UserInput;
use agent_core::agent::call::INTERRUPTED;
use agent_core::tools::{Tool, ToolContext, ToolOutput};
use serde_json::{Value, json};

use super::*;

/// Cancels `cancel` after `after`, returning when it fired.
fn cancel_after(
    cancel: &CancellationToken,
    after: Duration,
) -> tokio::task::JoinHandle<std::time::Instant> {
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        trigger.cancel();
        std::time::Instant::now()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_mid_stream_stores_the_partial_answer_as_interrupted() {
    let fake = FakeOpenAi::start([Reply::stalled("It is twelve o'")])
        .await
        .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let (events, on_event) = recorder();
    let cancel = CancellationToken::new();
    let fired = cancel_after(&cancel, Duration::from_millis(300));
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &on_event, &cancel)
        .await
        .expect_err("cancelled");
    let returned = std::time::Instant::now();
    assert!(matches!(err, TurnError::Cancelled), "{err:?}");
    let fired = fired.await.expect("trigger");
    assert!(
        returned.duration_since(fired) < Duration::from_secs(1),
        "a stalled stream is abandoned within 1 s of the cancel"
    );
    let streamed: String = events
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "It is twelve o'");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[1].body.role, Role::Assistant);
    assert_eq!(stored[1].body.content.as_deref(), Some("It is twelve o'"));
    assert_eq!(stored[1].body.finish_reason.as_deref(), Some(INTERRUPTED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_continuing_keeps_the_whole_answer_so_far() {
    let fake = FakeOpenAi::start([
        Reply::text("The first half, ").finish_reason("length"),
        Reply::stalled("the second"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let cancel = CancellationToken::new();
    let _fired = cancel_after(&cancel, Duration::from_millis(300));
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err:?}");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let last = stored.last().expect("stored");
    assert_eq!(
        last.body.content.as_deref(),
        Some("The first half, the second")
    );
    assert_eq!(last.body.finish_reason.as_deref(), Some(INTERRUPTED));
}

/// Runs until cancelled.
struct Forever;

#[async_trait::async_trait]
impl Tool for Forever {
    fn name(&self) -> &str {
        "forever"
    }
    fn description(&self) -> &str {
        "never finishes"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _: Value, _: &ToolContext, cancel: &CancellationToken) -> ToolOutput {
        cancel.cancelled().await;
        ToolOutput::error("stopped")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_inside_a_tool_answers_its_call_and_stops_the_turn() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("forever", "{}"), ("clock", "{}")]),
        Reply::text("never asked"),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    s.agent.tools.register(Arc::new(Forever));
    let cancel = CancellationToken::new();
    let _fired = cancel_after(&cancel, Duration::from_millis(300));
    let err = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err:?}");
    assert_eq!(fake.requests().len(), 1, "no model call after the cancel");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let roles: Vec<Role> = stored.iter().map(|m| m.body.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool]);
    assert_eq!(stored[2].body.content.as_deref(), Some("cancelled"));
    assert_ne!(
        stored[3].body.content.as_deref(),
        Some("cancelled"),
        "the clock finished before the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_resumed_after_a_crash_does_not_repeat_the_user_message() {
    use agent_core::store::NewMessage;

    let fake = FakeOpenAi::start([Reply::text("Resumed answer.")])
        .await
        .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    // What a crash mid-tools leaves: the user message (with its platform id) and a call whose
    // result was never stored.
    let mut user = NewMessage::text(Role::User, USER);
    user.platform_message_id = Some("route:m-1".into());
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(json!([{"id": "c9", "name": "clock", "arguments": "{}"}]));
    s.agent
        .store
        .append_messages(&s.state.session_id, &[user, call])
        .await
        .expect("seed");

    let outcome = s
        .agent
        .run_message(
            &mut s.state,
            UserInput::platform(USER, "route:m-1"),
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Resumed answer.");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let users = stored.iter().filter(|m| m.body.role == Role::User).count();
    assert_eq!(users, 1, "the user message is not stored twice");
    // The dangling call went to the model with a stub result, so the provider accepts it.
    let sent = fake.requests()[0].body["messages"].clone();
    let roles: Vec<&str> = sent
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(sent[3]["tool_call_id"], "c9");

    // A new platform message is stored as usual.
    let fake2 = FakeOpenAi::start([Reply::text("second")])
        .await
        .expect("fake");
    s.agent.providers = vec![provider(&fake2, "main")];
    s.agent
        .run_message(
            &mut s.state,
            UserInput::platform("again", "route:m-2"),
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    assert_eq!(
        stored.iter().filter(|m| m.body.role == Role::User).count(),
        2
    );
}
