//! The conversation runtime against the fake model and a real SQLite store: inbox before
//! anything else, one turn at a time per conversation in arrival order, duplicates run once
//! and get the original answer, a full queue is refused, idle actors leave and come back with
//! their history, and messages a crash left unanswered are resumed once on start (or answered
//! with a notice after three attempts).

mod common;

use std::time::Duration;

use agent_core::store::{InboxState, NewInboxItem};
use common::{answer, inbound, wait_for, world};
use gateway::conversation::{RuntimeConfig, Submission, SubmitError, notice};
use serde_json::json;
use testkit::Reply;
use testkit::openai::FakeOpenAi;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conversation_answers_in_order_one_turn_at_a_time() {
    let fake = FakeOpenAi::start([
        Reply::text("first answer").delay(Duration::from_millis(200)),
        Reply::text("second answer"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let a = w
        .gateway
        .submit(inbound("webhook:t:c1", "m1", "first"))
        .await
        .expect("submit");
    let b = w
        .gateway
        .submit(inbound("webhook:t:c1", "m2", "second"))
        .await
        .expect("submit");
    let (a, b) = (answer(a).await, answer(b).await);
    assert_eq!(
        (a.text.as_str(), b.text.as_str()),
        ("first answer", "second answer")
    );
    assert_eq!(a.session_id, b.session_id);
    // The second turn started after the first finished: its request carries the first answer.
    let second = fake.requests()[1].body["messages"].to_string();
    assert!(second.contains("first answer"), "{second}");
    for id in [a.inbox_id, b.inbox_id] {
        let unfinished = w.store.inbox_unfinished().await.expect("inbox");
        assert!(unfinished.iter().all(|r| r.id != id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_message_runs_once_and_gets_the_original_answer() {
    let fake = FakeOpenAi::start([Reply::text("only once")])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let first = answer(
        w.gateway
            .submit(inbound("webhook:t:c", "same-id", "hi"))
            .await
            .expect("submit"),
    )
    .await;
    match w
        .gateway
        .submit(inbound("webhook:t:c", "same-id", "hi"))
        .await
        .expect("submit")
    {
        Submission::Duplicate { reply, .. } => {
            assert_eq!(reply.as_ref().map(|r| r.text.as_str()), Some("only once"));
            assert_eq!(reply.map(|r| r.outbox_id), Some(first.outbox_id));
        }
        Submission::Accepted { .. } => panic!("a duplicate must not run again"),
    }
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_refused_before_anything_is_stored() {
    let fake = FakeOpenAi::start([
        Reply::text("slow").delay(Duration::from_millis(500)),
        Reply::text("queued"),
    ])
    .await
    .expect("fake");
    let w = world(
        &fake,
        RuntimeConfig {
            queue_cap: 1,
            ..RuntimeConfig::default()
        },
    )
    .await;
    let running = w
        .gateway
        .submit(inbound("webhook:t:q", "1", "one"))
        .await
        .expect("submit");
    wait_for(|| fake.requests().len() == 1).await;
    let queued = w
        .gateway
        .submit(inbound("webhook:t:q", "2", "two"))
        .await
        .expect("submit");
    let refused = w.gateway.submit(inbound("webhook:t:q", "3", "three")).await;
    assert!(matches!(refused, Err(SubmitError::Busy)), "{refused:?}");
    assert_eq!(
        (answer(running).await.text, answer(queued).await.text),
        ("slow".to_owned(), "queued".to_owned())
    );
    // The refused message left no inbox row: sending it again later runs it.
    let unfinished = w.store.inbox_unfinished().await.expect("inbox");
    assert!(unfinished.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_conversation_leaves_memory_and_comes_back_with_its_history() {
    let fake = FakeOpenAi::start([Reply::text("noted: blue"), Reply::text("you said blue")])
        .await
        .expect("fake");
    let w = world(
        &fake,
        RuntimeConfig {
            idle_ttl: Duration::from_millis(100),
            ..RuntimeConfig::default()
        },
    )
    .await;
    let first = answer(
        w.gateway
            .submit(inbound("webhook:t:idle", "1", "my colour is blue"))
            .await
            .expect("submit"),
    )
    .await;
    assert_eq!(w.gateway.resident(), 1);
    wait_for(|| w.gateway.resident() == 0).await;
    let second = answer(
        w.gateway
            .submit(inbound("webhook:t:idle", "2", "what colour?"))
            .await
            .expect("submit"),
    )
    .await;
    assert_eq!(
        second.session_id, first.session_id,
        "restored at the same session"
    );
    assert!(
        fake.requests()[1].body["messages"]
            .to_string()
            .contains("my colour is blue")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_messages_are_resumed_once_on_start() {
    let fake = FakeOpenAi::start([Reply::text("answered after the restart")])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    // What a crash mid-turn leaves: accepted, one attempt begun, no reply.
    let crashed = w
        .store
        .inbox_accept(&NewInboxItem {
            source: "webhook".into(),
            platform_message_id: "m-crash".into(),
            conversation_key: "webhook:t:crash".into(),
            payload: json!({"text": "are you there?", "target": "webhook:test", "meta": {}}),
        })
        .await
        .expect("accept");
    w.store
        .inbox_begin_attempt(crashed.item.id)
        .await
        .expect("attempt");
    // One that already failed three times.
    let doomed = w
        .store
        .inbox_accept(&NewInboxItem {
            source: "webhook".into(),
            platform_message_id: "m-doomed".into(),
            conversation_key: "webhook:t:doomed".into(),
            payload: json!({"text": "crashes every time", "target": "webhook:test", "meta": {}}),
        })
        .await
        .expect("accept");
    for _ in 0..3 {
        w.store
            .inbox_begin_attempt(doomed.item.id)
            .await
            .expect("attempt");
    }

    assert_eq!(w.gateway.resume_unfinished().await.expect("resume"), 2);
    let store = w.store.clone();
    let done = || {
        let store = store.clone();
        async move { store.inbox_unfinished().await.expect("inbox").is_empty() }
    };
    for _ in 0..400 {
        if done().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resumed = w
        .gateway
        .original_reply(&crashed.item)
        .await
        .expect("reply")
        .expect("answered");
    assert_eq!(resumed.text, "answered after the restart");
    let gave_up = w
        .gateway
        .original_reply(&doomed.item)
        .await
        .expect("reply")
        .expect("told");
    assert_eq!(gave_up.text, notice::GAVE_UP);
    assert_eq!(
        fake.requests().len(),
        1,
        "the doomed message is not run a fourth time"
    );
    let rows = w
        .store
        .outbox_for_inbox(doomed.item.id)
        .await
        .expect("outbox");
    assert_eq!(rows.len(), 1);
    // Accepting the same ids again reads the rows back (and runs nothing).
    let again = |id: &str, key: &str| NewInboxItem {
        source: "webhook".into(),
        platform_message_id: id.into(),
        conversation_key: key.into(),
        payload: json!({}),
    };
    let doomed = w
        .store
        .inbox_accept(&again("m-doomed", "webhook:t:doomed"))
        .await
        .expect("read");
    assert_eq!(
        (doomed.fresh, doomed.item.state),
        (false, InboxState::Failed)
    );
    let crashed = w
        .store
        .inbox_accept(&again("m-crash", "webhook:t:crash"))
        .await
        .expect("read");
    assert_eq!(
        (crashed.item.state, crashed.item.attempts),
        (InboxState::Done, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_is_answered_with_a_notice_not_silence() {
    let fake = FakeOpenAi::start([Reply::error(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#,
    )])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let reply = answer(
        w.gateway
            .submit(inbound("webhook:t:err", "1", "hi"))
            .await
            .expect("submit"),
    )
    .await;
    assert_eq!(reply.error.as_deref(), Some("auth"));
    assert!(reply.text.contains("operator"), "{}", reply.text);
    assert!(
        !reply.text.contains("Incorrect API key"),
        "provider details stay in the log"
    );
}
