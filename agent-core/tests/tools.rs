//! The tool registry turns every failure into an answer the model can read, and the built-in
//! `clock` and `todo` tools behave as documented.

use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::clock::Clock;
use agent_core::tools::todo::Todo;
use agent_core::tools::{Tool, ToolContext, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Sleeps for `secs` seconds unless cancelled.
struct Sleeper;

#[async_trait::async_trait]
impl Tool for Sleeper {
    fn name(&self) -> &str {
        "sleep"
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(
        &self,
        args: Value,
        _ctx: &ToolContext,
        _cancel: &CancellationToken,
    ) -> ToolOutput {
        let secs = args["secs"].as_u64().unwrap_or(60);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        ToolOutput::ok("awake")
    }
}

fn ctx(session: &str) -> ToolContext {
    ToolContext {
        session_id: session.into(),
        conversation_id: 1,
    }
}

fn registry(todo: Arc<Todo>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(Arc::new(Clock));
    r.register(todo);
    r.register(Arc::new(Sleeper));
    r
}

#[tokio::test]
async fn schemas_are_sorted_and_complete() {
    let r = registry(Arc::new(Todo::default()));
    let names: Vec<String> = r.schemas().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["clock", "sleep", "todo"]);
    assert_eq!(r.schemas()[2].parameters["required"], json!(["op"]));
}

#[tokio::test(start_paused = true)]
async fn failures_become_error_outputs() {
    let r = registry(Arc::new(Todo::default()));
    let cancel = CancellationToken::new();
    let t = Duration::from_secs(5);
    let out = r.call("nope", "{}", &ctx("s"), t, &cancel).await;
    assert!(
        out.is_error && out.content.contains("unknown tool") && out.content.contains("clock"),
        "{out:?}"
    );
    let out = r.call("todo", "{not json", &ctx("s"), t, &cancel).await;
    assert!(
        out.is_error && out.content.contains("not valid JSON"),
        "{out:?}"
    );
    let out = r
        .call("sleep", r#"{"secs": 60}"#, &ctx("s"), t, &cancel)
        .await;
    assert!(
        out.is_error && out.content.contains("within 5 s"),
        "{out:?}"
    );
    let out = r
        .call("sleep", r#"{"secs": 1}"#, &ctx("s"), t, &cancel)
        .await;
    assert_eq!(out, ToolOutput::ok("awake"));
    cancel.cancel();
    let out = r
        .call("sleep", r#"{"secs": 1}"#, &ctx("s"), t, &cancel)
        .await;
    assert_eq!(out, ToolOutput::error("cancelled"));
}

#[tokio::test]
async fn clock_answers_rfc3339_at_an_offset() {
    let r = registry(Arc::new(Todo::default()));
    let cancel = CancellationToken::new();
    let t = Duration::from_secs(5);
    let utc = r.call("clock", "", &ctx("s"), t, &cancel).await;
    assert!(!utc.is_error);
    let parsed = chrono::DateTime::parse_from_rfc3339(&utc.content).expect("RFC 3339");
    assert_eq!(parsed.offset().local_minus_utc(), 0);
    let plus2 = r
        .call(
            "clock",
            r#"{"utc_offset_minutes": 120}"#,
            &ctx("s"),
            t,
            &cancel,
        )
        .await;
    assert!(plus2.content.ends_with("+02:00"), "{plus2:?}");
    let bad = r
        .call(
            "clock",
            r#"{"utc_offset_minutes": 5000}"#,
            &ctx("s"),
            t,
            &cancel,
        )
        .await;
    assert!(bad.is_error);
}

#[tokio::test]
async fn todo_keeps_one_list_per_session() {
    let todo = Arc::new(Todo::default());
    let r = registry(todo.clone());
    let cancel = CancellationToken::new();
    let t = Duration::from_secs(5);
    let call = |session: &'static str, args: Value| {
        let r = r.clone();
        let cancel = cancel.clone();
        async move {
            r.call("todo", &args.to_string(), &ctx(session), t, &cancel)
                .await
        }
    };
    call("a", json!({"op": "add", "text": "write tests"})).await;
    call("a", json!({"op": "add", "text": "ship"})).await;
    let out = call("a", json!({"op": "done", "n": 1})).await;
    assert_eq!(out, ToolOutput::ok("1. [x] write tests\n2. [ ] ship"));
    assert_eq!(
        call("b", json!({"op": "list"})).await.content,
        "(the todo list is empty)"
    );
    let out = call("a", json!({"op": "remove", "n": 3})).await;
    assert!(out.is_error && out.content.contains("no item 3"), "{out:?}");
    assert!(call("a", json!({"op": "add", "text": "  "})).await.is_error);
    assert!(call("a", json!({"op": "fly"})).await.is_error);
    assert!(call("a", json!({})).await.is_error);
    call("a", json!({"op": "remove", "n": 1})).await;
    assert_eq!(todo.items("a").len(), 1);
    assert_eq!(todo.items("a")[0].text, "ship");
    call("a", json!({"op": "clear"})).await;
    assert!(todo.items("a").is_empty());
}

#[tokio::test]
async fn memory_is_per_conversation_bounded_and_snapshotted() {
    use agent_core::tools::memory::{MemoryFile, MemoryStore};
    let dir = tempfile::tempdir().expect("dir");
    let memory = Arc::new(MemoryStore::new(dir.path()));
    let mut r = ToolRegistry::new();
    r.register(memory.clone());
    let cancel = CancellationToken::new();
    let t = Duration::from_secs(5);
    let alice = ToolContext {
        session_id: "s1".into(),
        conversation_id: 1,
    };
    let bob = ToolContext {
        session_id: "s2".into(),
        conversation_id: 2,
    };
    let call = |ctx: &ToolContext, args: Value| {
        let (r, cancel, ctx) = (r.clone(), cancel.clone(), ctx.clone());
        async move { r.call("memory", &args.to_string(), &ctx, t, &cancel).await }
    };

    let out = call(
        &alice,
        json!({"op": "add", "file": "user", "text": "Alice prefers metric units"}),
    )
    .await;
    assert!(!out.is_error && out.content.contains("of 1375"), "{out:?}");
    call(
        &alice,
        json!({"op": "add", "file": "memory", "text": "Project: Hydra ferry booking"}),
    )
    .await;
    call(
        &alice,
        json!({"op": "add", "file": "memory", "text": "Deadline Friday"}),
    )
    .await;
    let out = call(
        &alice,
        json!({"op": "replace", "file": "memory", "old": "Friday", "new": "Deadline Monday"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        memory.entries(1, MemoryFile::Memory).await.expect("read"),
        ["Project: Hydra ferry booking", "Deadline Monday"]
    );
    assert!(
        call(
            &alice,
            json!({"op": "remove", "file": "memory", "old": "nowhere"})
        )
        .await
        .is_error
    );
    assert!(
        call(&alice, json!({"op": "add", "file": "diary", "text": "x"}))
            .await
            .is_error
    );

    // Another conversation sees none of it.
    assert_eq!(
        call(&bob, json!({"op": "read", "file": "user"}))
            .await
            .content,
        "(empty)"
    );
    assert!(memory.snapshot(2).await.expect("snapshot").is_empty());

    // The limit is hard, and says how much room there is.
    let big = "x".repeat(1400);
    let out = call(&alice, json!({"op": "add", "file": "user", "text": big})).await;
    assert!(out.is_error && out.content.contains("of 1375"), "{out:?}");
    assert_eq!(
        memory
            .entries(1, MemoryFile::User)
            .await
            .expect("read")
            .len(),
        1,
        "refused edits change nothing"
    );

    let snapshot = memory.snapshot(1).await.expect("snapshot");
    assert!(
        snapshot.contains("Hydra ferry") && snapshot.contains("metric units"),
        "{snapshot}"
    );
    assert!(snapshot.find("MEMORY.md") < snapshot.find("USER.md"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_search_stays_inside_the_lineage_or_conversation() {
    use agent_core::store::{
        EndReason, NewConversation, NewMessage, Role, Rotation, SessionSpec, SessionStore,
        SqliteStore,
    };
    use agent_core::tools::session_search::{SearchScope, SessionSearch};
    let dir = tempfile::tempdir().expect("dir");
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(dir.path().join("s.db"))
            .await
            .expect("open"),
    );
    let mine = store
        .conversation(&NewConversation::new("api:me", "api"))
        .await
        .expect("conv");
    let theirs = store
        .conversation(&NewConversation::new("api:them", "api"))
        .await
        .expect("conv");
    let root = store
        .start_session(mine.id, &SessionSpec::default())
        .await
        .expect("session");
    store
        .append_messages(
            &root.id,
            &[NewMessage::text(Role::User, "the vault code is tangerine")],
        )
        .await
        .expect("append");
    let rotation = |from: &str, reason, link| Rotation {
        conversation_id: mine.id,
        from_session_id: from.to_owned(),
        end_reason: reason,
        link_parent: link,
        spec: SessionSpec::default(),
        messages: vec![],
    };
    let child = store
        .rotate(&rotation(&root.id, EndReason::Compression, true))
        .await
        .expect("compress");
    let other = store
        .start_session(theirs.id, &SessionSpec::default())
        .await
        .expect("session");
    store
        .append_messages(
            &other.id,
            &[NewMessage::text(Role::User, "my tangerine tree")],
        )
        .await
        .expect("append");
    store.sync_search_index().await.expect("index");

    let cancel = CancellationToken::new();
    let t = Duration::from_secs(5);
    let ctx = ToolContext {
        session_id: child.id.clone(),
        conversation_id: mine.id,
    };
    let mut r = ToolRegistry::new();
    r.register(Arc::new(SessionSearch::new(
        store.clone(),
        SearchScope::Lineage,
    )));
    let out = r
        .call(
            "session_search",
            r#"{"query": "tangerine"}"#,
            &ctx,
            t,
            &cancel,
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert!(
        out.content.contains("[tangerine]") && out.content.contains(&root.id),
        "{out:?}"
    );
    assert_eq!(
        out.content.lines().count(),
        1,
        "another conversation's message must not appear: {out:?}"
    );

    // After /new, the lineage no longer reaches the old session; the conversation scope does.
    let fresh = store
        .rotate(&rotation(&child.id, EndReason::UserReset, false))
        .await
        .expect("reset");
    let ctx = ToolContext {
        session_id: fresh.id.clone(),
        conversation_id: mine.id,
    };
    let out = r
        .call(
            "session_search",
            r#"{"query": "tangerine"}"#,
            &ctx,
            t,
            &cancel,
        )
        .await;
    assert_eq!(out.content, "no matches");
    let mut wide = ToolRegistry::new();
    wide.register(Arc::new(SessionSearch::new(
        store.clone(),
        SearchScope::Conversation,
    )));
    let out = wide
        .call(
            "session_search",
            r#"{"query": "vault tangerine"}"#,
            &ctx,
            t,
            &cancel,
        )
        .await;
    assert_eq!(out.content.lines().count(), 1, "{out:?}");
    assert!(
        r.call("session_search", "{}", &ctx, t, &cancel)
            .await
            .is_error
    );
}

/// Prints whatever it is given, as a `cat` of a config file would.
struct Echo;

#[async_trait::async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "echoes"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: Value, _: &ToolContext, _: &CancellationToken) -> ToolOutput {
        ToolOutput::ok(args["text"].as_str().unwrap_or_default())
    }
}

#[tokio::test]
async fn tool_outputs_are_redacted_before_anyone_sees_them() {
    let call = |r: ToolRegistry, text: &'static str| async move {
        r.call(
            "echo",
            &json!({ "text": text }).to_string(),
            &ctx("s"),
            Duration::from_secs(5),
            &CancellationToken::new(),
        )
        .await
        .content
    };
    let mut plain = ToolRegistry::new();
    plain.register(Arc::new(Echo));
    let out = call(
        plain.clone(),
        "OPENAI_API_KEY=sk-proj-AAAAAAAAAAAAAAAAAAAAAAAAAAAA1234\nDEBUG=true",
    )
    .await;
    assert!(!out.contains("AAAAAAAAAAAAAAAAAAAA"), "{out}");
    assert!(out.ends_with("DEBUG=true"), "the rest is kept: {out}");
    assert_eq!(
        call(plain.clone(), "nothing secret here").await,
        "nothing secret here"
    );

    // A deployment's own secrets are masked whatever their shape.
    let known = plain.with_redactor(Arc::new(agent_core::redact::Redactor::with_secrets([
        "correct horse battery staple",
    ])));
    let out = call(known, "the phrase is correct horse battery staple").await;
    assert!(!out.contains("battery staple"), "{out}");
}

#[tokio::test]
async fn durable_todo_lists_survive_a_restart_and_follow_compression() {
    let dir = tempfile::tempdir().expect("dir");
    let first = Todo::durable(dir.path());
    for text in ["book flights", "pack"] {
        let out = first
            .call(
                json!({"op": "add", "text": text}),
                &ctx("20261130_120000_aaaaaa"),
                &CancellationToken::new(),
            )
            .await;
        assert!(!out.is_error, "{out:?}");
    }

    // A new process on the same directory sees the list.
    let restarted = Todo::durable(dir.path());
    let items = restarted.items("20261130_120000_aaaaaa");
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, ["book flights", "pack"]);

    // Carried to the next session, on disk too.
    restarted.carry("20261130_120000_aaaaaa", "20261130_130000_bbbbbb");
    assert_eq!(
        Todo::durable(dir.path())
            .items("20261130_130000_bbbbbb")
            .len(),
        2
    );

    // A damaged file is ignored, not fatal.
    std::fs::write(dir.path().join("20261130_140000_cccccc.json"), b"{not json").expect("write");
    assert!(
        Todo::durable(dir.path())
            .items("20261130_140000_cccccc")
            .is_empty()
    );
    // Memory-only lists write nothing.
    let files = std::fs::read_dir(dir.path()).expect("dir").count();
    let _ = Todo::new().items("x");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), files);
}
