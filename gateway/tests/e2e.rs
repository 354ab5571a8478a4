//! End to end against the running `iris` binary on 127.0.0.1 with the fake model server: a
//! webhook conversation over three turns with a tool call; compression from a small context
//! length, after which the conversation carries on in the child session; the session
//! commands with their effects visible in the store; 200 conversations at once, every reply
//! belonging to its own conversation.

#[path = "common/binary.rs"]
mod binary;

use std::sync::Arc;

use agent_core::store::{Role, SessionStore, SqliteStore};
use binary::{Iris, start};
use serde_json::{Value, json};
use testkit::Reply;
use testkit::openai::FakeOpenAi;

const TOKEN: &str = "e2e-token-0123456789";

async fn daemon(fake: &FakeOpenAi, extra: &str) -> (Iris, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("dir");
    std::fs::write(
        home.path().join("iris.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"main\"\n{extra}\n\n[webhook.routes.e2e]\ntoken_env = \"HOOK_TOKEN\"\n",
            fake.base_url
        ),
    )
    .expect("config");
    let iris = start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    (iris, home)
}

async fn say(iris: &Iris, conversation: &str, text: &str) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{}/hooks/e2e", iris.base))
        .bearer_auth(TOKEN)
        .json(&json!({"conversation": conversation, "user": "u", "text": text}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.expect("json")
}

/// The daemon's own store, opened beside it (SQLite in WAL mode allows that).
async fn store(home: &tempfile::TempDir) -> Arc<dyn SessionStore> {
    Arc::new(
        SqliteStore::open(home.path().join("state.db"))
            .await
            .expect("store"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_conversation_over_three_turns_with_a_tool_call() {
    let fake = FakeOpenAi::start([
        Reply::text("Hello!"),
        Reply::tool_calls([("clock", "{}")]),
        Reply::text("It is the time the clock said."),
        Reply::text("Goodbye!"),
    ])
    .await
    .expect("fake");
    let (iris, home) = daemon(&fake, "").await;
    assert_eq!(say(&iris, "e", "hi").await["reply"], "Hello!");
    assert_eq!(
        say(&iris, "e", "what time is it?").await["reply"],
        "It is the time the clock said."
    );
    let last = say(&iris, "e", "bye").await;
    assert_eq!(last["reply"], "Goodbye!");

    let store = store(&home).await;
    let conversation = store
        .conversation_by_key("webhook:e2e:e")
        .await
        .expect("lookup")
        .expect("exists");
    let session = conversation.current_session_id.expect("session");
    assert_eq!(last["session_id"], session.as_str());
    let messages = store.messages(&session).await.expect("messages");
    let roles: Vec<Role> = messages.iter().map(|m| m.body.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User,
            Role::Assistant
        ]
    );
    assert_eq!(messages[4].body.tool_name.as_deref(), Some("clock"));
    // The tool really ran: its output is a time.
    let output = messages[4].body.content.clone().unwrap_or_default();
    assert!(output.contains("20") && output.contains(':'), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_carries_the_conversation_on_in_a_child_session() {
    // Every answer (and the summary) is ~250 tokens: compressing the middle pays off from the
    // fifth turn on.
    let fake =
        FakeOpenAi::start((0..40).map(|i| Reply::text(format!("reply {i}: {}", "x".repeat(1000)))))
            .await
            .expect("fake");
    let (iris, home) = daemon(
        &fake,
        "context_length = 3000\n\n[compression]\nmin_threshold_tokens = 500\nmemory_flush = false",
    )
    .await;
    let store = store(&home).await;
    let long = "word ".repeat(300);
    let mut child = None;
    for turn in 0..8 {
        say(&iris, "long", &format!("turn {turn}: {long}")).await;
        let conversation = store
            .conversation_by_key("webhook:e2e:long")
            .await
            .expect("lookup")
            .expect("exists");
        let current = store
            .session(&conversation.current_session_id.expect("current"))
            .await
            .expect("load")
            .expect("session");
        if current.parent_session_id.is_some() {
            child = Some(current);
            break;
        }
    }
    let Some(child) = child else {
        panic!(
            "not compressed within 8 turns; the daemon said:\n{}",
            binary::log(home.path())
        );
    };
    assert_eq!(child.compression_count, 1);
    let parent = store
        .session(child.parent_session_id.as_deref().unwrap_or_default())
        .await
        .expect("load")
        .expect("parent");
    assert_eq!(parent.end_reason.as_deref(), Some("compression"));
    // The conversation goes on from the child (still long, it may compress again): the next
    // reply's session descends from it, and its history starts with the summary.
    let next = say(&iris, "long", "and now a short one").await;
    assert!(
        next["reply"]
            .as_str()
            .is_some_and(|r| r.starts_with("reply ")),
        "{next}"
    );
    let next_session = next["session_id"].as_str().expect("session").to_owned();
    let lineage = store.lineage(&next_session).await.expect("lineage");
    assert!(lineage.iter().any(|s| s.id == child.id), "{lineage:?}");
    assert_eq!(
        lineage[0].id, parent.id,
        "the lineage goes back to the first session"
    );
    let messages = store.messages(&child.id).await.expect("messages");
    assert!(messages.iter().any(|m| {
        m.body
            .content
            .as_deref()
            .is_some_and(|c| c.contains("[CONTEXT SUMMARY]"))
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_commands_show_in_the_store() {
    let fake = FakeOpenAi::start((0..10).map(|_| Reply::echo()))
        .await
        .expect("fake");
    let (iris, home) = daemon(&fake, "").await;
    let store = store(&home).await;
    let first = say(&iris, "c", "the kestrel report").await;
    let first_session = first["session_id"].as_str().expect("session").to_owned();
    assert_eq!(
        say(&iris, "c", "/title Kestrels").await["reply"],
        "Titled \"Kestrels\"."
    );
    assert_eq!(
        store
            .session(&first_session)
            .await
            .expect("load")
            .and_then(|s| s.title)
            .as_deref(),
        Some("Kestrels")
    );

    let branched = say(&iris, "c", "/branch").await;
    let branch_id = branched["session_id"].as_str().expect("session").to_owned();
    let branch = store
        .session(&branch_id)
        .await
        .expect("load")
        .expect("branch");
    assert_eq!(
        branch.parent_session_id.as_deref(),
        Some(first_session.as_str())
    );
    assert_eq!(branch.title.as_deref(), Some("Kestrels (2)"));

    let fresh = say(&iris, "c", "/new").await;
    let fresh_id = fresh["session_id"].as_str().expect("session").to_owned();
    let fresh_row = store
        .session(&fresh_id)
        .await
        .expect("load")
        .expect("fresh");
    assert!(fresh_row.parent_session_id.is_none());
    assert_eq!(
        store
            .session(&branch_id)
            .await
            .expect("load")
            .and_then(|s| s.end_reason)
            .as_deref(),
        Some("user_reset")
    );

    let resumed = say(&iris, "c", "/resume Kestrels").await;
    assert_eq!(resumed["reply"], "Resumed Kestrels (2).");
    let conversation = store
        .conversation_by_key("webhook:e2e:c")
        .await
        .expect("lookup")
        .expect("exists");
    assert_eq!(
        conversation.current_session_id.as_deref(),
        Some(branch_id.as_str())
    );

    store.sync_search_index().await.expect("index");
    let found = say(&iris, "c", "/search kestrel").await;
    assert!(
        found["reply"]
            .as_str()
            .is_some_and(|r| r.contains("[kestrel]")),
        "{found}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_conversations_at_once_never_cross() {
    let fake = FakeOpenAi::start((0..200).map(|_| Reply::echo()))
        .await
        .expect("fake");
    let (iris, _home) = daemon(&fake, "\n[webhook]\nrate_limit_per_minute = 10000").await;
    let iris = Arc::new(iris);
    let calls = (0..200).map(|n| {
        let iris = iris.clone();
        tokio::spawn(async move {
            let reply = say(&iris, &format!("crowd-{n}"), &format!("I am number {n}")).await;
            (n, reply)
        })
    });
    for call in futures_util::future::join_all(calls).await {
        let (n, reply) = call.expect("task");
        assert_eq!(
            reply["reply"],
            format!("echo: I am number {n}"),
            "conversation {n}"
        );
        assert_eq!(reply["conversation"], format!("crowd-{n}"));
    }
    assert_eq!(fake.requests().len(), 200);
}
