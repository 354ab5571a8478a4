//! The session-store contract: every test here runs against SQLite and against PostgreSQL.
//!
//! # Layout
//! - `sessions`: conversations, sessions, rotation, branching, resuming, titles, usage, lineage.
//! - `durable`: the inbox and the outbox.
//! - `search`: full-text search, its filters, CJK, hostile input, lineage roots.
//! - `writes`: concurrency and migrations.
//!
//! PostgreSQL comes from `DATABASE_URL` (scripts/test.sh starts a throw-away server); each test
//! gets its own schema. Without `DATABASE_URL` the PostgreSQL half says it is skipped, unless
//! `IRIS_TEST_REQUIRE_POSTGRES=true` (CI), where that is a failure.

use std::sync::Arc;

use agent_core::store::{
    ConversationFilter, EndReason, InboxState, NewConversation, NewInboxItem, NewMessage,
    NewOutboxItem, NewPairing, OutboxState, PairingLimits, PairingOutcome, Role, Rotation,
    SearchQuery, SessionFilter, SessionSpec, SessionStore, SessionUsage, SqliteStore, StoreError,
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

mod durable;
mod search;
mod sessions;
mod writes;

use durable::*;
use search::*;
use sessions::*;
use writes::*;

contract!(
    conversations_are_created_once_per_key,
    sessions_start_with_documented_ids_and_source,
    system_prompt_is_frozen_once,
    session_locks_exclude_other_holders_until_they_expire,
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
    answering_an_inbox_row_is_one_step,
    pairing_requests_are_limited_and_approved_once,
    a_failing_write_among_concurrent_ones_fails_alone,
    sessions_list_by_conversation_and_source,
    conversations_list_by_last_activity,
    search_finds_words_tools_and_filters,
    search_handles_cjk_substrings,
    search_accepts_any_user_text,
    search_resolves_hits_to_lineage_root,
    concurrent_writers_never_fail,
    migrations_are_current,
);

pub(crate) async fn conversation(
    store: &Arc<dyn SessionStore>,
    key: &str,
) -> agent_core::store::Conversation {
    let source = key.split(':').next().unwrap_or("test");
    store
        .conversation(&NewConversation::new(key, source))
        .await
        .expect("conversation")
}

pub(crate) async fn started(store: &Arc<dyn SessionStore>, key: &str) -> (i64, String) {
    let c = conversation(store, key).await;
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("start");
    (c.id, s.id)
}

pub(crate) fn user(text: &str) -> NewMessage {
    NewMessage::text(Role::User, text)
}

pub(crate) fn assistant(text: &str) -> NewMessage {
    NewMessage::text(Role::Assistant, text)
}
