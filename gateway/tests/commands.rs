//! Chat commands and busy modes through the conversation runtime (DESIGN.md §9), against the
//! fake model and a real SQLite store: what each command answers and changes, which commands
//! act while a turn runs, and what queue, interrupt, steer and collect do with messages that
//! arrive mid-turn.

mod common;

use std::time::Duration;

use agent_core::store::EndReason;
use common::{World, answer, inbound, wait_for, world};
use gateway::conversation::{RuntimeConfig, Submission, TurnReply};
use serde_json::json;
use testkit::Reply;
use testkit::openai::FakeOpenAi;

const KEY: &str = "webhook:t:cmd";

/// Sends `text` as message `id` and waits for its reply.
async fn say(w: &World, id: &str, text: &str) -> TurnReply {
    answer(
        w.gateway
            .submit(inbound(KEY, id, text))
            .await
            .expect("submit"),
    )
    .await
}

/// Sends without waiting; the reply comes later.
async fn send(w: &World, id: &str, text: &str) -> Submission {
    w.gateway
        .submit(inbound(KEY, id, text))
        .await
        .expect("submit")
}

fn last_user_text(fake: &FakeOpenAi) -> String {
    let requests = fake.requests();
    let body = &requests.last().expect("a request").body;
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_every_command_and_unknown_slashes_are_text() {
    let fake = FakeOpenAi::start([Reply::text("a path, yes")])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let help = say(&w, "1", "/help").await;
    assert_eq!(help.text.lines().count(), 15, "{}", help.text);
    assert!(help.text.contains("/resume [id|title|N]"));
    assert!(fake.requests().is_empty(), "commands never reach the model");
    let text = say(&w, "2", "/tmp/x is a path").await;
    assert_eq!(text.text, "a path, yes");
    assert_eq!(last_user_text(&fake), "/tmp/x is a path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_title_sessions_and_resume() {
    let fake = FakeOpenAi::start([Reply::text("one"), Reply::text("two"), Reply::text("three")])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let first = say(&w, "1", "the first topic").await;
    assert_eq!(
        say(&w, "2", "/title Trip to Oslo").await.text,
        "Titled \"Trip to Oslo\"."
    );
    let fresh = say(&w, "3", "/new Budget").await;
    assert_eq!(fresh.text, "Started a new session: Budget.");
    assert_ne!(fresh.session_id, first.session_id);
    let old = w
        .store
        .session(&first.session_id)
        .await
        .expect("load")
        .expect("old");
    assert_eq!(
        old.end_reason.as_deref(),
        Some(EndReason::UserReset.as_str())
    );
    assert_eq!(
        say(&w, "4", "/new Budget").await.text,
        "The title \"Budget\" is taken; pick another."
    );
    let second = say(&w, "5", "the second topic").await;
    assert_eq!(second.session_id, fresh.session_id);
    assert!(
        !fake.requests()[1].body["messages"]
            .to_string()
            .contains("the first topic"),
        "a new session starts empty"
    );

    let listing = say(&w, "6", "/sessions").await.text;
    let lines: Vec<&str> = listing.lines().collect();
    assert!(
        lines[1].starts_with("1. Budget")
            && lines[1].contains("“the second topic”")
            && lines[1].ends_with("← current"),
        "{listing}"
    );
    assert!(
        lines[2].starts_with("2. Trip to Oslo") && lines[2].contains("“the first topic”"),
        "{listing}"
    );

    assert_eq!(
        say(&w, "7", "/resume 2").await.text,
        "Resumed Trip to Oslo."
    );
    say(&w, "8", "back to Oslo").await;
    let body = fake.requests()[2].body["messages"].to_string();
    assert!(
        body.contains("the first topic") && !body.contains("the second topic"),
        "{body}"
    );
    assert_eq!(say(&w, "9", "/resume Budget").await.text, "Resumed Budget.");
    assert_eq!(
        say(&w, "10", &format!("/resume {}", first.session_id))
            .await
            .text,
        "Resumed Trip to Oslo."
    );
    assert!(
        say(&w, "11", "/resume nowhere")
            .await
            .text
            .starts_with("No session \"nowhere\"")
    );
    assert_eq!(
        say(&w, "12", "/title").await.text,
        "This session is titled \"Trip to Oslo\"."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_search_status_usage_and_model() {
    let fake = FakeOpenAi::start([
        Reply::text("zanzibar noted").usage(1_234, 56),
        Reply::text("on the other model"),
        Reply::text("after restore"),
    ])
    .await
    .expect("fake");
    let w = world(
        &fake,
        RuntimeConfig {
            idle_ttl: Duration::from_millis(200),
            ..RuntimeConfig::default()
        },
    )
    .await;
    let first = say(&w, "1", "remember zanzibar").await;
    let status = say(&w, "2", "/status").await.text;
    assert!(
        status.contains(&first.session_id)
            && status.contains("Model: main")
            && status.contains("1234 in, 56 out"),
        "{status}"
    );
    assert!(status.contains("Context: 1234 tokens"), "{status}");
    assert!(
        say(&w, "3", "/usage")
            .await
            .text
            .contains("1 model calls, 1234 tokens in")
    );
    w.store.sync_search_index().await.expect("index");
    let found = say(&w, "4", "/search zanzibar").await.text;
    assert!(
        found.contains("[zanzibar]") && found.lines().count() == 2,
        "{found}"
    );

    let branched = say(&w, "5", "/branch Side quest").await;
    assert!(
        branched.text.starts_with("Branched into Side quest"),
        "{}",
        branched.text
    );
    assert_ne!(branched.session_id, first.session_id);

    assert_eq!(
        say(&w, "6", "/model other-model").await.text,
        "Model for this conversation: other-model."
    );
    say(&w, "7", "hello").await;
    assert_eq!(fake.requests()[1].body["model"], "other-model");
    assert!(
        fake.requests()[1].body["messages"]
            .to_string()
            .contains("remember zanzibar"),
        "the branch kept the history"
    );
    // The choice is a conversation setting: it survives the actor leaving memory.
    wait_for(|| w.gateway.resident() == 0).await;
    say(&w, "8", "still there?").await;
    assert_eq!(fake.requests()[2].body["model"], "other-model");
    assert_eq!(say(&w, "9", "/model").await.text, "Model: other-model.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_and_retry_change_what_the_model_sees() {
    let fake = FakeOpenAi::start([
        Reply::text("answer one"),
        Reply::text("answer two"),
        Reply::text("answer two, again"),
        Reply::text("answer three"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    say(&w, "1", "first question").await;
    say(&w, "2", "second question").await;
    let retried = say(&w, "3", "/retry").await;
    assert_eq!(retried.text, "answer two, again");
    assert_eq!(last_user_text(&fake), "second question");
    let sent = fake.requests()[2].body["messages"].to_string();
    assert!(
        !sent.contains("answer two\""),
        "the replaced answer is not resent: {sent}"
    );
    assert_eq!(
        say(&w, "4", "/undo").await.text,
        "Forgot the last exchange."
    );
    say(&w, "5", "third question").await;
    let sent = fake.requests()[3].body["messages"].to_string();
    assert!(
        sent.contains("first question") && !sent.contains("second question"),
        "{sent}"
    );
    assert_eq!(fake.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_status_and_new_act_mid_turn_and_others_wait() {
    let fake = FakeOpenAi::start([Reply::hang(), Reply::hang()])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let running = send(&w, "1", "a long job").await;
    wait_for(|| fake.requests().len() == 1).await;
    let status = say(&w, "2", "/status").await;
    assert!(status.text.contains("a turn is running"), "{}", status.text);
    let busy = say(&w, "3", "/title nope").await;
    assert_eq!(busy.error.as_deref(), Some("busy"));
    let stop = say(&w, "4", "/stop").await;
    assert_eq!(stop.text, "Stopping the running turn.");
    let stopped = answer(running).await;
    assert_eq!(stopped.text, "Stopped.");

    // /new while a turn runs: the turn ends, then the session rotates.
    let running = send(&w, "5", "another long job").await;
    wait_for(|| fake.requests().len() == 2).await;
    let fresh = answer(send(&w, "6", "/new").await).await;
    let cut = answer(running).await;
    assert_eq!(cut.error.as_deref(), Some("interrupted"));
    assert_eq!(fresh.text, "Started a new session.");
    assert_ne!(fresh.session_id, cut.session_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_mode_answers_in_order_with_one_acknowledgement() {
    let fake = FakeOpenAi::start([
        Reply::text("first").delay(Duration::from_millis(400)),
        Reply::text("second"),
        Reply::text("third"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    let mut notices = w.gateway.notices();
    let a = send(&w, "1", "one").await;
    wait_for(|| fake.requests().len() == 1).await;
    let b = send(&w, "2", "two").await;
    let c = send(&w, "3", "three").await;
    let replies = [answer(a).await, answer(b).await, answer(c).await];
    let texts: Vec<&str> = replies.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(texts, ["first", "second", "third"]);
    let ack = notices.try_recv().expect("one acknowledgement");
    assert_eq!(ack.conversation_key, KEY);
    assert!(
        notices.try_recv().is_err(),
        "at most one acknowledgement per 30 s"
    );
}

async fn with_mode(w: &World, mode: &str) {
    // The conversation exists after its first message; set its busy mode directly.
    let conversation = w
        .store
        .conversation(&agent_core::store::NewConversation::new(KEY, "webhook"))
        .await
        .expect("conversation");
    w.store
        .set_conversation_settings(conversation.id, &json!({"busy_mode": mode}))
        .await
        .expect("settings");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_mode_drops_the_stale_reply_and_answers_the_newest() {
    let fake = FakeOpenAi::start([
        Reply::stalled("an answer nobody will"),
        Reply::text("the newest answered"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    with_mode(&w, "interrupt").await;
    let old = send(&w, "1", "old question").await;
    wait_for(|| fake.requests().len() == 1).await;
    let new = send(&w, "2", "new question").await;
    let (old, new) = (answer(old).await, answer(new).await);
    assert_eq!(old.error.as_deref(), Some("interrupted"));
    assert!(
        !old.text.contains("nobody will"),
        "the stale reply is never delivered"
    );
    assert_eq!(new.text, "the newest answered");
    assert_eq!(last_user_text(&fake), "new question");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_mode_folds_a_message_into_the_running_turn() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]).delay(Duration::from_millis(400)),
        Reply::text("noon, and in Oslo too"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    with_mode(&w, "steer").await;
    let asked = send(&w, "1", "what time is it?").await;
    wait_for(|| fake.requests().len() == 1).await;
    let steer = send(&w, "2", "and in Oslo?").await;
    let (asked, steer) = (answer(asked).await, answer(steer).await);
    assert_eq!(asked.text, "noon, and in Oslo too");
    assert_eq!(steer.text, asked.text, "one turn answered both");
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(
        last_user_text(&fake),
        "and in Oslo?",
        "injected after the tool round"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_mode_answers_what_arrived_mid_turn_in_one_next_turn() {
    let fake = FakeOpenAi::start([
        Reply::text("first").delay(Duration::from_millis(400)),
        Reply::text("both answered"),
    ])
    .await
    .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    with_mode(&w, "collect").await;
    let first = send(&w, "1", "one").await;
    wait_for(|| fake.requests().len() == 1).await;
    let a = send(&w, "2", "part a").await;
    let b = send(&w, "3", "part b").await;
    assert_eq!(answer(first).await.text, "first");
    let (a, b) = (answer(a).await, answer(b).await);
    assert_eq!(a.text, "(Answered together with your next message.)");
    assert_eq!(b.text, "both answered");
    assert_eq!(fake.requests().len(), 2, "one turn for both");
    assert_eq!(last_user_text(&fake), "part a\n\npart b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_conversation_follows_a_reloaded_default_busy_mode_and_agent() {
    let fake = FakeOpenAi::start([
        Reply::text("queued mode"),
        Reply::stalled("an answer nobody will"),
        Reply::text("the newest answered"),
    ])
    .await
    .expect("fake");
    let other = FakeOpenAi::start([Reply::text("from the new agent")])
        .await
        .expect("fake");
    let w = world(&fake, RuntimeConfig::default()).await;
    // Resident, in the default (queue) mode, with no mode of its own.
    assert_eq!(say(&w, "1", "hello").await.text, "queued mode");

    w.gateway
        .set_busy_mode(gateway::config::BusyMode::Interrupt);
    let old = send(&w, "2", "old question").await;
    wait_for(|| fake.requests().len() == 2).await;
    let new = send(&w, "3", "new question").await;
    let (old, new) = (answer(old).await, answer(new).await);
    assert_eq!(
        old.error.as_deref(),
        Some("interrupted"),
        "the running actor took the new default"
    );
    assert_eq!(new.text, "the newest answered");

    // A swapped agent answers the next turn, with the conversation's history.
    w.gateway.set_agent(common::agent(&other, w.store.clone()));
    assert_eq!(say(&w, "4", "and now?").await.text, "from the new agent");
    assert_eq!(fake.requests().len(), 3);
    let body = other.requests()[0].body.to_string();
    assert!(body.contains("new question"), "{body}");
}
