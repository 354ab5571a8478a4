//! The session-store contract: every test here runs against SQLite and against PostgreSQL.
//!
//! PostgreSQL comes from `DATABASE_URL` (scripts/test.sh starts a throw-away server); each test
//! gets its own schema. Without `DATABASE_URL` the PostgreSQL half says it is skipped, unless
//! `IRIS_TEST_REQUIRE_POSTGRES=true` (CI), where that is a failure.

use std::sync::Arc;

use agent_core::store::{
    EndReason, InboxState, NewConversation, NewInboxItem, NewMessage, NewOutboxItem, OutboxState,
    Role, Rotation, SearchQuery, SessionFilter, SessionSpec, SessionStore, SessionUsage,
    SqliteStore, StoreError,
};
use serde_json::json;

struct Backend {
    store: Arc<dyn SessionStore>,
    _dir: Option<tempfile::TempDir>,
}

async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("state.db"))
        .await
        .expect("open sqlite");
    Backend {
        store: Arc::new(store),
        _dir: Some(dir),
    }
}

async fn postgres() -> Option<Backend> {
    let store = postgres_store().await?;
    Some(Backend {
        store: Arc::new(store),
        _dir: None,
    })
}

/// A PostgreSQL store in a fresh schema of `DATABASE_URL`.
async fn postgres_store() -> Option<agent_core::store::PostgresStore> {
    use sqlx::postgres::PgConnectOptions;
    let Ok(url) = std::env::var("DATABASE_URL") else {
        let required = std::env::var("IRIS_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "true");
        assert!(
            !required,
            "DATABASE_URL is not set but PostgreSQL is required (CI)"
        );
        eprintln!("SKIPPED: PostgreSQL contract test (no DATABASE_URL; run scripts/test.sh)");
        return None;
    };
    let admin = sqlx::PgPool::connect(&url)
        .await
        .expect("connect to DATABASE_URL");
    let schema = format!("contract_{:016x}", fastrand::u64(..));
    let mut tx = admin.begin().await.expect("begin");
    // Serialise extension creation: parallel test processes would race on it.
    sqlx::query("SELECT pg_advisory_xact_lock(4242)")
        .execute(&mut *tx)
        .await
        .expect("lock");
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        .execute(&mut *tx)
        .await
        .expect("pg_trgm");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut *tx)
        .await
        .expect("schema");
    tx.commit().await.expect("commit");
    let options: PgConnectOptions = url.parse().expect("url");
    let options = options.options([("search_path", format!("{schema},public"))]);
    let store = agent_core::store::PostgresStore::connect_with(options)
        .await
        .expect("open postgres");
    Some(store)
}

/// Instantiates each contract test for both backends.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let backend = super::sqlite().await;
                    super::$name(backend.store.clone()).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(backend) = super::postgres().await else { return };
                    super::$name(backend.store.clone()).await;
                }
            )*
        }
    };
}

contract!(
    conversations_are_created_once_per_key,
    sessions_start_with_documented_ids_and_source,
    appended_messages_round_trip_with_counters,
    append_to_unknown_session_writes_nothing,
    first_end_reason_wins,
    compression_rotation_links_numbers_and_repoints,
    rotation_is_atomic_when_it_fails,
    reset_starts_an_unlinked_session,
    branch_copies_messages_and_ends_source,
    resume_reopens_and_switches,
    titles_are_unique_and_resolve_to_newest_variant,
    usage_accumulates,
    lineage_walks_to_root_and_family,
    inbox_deduplicates_and_tracks_attempts,
    outbox_reuses_rows_per_turn_and_target,
    sessions_list_by_conversation_and_source,
    search_finds_words_tools_and_filters,
    search_handles_cjk_substrings,
    search_accepts_any_user_text,
    search_resolves_hits_to_lineage_root,
    concurrent_writers_never_fail,
    migrations_are_current,
);

async fn conversation(store: &Arc<dyn SessionStore>, key: &str) -> agent_core::store::Conversation {
    let source = key.split(':').next().unwrap_or("test");
    store
        .conversation(&NewConversation::new(key, source))
        .await
        .expect("conversation")
}

async fn started(store: &Arc<dyn SessionStore>, key: &str) -> (i64, String) {
    let c = conversation(store, key).await;
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("start");
    (c.id, s.id)
}

fn user(text: &str) -> NewMessage {
    NewMessage::text(Role::User, text)
}

fn assistant(text: &str) -> NewMessage {
    NewMessage::text(Role::Assistant, text)
}

async fn conversations_are_created_once_per_key(store: Arc<dyn SessionStore>) {
    let mut new = NewConversation::new("telegram:dm:42", "telegram");
    new.chat_id = Some("42".into());
    let a = store.conversation(&new).await.expect("create");
    let b = store.conversation(&new).await.expect("get");
    assert_eq!(a.id, b.id);
    assert_eq!(b.chat_id.as_deref(), Some("42"));
    assert_eq!(b.settings, json!({}));
    let other = conversation(&store, "telegram:dm:43").await;
    assert_ne!(other.id, a.id);

    store
        .set_conversation_settings(a.id, &json!({"busy_mode": "interrupt"}))
        .await
        .expect("settings");
    let again = store
        .conversation_by_key("telegram:dm:42")
        .await
        .expect("by key")
        .expect("exists");
    assert_eq!(again.settings["busy_mode"], "interrupt");
    assert!(
        store
            .conversation_by_key("nope")
            .await
            .expect("lookup")
            .is_none()
    );
    assert!(matches!(
        store.set_conversation_settings(999_999, &json!({})).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn sessions_start_with_documented_ids_and_source(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "discord:dm:7").await;
    let spec = SessionSpec {
        title: None,
        model: Some("m1".into()),
        system_prompt: Some("be brief".into()),
    };
    let s = store.start_session(c.id, &spec).await.expect("start");
    let id = s.id.as_bytes();
    assert_eq!(s.id.len(), 22, "{}", s.id);
    assert!(id[..8].iter().all(u8::is_ascii_digit) && id[8] == b'_' && id[15] == b'_');
    assert!(id[16..].iter().all(u8::is_ascii_hexdigit));
    assert_eq!(s.source, "discord");
    assert_eq!(s.model.as_deref(), Some("m1"));
    assert_eq!(s.system_prompt.as_deref(), Some("be brief"));
    assert!(s.ended_at.is_none() && s.parent_session_id.is_none());
    let c = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c.current_session_id.as_deref(), Some(s.id.as_str()));
    let loaded = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(loaded, s);
}

async fn appended_messages_round_trip_with_counters(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:alice").await;
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(json!([
        {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "todo", "arguments": "{\"op\":\"list\"}"}}
    ]));
    call.finish_reason = Some("tool_calls".into());
    let mut result = NewMessage::text(Role::Tool, "12:00");
    result.tool_call_id = Some("c1".into());
    result.tool_name = Some("clock".into());
    result.token_count = Some(3);
    let batch = vec![user("what time is it?"), call.clone(), result.clone()];
    let ids = store.append_messages(&sid, &batch).await.expect("append");
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let more = store
        .append_messages(&sid, &[assistant("noon")])
        .await
        .expect("append");
    assert!(more[0] > ids[2]);

    let messages = store.messages(&sid).await.expect("load");
    let bodies: Vec<_> = messages.iter().map(|m| m.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![user("what time is it?"), call, result, assistant("noon")]
    );
    assert!(messages.iter().all(|m| m.active && m.session_id == sid));
    let session = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(session.message_count, 4);
    assert_eq!(session.tool_call_count, 2);

    assert_eq!(
        store
            .deactivate_messages(&sid, &[more[0]])
            .await
            .expect("undo"),
        1
    );
    let after = store.messages(&sid).await.expect("load");
    assert_eq!(after.len(), 3);
    assert_eq!(
        store.append_messages(&sid, &[]).await.expect("empty"),
        Vec::<i64>::new()
    );
}

async fn append_to_unknown_session_writes_nothing(store: Arc<dyn SessionStore>) {
    let err = store
        .append_messages("19990101_000000_abcdef", &[user("lost?")])
        .await;
    assert!(err.is_err(), "appending to a missing session must fail");
    // The failed write left nothing behind on the writer: the next append commits normally.
    let (_, sid) = started(&store, "api:after-failure").await;
    let ids = store
        .append_messages(&sid, &[user("kept")])
        .await
        .expect("append after a failure");
    assert_eq!(ids.len(), 1);
    assert_eq!(store.messages(&sid).await.expect("load").len(), 1);
    store.sync_search_index().await.expect("index");
    let hits = store
        .search(&SearchQuery {
            text: "lost".into(),
            ..Default::default()
        })
        .await;
    assert!(hits.expect("search").is_empty());
}

async fn first_end_reason_wins(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "webhook:r:c1").await;
    assert!(
        store
            .end_session(&sid, EndReason::UserReset)
            .await
            .expect("end")
    );
    assert!(
        !store
            .end_session(&sid, EndReason::Compression)
            .await
            .expect("end again")
    );
    let s = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(s.end_reason.as_deref(), Some("user_reset"));
    assert!(s.ended_at.is_some());
    assert!(matches!(
        store
            .end_session("19990101_000000_000000", EndReason::UserReset)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

fn compression(conversation_id: i64, from: &str, messages: Vec<NewMessage>) -> Rotation {
    Rotation {
        conversation_id,
        from_session_id: from.to_owned(),
        end_reason: EndReason::Compression,
        link_parent: true,
        spec: SessionSpec::default(),
        messages,
    }
}

async fn compression_rotation_links_numbers_and_repoints(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "telegram:dm:100").await;
    let title = format!("Refactor auth {}", fastrand::u32(..));
    let spec = SessionSpec {
        title: Some(title.clone()),
        ..Default::default()
    };
    let first = store.start_session(c.id, &spec).await.expect("start");
    store
        .append_messages(&first.id, &[user("a"), assistant("b")])
        .await
        .expect("append");

    let summary = vec![user("[summary] a/b"), assistant("ok")];
    let second = store
        .rotate(&compression(c.id, &first.id, summary.clone()))
        .await
        .expect("rotate");
    assert_eq!(second.parent_session_id.as_deref(), Some(first.id.as_str()));
    assert_eq!(
        second.title.as_deref(),
        Some(format!("{title} (2)").as_str())
    );
    assert_eq!(second.compression_count, 1);
    assert_eq!(second.message_count, 2);
    assert_eq!(second.source, "telegram");
    let bodies: Vec<_> = store
        .messages(&second.id)
        .await
        .expect("load")
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, summary);
    let old = store
        .session(&first.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(old.end_reason.as_deref(), Some("compression"));
    assert_eq!(store.messages(&first.id).await.expect("old kept").len(), 2);
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(second.id.as_str()));

    let third = store
        .rotate(&compression(c.id, &second.id, vec![]))
        .await
        .expect("rotate");
    assert_eq!(
        third.title.as_deref(),
        Some(format!("{title} (3)").as_str())
    );
    assert_eq!(third.compression_count, 2);
}

async fn rotation_is_atomic_when_it_fails(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "api:atomic").await;
    let taken = format!("Taken {}", fastrand::u32(..));
    let other = conversation(&store, "api:other").await;
    store
        .start_session(
            other.id,
            &SessionSpec {
                title: Some(taken.clone()),
                ..Default::default()
            },
        )
        .await
        .expect("other");
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("start");
    let mut rotation = compression(c.id, &s.id, vec![user("summary")]);
    rotation.end_reason = EndReason::UserReset;
    rotation.link_parent = false;
    rotation.spec.title = Some(taken.clone());
    match store.rotate(&rotation).await {
        Err(StoreError::TitleTaken(t)) => assert_eq!(t, taken),
        other => panic!("expected TitleTaken, got {other:?}"),
    }
    let unchanged = store.session(&s.id).await.expect("load").expect("exists");
    assert!(
        unchanged.end_reason.is_none(),
        "old session must not be ended by a failed rotation"
    );
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(s.id.as_str()));
    assert_eq!(
        store
            .list_sessions(&SessionFilter {
                conversation_id: Some(c.id),
                ..Default::default()
            })
            .await
            .expect("list")
            .len(),
        1
    );

    // Rotating from a session that is no longer current is refused.
    let next = store
        .rotate(&compression(c.id, &s.id, vec![]))
        .await
        .expect("rotate");
    assert!(matches!(
        store.rotate(&compression(c.id, &s.id, vec![])).await,
        Err(StoreError::Invalid(_))
    ));
    let c3 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c3.current_session_id.as_deref(), Some(next.id.as_str()));
}

async fn reset_starts_an_unlinked_session(store: Arc<dyn SessionStore>) {
    let (cid, sid) = started(&store, "discord:thread:9").await;
    let rotation = Rotation {
        conversation_id: cid,
        from_session_id: sid.clone(),
        end_reason: EndReason::UserReset,
        link_parent: false,
        spec: SessionSpec::default(),
        messages: vec![],
    };
    let fresh = store.rotate(&rotation).await.expect("reset");
    assert!(fresh.parent_session_id.is_none());
    assert_eq!(fresh.compression_count, 0);
    assert_eq!(fresh.message_count, 0);
    let old = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(old.end_reason.as_deref(), Some("user_reset"));
}

async fn branch_copies_messages_and_ends_source(store: Arc<dyn SessionStore>) {
    let c = conversation(&store, "webhook:r:branch").await;
    let title = format!("Plan {}", fastrand::u32(..));
    let s = store
        .start_session(
            c.id,
            &SessionSpec {
                title: Some(title.clone()),
                model: Some("m".into()),
                ..Default::default()
            },
        )
        .await
        .expect("start");
    let ids = store
        .append_messages(&s.id, &[user("one"), assistant("two"), user("three")])
        .await
        .expect("append");
    store
        .deactivate_messages(&s.id, &ids[2..])
        .await
        .expect("undo");
    let b = store.branch(&s.id, None).await.expect("branch");
    assert_eq!(b.parent_session_id.as_deref(), Some(s.id.as_str()));
    assert_eq!(b.title.as_deref(), Some(format!("{title} (2)").as_str()));
    assert_eq!(b.model.as_deref(), Some("m"));
    let copied: Vec<_> = store
        .messages(&b.id)
        .await
        .expect("load")
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(copied, vec![user("one"), assistant("two")]);
    let src = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(src.end_reason.as_deref(), Some("branched"));
    assert_eq!(store.messages(&s.id).await.expect("source kept").len(), 2);
    let named = store.branch(&b.id, Some("Side quest")).await;
    let named = named.expect("named branch");
    assert_eq!(named.title.as_deref(), Some("Side quest"));
    let c2 = store
        .conversation_by_id(c.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c2.current_session_id.as_deref(), Some(named.id.as_str()));

    // Branching an older session switches away from the current one.
    let old_branch = store
        .branch(&s.id, Some("From the start"))
        .await
        .expect("branch old");
    assert_eq!(old_branch.parent_session_id.as_deref(), Some(s.id.as_str()));
    let left = store
        .session(&named.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(left.end_reason.as_deref(), Some("session_switch"));
    let src = store.session(&s.id).await.expect("load").expect("exists");
    assert_eq!(
        src.end_reason.as_deref(),
        Some("branched"),
        "the first reason stays"
    );
}

async fn resume_reopens_and_switches(store: Arc<dyn SessionStore>) {
    let (cid, first) = started(&store, "telegram:dm:5").await;
    let reset = Rotation {
        conversation_id: cid,
        from_session_id: first.clone(),
        end_reason: EndReason::UserReset,
        link_parent: false,
        spec: SessionSpec::default(),
        messages: vec![],
    };
    let second = store.rotate(&reset).await.expect("reset");
    let resumed = store.resume(cid, &first).await.expect("resume");
    assert_eq!(resumed.id, first);
    assert!(resumed.ended_at.is_none() && resumed.end_reason.is_none());
    let s2 = store
        .session(&second.id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(s2.end_reason.as_deref(), Some("session_switch"));
    let c = store
        .conversation_by_id(cid)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(c.current_session_id.as_deref(), Some(first.as_str()));

    let (_, foreign) = started(&store, "telegram:dm:6").await;
    assert!(matches!(
        store.resume(cid, &foreign).await,
        Err(StoreError::Invalid(_))
    ));
}

async fn titles_are_unique_and_resolve_to_newest_variant(store: Arc<dyn SessionStore>) {
    let (cid, sid) = started(&store, "api:titles").await;
    let title = format!("Notes {}", fastrand::u32(..));
    store.set_title(&sid, &title).await.expect("title");
    store
        .set_title(&sid, &title)
        .await
        .expect("same title again is fine");
    let (_, other) = started(&store, "api:titles2").await;
    match store.set_title(&other, &title).await {
        Err(StoreError::TitleTaken(t)) => assert_eq!(t, title),
        other => panic!("expected TitleTaken, got {other:?}"),
    }
    assert!(matches!(
        store.set_title(&other, "   ").await,
        Err(StoreError::Invalid(_))
    ));
    let second = store
        .rotate(&compression(cid, &sid, vec![]))
        .await
        .expect("rotate");
    let third = store
        .rotate(&compression(cid, &second.id, vec![]))
        .await
        .expect("rotate");
    let by_bare = store
        .session_by_title(&title)
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(
        by_bare.id, third.id,
        "a bare title names its newest numbered variant"
    );
    let by_numbered = store
        .session_by_title(&format!("{title} (2)"))
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(by_numbered.id, second.id);
    assert!(
        store
            .session_by_title("no such title at all")
            .await
            .expect("lookup")
            .is_none()
    );
    let wild = store.session_by_title("%").await.expect("lookup");
    assert!(wild.is_none(), "LIKE wildcards in a title are literal");
}

async fn usage_accumulates(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:usage").await;
    let call = SessionUsage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: 50,
        cache_write_tokens: 10,
        reasoning_tokens: 5,
        estimated_cost_usd: 0.25,
        api_call_count: 1,
    };
    store.add_usage(&sid, &call).await.expect("usage");
    store.add_usage(&sid, &call).await.expect("usage");
    let s = store.session(&sid).await.expect("load").expect("exists");
    assert_eq!(s.usage.input_tokens, 200);
    assert_eq!(s.usage.output_tokens, 40);
    assert_eq!(s.usage.cache_read_tokens, 100);
    assert_eq!(s.usage.cache_write_tokens, 20);
    assert_eq!(s.usage.reasoning_tokens, 10);
    assert_eq!(s.usage.api_call_count, 2);
    assert!((s.usage.estimated_cost_usd - 0.5).abs() < 1e-9);
    assert!(
        store
            .add_usage("19990101_000000_000000", &call)
            .await
            .is_err()
    );
}

async fn lineage_walks_to_root_and_family(store: Arc<dyn SessionStore>) {
    let (cid, root) = started(&store, "api:lineage").await;
    let a = store
        .rotate(&compression(cid, &root, vec![]))
        .await
        .expect("rotate");
    let b = store
        .rotate(&compression(cid, &a.id, vec![]))
        .await
        .expect("rotate");
    let chain: Vec<_> = store
        .lineage(&b.id)
        .await
        .expect("lineage")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(chain, vec![root.clone(), a.id.clone(), b.id.clone()]);
    let family: Vec<_> = store
        .lineage_family(&a.id)
        .await
        .expect("family")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(family, vec![root.clone(), a.id.clone(), b.id.clone()]);
    let (_, unrelated) = started(&store, "api:unrelated").await;
    assert_eq!(
        store
            .lineage_family(&unrelated)
            .await
            .expect("family")
            .len(),
        1
    );
    assert!(matches!(
        store.lineage("19990101_000000_000000").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn inbox_deduplicates_and_tracks_attempts(store: Arc<dyn SessionStore>) {
    let item = NewInboxItem {
        source: "telegram".into(),
        platform_message_id: "update-1".into(),
        conversation_key: "telegram:dm:1".into(),
        payload: json!({"text": "hi"}),
    };
    let first = store.inbox_accept(&item).await.expect("accept");
    assert!(first.fresh);
    assert_eq!(first.item.state, InboxState::Accepted);
    assert_eq!(first.item.payload, json!({"text": "hi"}));
    let again = store.inbox_accept(&item).await.expect("accept again");
    assert!(!again.fresh, "a repeated platform id must not run twice");
    assert_eq!(again.item.id, first.item.id);
    let other_source = NewInboxItem {
        source: "discord".into(),
        ..item.clone()
    };
    assert!(
        store
            .inbox_accept(&other_source)
            .await
            .expect("accept")
            .fresh
    );

    assert_eq!(
        store
            .inbox_begin_attempt(first.item.id)
            .await
            .expect("attempt"),
        1
    );
    assert_eq!(
        store
            .inbox_begin_attempt(first.item.id)
            .await
            .expect("attempt"),
        2
    );
    let unfinished = store.inbox_unfinished().await.expect("unfinished");
    assert_eq!(unfinished.len(), 2);
    assert_eq!(unfinished[0].state, InboxState::Processing);
    assert_eq!(unfinished[0].attempts, 2);
    store
        .inbox_set_state(first.item.id, InboxState::Done)
        .await
        .expect("done");
    store
        .inbox_set_state(unfinished[1].id, InboxState::Failed)
        .await
        .expect("failed");
    assert!(
        store
            .inbox_unfinished()
            .await
            .expect("unfinished")
            .is_empty()
    );
    assert!(
        store
            .inbox_set_state(999_999, InboxState::Done)
            .await
            .is_err()
    );
}

async fn outbox_reuses_rows_per_turn_and_target(store: Arc<dyn SessionStore>) {
    let inbox = store
        .inbox_accept(&NewInboxItem {
            source: "webhook".into(),
            platform_message_id: "m1".into(),
            conversation_key: "webhook:r:c".into(),
            payload: json!({}),
        })
        .await
        .expect("accept");
    let reply = NewOutboxItem {
        inbox_id: Some(inbox.item.id),
        target: "webhook:r:c".into(),
        payload: json!({"text": "answer"}),
    };
    let row = store.outbox_enqueue(&reply).await.expect("enqueue");
    assert_eq!(row.state, OutboxState::Pending);
    let retry = NewOutboxItem {
        payload: json!({"text": "a second answer"}),
        ..reply.clone()
    };
    let reused = store.outbox_enqueue(&retry).await.expect("enqueue again");
    assert_eq!(reused.id, row.id, "a retried turn reuses its outbox row");
    assert_eq!(
        reused.payload,
        json!({"text": "answer"}),
        "the first answer is the one delivered"
    );
    let callback = NewOutboxItem {
        target: "https://example.invalid/cb".into(),
        ..reply.clone()
    };
    assert_ne!(
        store
            .outbox_enqueue(&callback)
            .await
            .expect("second target")
            .id,
        row.id
    );

    assert_eq!(
        store.outbox_begin_attempt(row.id).await.expect("attempt"),
        1
    );
    store
        .outbox_mark_delivered(row.id, &["501".into(), "502".into()])
        .await
        .expect("delivered");
    let pending = store.outbox_pending().await.expect("pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].target, "https://example.invalid/cb");
    store
        .outbox_mark_failed(pending[0].id)
        .await
        .expect("failed");
    assert!(store.outbox_pending().await.expect("pending").is_empty());
    let delivered = store.outbox_enqueue(&reply).await.expect("lookup");
    assert_eq!(delivered.state, OutboxState::Delivered);
    assert_eq!(
        delivered.platform_message_ids,
        vec!["501".to_owned(), "502".to_owned()]
    );
    assert!(delivered.delivered_at.is_some());
}

async fn sessions_list_by_conversation_and_source(store: Arc<dyn SessionStore>) {
    let (cid, s1) = started(&store, "discord:dm:list").await;
    let s2 = store
        .rotate(&compression(cid, &s1, vec![]))
        .await
        .expect("rotate");
    let (_, t1) = started(&store, "telegram:dm:list").await;
    let mine = store
        .list_sessions(&SessionFilter {
            conversation_id: Some(cid),
            ..Default::default()
        })
        .await
        .expect("list");
    let ids: Vec<_> = mine.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec![s2.id.as_str(), s1.as_str()], "newest first");
    let tg = store
        .list_sessions(&SessionFilter {
            source: Some("telegram".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(tg.len(), 1);
    assert_eq!(tg[0].id, t1);
    let one = store
        .list_sessions(&SessionFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(one.len(), 1);
}

async fn search(
    store: &Arc<dyn SessionStore>,
    query: SearchQuery,
) -> Vec<agent_core::store::SearchHit> {
    store.sync_search_index().await.expect("index");
    store.search(&query).await.expect("search")
}

fn text(q: &str) -> SearchQuery {
    SearchQuery {
        text: q.into(),
        ..Default::default()
    }
}

async fn search_finds_words_tools_and_filters(store: Arc<dyn SessionStore>) {
    let (tg, tg_sid) = started(&store, "telegram:dm:search").await;
    let (_, dc_sid) = started(&store, "discord:dm:search").await;
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(
        json!([{"id": "c", "function": {"name": "shell", "arguments": "{\"cmd\":\"kubectl rollout\"}"}}]),
    );
    let mut result = NewMessage::text(Role::Tool, "deployment finished");
    result.tool_name = Some("deploy_tracker".into());
    store
        .append_messages(
            &tg_sid,
            &[
                user("Please deploy the billing service tonight"),
                call,
                result,
            ],
        )
        .await
        .expect("append");
    store
        .append_messages(
            &dc_sid,
            &[assistant("I will deploy nothing; billing is frozen")],
        )
        .await
        .expect("append");

    let hits = search(&store, text("deploy billing")).await;
    assert_eq!(hits.len(), 2);
    assert!(hits[0].message_id > hits[1].message_id, "newest first");
    assert_eq!(
        hits[1].snippet,
        "Please [deploy] the [billing] service tonight"
    );
    assert_eq!(hits[1].source, "telegram");
    assert_eq!(hits[1].conversation_id, tg);

    let by_source = search(
        &store,
        SearchQuery {
            source: Some("discord".into()),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_source.len(), 1);
    assert_eq!(by_source[0].session_id, dc_sid);
    let by_role = search(
        &store,
        SearchQuery {
            role: Some(Role::User),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_role.len(), 1);
    assert_eq!(by_role[0].role, Role::User);
    let by_conv = search(
        &store,
        SearchQuery {
            conversation_id: Some(tg),
            ..text("billing")
        },
    )
    .await;
    assert_eq!(by_conv.len(), 1);

    let args = search(&store, text("kubectl")).await;
    assert_eq!(args.len(), 1, "tool-call arguments are searchable");
    assert!(args[0].snippet.contains("[kubectl]"), "{}", args[0].snippet);
    let tool = search(&store, text("deploy_tracker")).await;
    assert_eq!(tool.len(), 1, "tool names are searchable");
    assert_eq!(tool[0].role, Role::Tool);
    let prefix = search(&store, text("bill")).await;
    assert_eq!(prefix.len(), 2, "the last word matches as a prefix");
    assert!(search(&store, text("nonexistentword")).await.is_empty());
    let limited = search(
        &store,
        SearchQuery {
            limit: 1,
            ..text("billing")
        },
    )
    .await;
    assert_eq!(limited.len(), 1);
}

async fn search_handles_cjk_substrings(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "telegram:dm:cjk").await;
    store
        .append_messages(
            &sid,
            &[
                user("我们明天部署数据库服务器"),
                assistant("好的，用Rust写迁移脚本"),
                user("サーバーを再起動してください"),
            ],
        )
        .await
        .expect("append");
    let three = search(&store, text("数据库")).await;
    assert_eq!(three.len(), 1);
    assert_eq!(three[0].snippet, "我们明天部署[数据库]服务器");
    let two = search(&store, text("部署")).await;
    assert_eq!(two.len(), 1, "two-character CJK terms match as substrings");
    let one = search(&store, text("好")).await;
    assert_eq!(one.len(), 1);
    let kana = search(&store, text("再起動")).await;
    assert_eq!(kana.len(), 1);
    let mixed = search(&store, text("Rust 迁移")).await;
    assert_eq!(mixed.len(), 1, "Latin and CJK terms combine");
    assert_eq!(mixed[0].role, Role::Assistant);
    assert!(search(&store, text("数据仓库")).await.is_empty());
}

async fn search_accepts_any_user_text(store: Arc<dyn SessionStore>) {
    let (_, sid) = started(&store, "api:hostile").await;
    store
        .append_messages(
            &sid,
            &[user(
                "error: NOT found (code 42) in path/to/file.rs — AND more",
            )],
        )
        .await
        .expect("append");
    let hostile = [
        "\"",
        "\"unbalanced",
        "-",
        "--",
        "-found",
        ":",
        "a:b",
        "*",
        "found*",
        "AND",
        "OR",
        "NOT",
        "found AND",
        "NOT found",
        "(",
        ")",
        "((found",
        "found)",
        "🎉",
        "🎉 found",
        "数据",
        "' OR 1=1 --",
        "%",
        "_",
        "\\",
        "NEAR(found code)",
        "code:42",
        "^found",
        "{found}",
        "found\u{0}",
        "",
        "   ",
        "path/to/file.rs",
        "😀😀😀",
        "ÅÄÖ",
        "𠀀𠀁",
    ];
    for q in hostile {
        let result = store.search(&text(q)).await;
        assert!(result.is_ok(), "query {q:?} failed: {result:?}");
    }
    store.sync_search_index().await.expect("index");
    assert_eq!(
        store
            .search(&text("NOT found"))
            .await
            .expect("search")
            .len(),
        1,
        "operators are words"
    );
    assert_eq!(
        store
            .search(&text("path/to/file.rs"))
            .await
            .expect("search")
            .len(),
        1
    );
    assert_eq!(
        store
            .search(&text("(code 42)"))
            .await
            .expect("search")
            .len(),
        1
    );
}

async fn search_resolves_hits_to_lineage_root(store: Arc<dyn SessionStore>) {
    let (cid, root) = started(&store, "api:roots").await;
    store
        .append_messages(&root, &[user("the secret ingredient is cardamom")])
        .await
        .expect("append");
    let child = store
        .rotate(&compression(cid, &root, vec![user("summary: spice talk")]))
        .await
        .expect("rotate");
    let grandchild = store
        .rotate(&compression(cid, &child.id, vec![]))
        .await
        .expect("rotate");
    store
        .append_messages(&grandchild.id, &[user("more cardamom please")])
        .await
        .expect("append");
    let (_, elsewhere) = started(&store, "api:roots-other").await;
    store
        .append_messages(&elsewhere, &[user("cardamom elsewhere")])
        .await
        .expect("append");

    let hits = search(&store, text("cardamom")).await;
    assert_eq!(hits.len(), 3);
    for hit in &hits {
        if hit.session_id == elsewhere {
            assert_eq!(hit.root_session_id, elsewhere);
        } else {
            assert_eq!(
                hit.root_session_id, root,
                "hit in {} must resolve to the root",
                hit.session_id
            );
        }
    }
    let scoped = search(
        &store,
        SearchQuery {
            lineage_of: Some(grandchild.id.clone()),
            ..text("cardamom")
        },
    )
    .await;
    let sessions: Vec<_> = scoped.iter().map(|h| h.session_id.as_str()).collect();
    assert_eq!(sessions, vec![grandchild.id.as_str(), root.as_str()]);
}

async fn concurrent_writers_never_fail(store: Arc<dyn SessionStore>) {
    let mut tasks = Vec::new();
    for w in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (cid, sid) = started(&store, &format!("api:writer-{w}")).await;
            for i in 0..20 {
                store
                    .append_messages(
                        &sid,
                        &[user(&format!("writer {w} message {i}")), assistant("ack")],
                    )
                    .await?;
                store
                    .add_usage(
                        &sid,
                        &SessionUsage {
                            input_tokens: 1,
                            ..Default::default()
                        },
                    )
                    .await?;
            }
            Ok::<_, StoreError>((cid, sid))
        }));
    }
    for task in tasks {
        let (_, sid) = task
            .await
            .expect("join")
            .expect("no write may fail under contention");
        let s = store.session(&sid).await.expect("load").expect("exists");
        assert_eq!(s.message_count, 40);
        assert_eq!(s.usage.input_tokens, 20);
    }
    let hits = search(
        &store,
        SearchQuery {
            limit: 1000,
            ..text("writer")
        },
    )
    .await;
    assert_eq!(hits.len(), 320);
}

async fn migrations_are_current(store: Arc<dyn SessionStore>) {
    let status = store.migration_status().await.expect("status");
    assert!(!status.known.is_empty());
    assert!(status.is_current(), "{status:?}");
    store.migrate().await.expect("migrating again is a no-op");
    store.ping().await.expect("ping");
}

/// PostgreSQL searches the newest messages first and the older ones through the indexes; the
/// two steps together must give exactly what one ordered query would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_step_search_matches_a_single_ordered_query() {
    let Some(mut small) = postgres_store().await else {
        return;
    };
    small.set_search_window(7);
    let small: Arc<dyn SessionStore> = Arc::new(small);
    let (_, a) = started(&small, "telegram:dm:steps-a").await;
    let (_, b) = started(&small, "discord:dm:steps-b").await;
    for i in 0..40 {
        let sid = if i % 3 == 0 { &b } else { &a };
        let text = if i % 4 == 0 {
            format!("alpha beta {i}")
        } else {
            format!("gamma {i} 数据库")
        };
        small
            .append_messages(sid, &[user(&text)])
            .await
            .expect("append");
    }
    let all_alpha = small
        .search(&SearchQuery {
            limit: 100,
            ..text("alpha")
        })
        .await
        .expect("search");
    assert_eq!(all_alpha.len(), 10);
    assert!(
        all_alpha
            .windows(2)
            .all(|w| w[0].message_id > w[1].message_id),
        "newest first"
    );
    for limit in [1, 3, 5, 9, 10] {
        let page = small
            .search(&SearchQuery {
                limit,
                ..text("alpha")
            })
            .await
            .expect("search");
        let ids: Vec<_> = page.iter().map(|h| h.message_id).collect();
        let expected: Vec<_> = all_alpha
            .iter()
            .take(limit as usize)
            .map(|h| h.message_id)
            .collect();
        assert_eq!(ids, expected, "limit {limit}");
    }
    let filtered = small
        .search(&SearchQuery {
            source: Some("discord".into()),
            limit: 100,
            ..text("alpha")
        })
        .await
        .expect("search");
    assert_eq!(filtered.len(), 4, "i = 0, 12, 24, 36");
    let cjk = small
        .search(&SearchQuery {
            limit: 100,
            ..text("数据库")
        })
        .await
        .expect("search");
    assert_eq!(cjk.len(), 30);
}
