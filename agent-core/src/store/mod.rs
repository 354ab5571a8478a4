//! The session store: conversations, sessions, messages, inbox and outbox, and search.
//!
//! One trait, [`SessionStore`], with two implementations that pass the same contract suite
//! (`tests/store_contract.rs`): [`SqliteStore`] (embedded default) and [`PostgresStore`] (for
//! several processes on one database). Callers hold an `Arc<dyn SessionStore>` from [`open`].
//!
//! Routing goes through the conversation, never the session: a conversation points at its
//! current session, and every rotation (reset, resume, branch, compression) re-points it inside
//! the same transaction that ends the old session, so no message can land in a stale session.
//!
//! # Layout
//! - [`types`]: the rows as plain data.
//! - `common`, `rows`, `pairing`: the statements and row mappers both backends share.
//! - `ids`: session ids and lineage-numbered titles.
//! - `search_text`: turns what a user typed into safe terms, and builds snippets.
//! - `sqlite`, `postgres`: the two backends; `sqlite_writes` and `group_commit`: SQLite's hot
//!   writes (a turn's rows), committed in batches across conversations.

#[macro_use]
mod rows;
#[macro_use]
mod common;
#[macro_use]
mod pairing;
#[macro_use]
mod queues;
#[macro_use]
mod conversations;
mod group_commit;
mod ids;
mod postgres;
mod search_text;
mod sqlite;
mod sqlite_writes;
pub mod types;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

pub use ids::{new_session_id, next_numbered_title};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use types::*;

/// What can go wrong in the store. Variants say what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The named row does not exist.
    #[error("{what} not found: {id}")]
    NotFound { what: &'static str, id: String },
    /// Another session already has this title; pick another.
    #[error("a session titled {0:?} already exists")]
    TitleTaken(String),
    /// The request contradicts the stored state (e.g. resuming a session of another conversation).
    #[error("{0}")]
    Invalid(String),
    /// The store URL is not one Iris understands.
    #[error("unsupported store url {0:?}: expected sqlite://PATH or postgres://…")]
    BadUrl(String),
    /// The SQLite file or its directory cannot be created or written.
    #[error("cannot write the session store at {path}: {reason}")]
    Unwritable { path: PathBuf, reason: String },
    #[error("schema migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// SQLite itself, on the SQLite store's group-commit path (`code` is SQLite's extended
    /// result code when there is one).
    #[error("database error: {message}")]
    Sqlite { code: Option<i32>, message: String },
    #[error("stored JSON is invalid: {0}")]
    Json(#[from] serde_json::Error),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    fn sqlite(message: impl Into<String>) -> Self {
        Self::Sqlite {
            code: None,
            message: message.into(),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        Self::Sqlite {
            code: err.sqlite_error().map(|e| e.extended_code),
            message: err.to_string(),
        }
    }
}

/// A rotation: end the conversation's current session and start its successor, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotation {
    pub conversation_id: i64,
    /// The session being ended (must be the conversation's current one).
    pub from_session_id: String,
    pub end_reason: EndReason,
    /// Whether the new session links back to the old one (`parent_session_id`). `/new` does
    /// not; compression does. A child without its own title continues the parent's title as
    /// `Title (2)`, `Title (3)`…
    pub link_parent: bool,
    pub spec: SessionSpec,
    /// Messages the new session starts with (e.g. the compressed context).
    pub messages: Vec<NewMessage>,
}

impl Rotation {
    /// What `/new` does: end `from_session_id` as a user reset and start an unlinked, empty
    /// session, titled `title` when given.
    pub fn reset(conversation_id: i64, from_session_id: &str, title: Option<String>) -> Self {
        Self {
            conversation_id,
            from_session_id: from_session_id.to_owned(),
            end_reason: EndReason::UserReset,
            link_parent: false,
            spec: SessionSpec {
                title,
                model: None,
                system_prompt: None,
            },
            messages: Vec::new(),
        }
    }
}

/// The durable memory of every conversation. Both backends behave the same; see the module docs.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// A cheap round trip: is the database reachable?
    async fn ping(&self) -> StoreResult<()>;
    /// Applies pending schema migrations.
    async fn migrate(&self) -> StoreResult<()>;
    /// Which migrations this build knows and which the database has.
    async fn migration_status(&self) -> StoreResult<MigrationStatus>;

    /// The conversation with this key, created if new.
    async fn conversation(&self, new: &NewConversation) -> StoreResult<Conversation>;
    async fn conversation_by_key(&self, key: &str) -> StoreResult<Option<Conversation>>;
    async fn conversation_by_id(&self, id: i64) -> StoreResult<Option<Conversation>>;
    /// Conversations, most recently active first.
    async fn list_conversations(
        &self,
        filter: &ConversationFilter,
    ) -> StoreResult<Vec<ConversationSummary>>;
    /// Replaces the conversation's settings object.
    async fn set_conversation_settings(
        &self,
        id: i64,
        settings: &serde_json::Value,
    ) -> StoreResult<()>;

    /// Starts a session without a parent and makes it the conversation's current one.
    /// Any session that was current stays as it is (use [`Self::rotate`] to end it).
    async fn start_session(&self, conversation_id: i64, spec: &SessionSpec)
    -> StoreResult<Session>;
    async fn session(&self, id: &str) -> StoreResult<Option<Session>>;
    /// Sessions newest first.
    async fn list_sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<Session>>;
    /// Ends a session; returns false when it had already ended (the first reason wins).
    async fn end_session(&self, id: &str, reason: EndReason) -> StoreResult<bool>;
    /// Ends the old session, creates the new one, writes its messages and re-points the
    /// conversation, in one transaction.
    async fn rotate(&self, rotation: &Rotation) -> StoreResult<Session>;
    /// Copies a session's active messages into a new child session (titled `title`, or the
    /// source's title numbered) that becomes current; the source ends as `branched`.
    async fn branch(&self, source_session_id: &str, title: Option<&str>) -> StoreResult<Session>;
    /// Re-points the conversation at one of its earlier sessions and reopens it; the current
    /// session ends as `session_switch`.
    async fn resume(&self, conversation_id: i64, session_id: &str) -> StoreResult<Session>;
    /// Sets a unique title.
    async fn set_title(&self, session_id: &str, title: &str) -> StoreResult<()>;
    /// The session with this exact title, or else the newest `title (N)` variant.
    /// Takes the session's lease for `ttl` unless another holder has an unexpired one; the
    /// same holder may take it again. Keeps two processes from compressing one session.
    /// Records an unknown user's pairing request within `limits` (one transaction).
    async fn pairing_request(
        &self,
        request: &NewPairing,
        limits: PairingLimits,
    ) -> StoreResult<PairingOutcome>;
    /// Approves the unexpired request with this code hash; the user is paired from now on.
    async fn pairing_approve(
        &self,
        platform: &str,
        code_hash: &str,
    ) -> StoreResult<Option<PairedUser>>;
    /// Whether the operator approved this user.
    async fn is_paired(&self, platform: &str, user_id: &str) -> StoreResult<bool>;
    async fn try_lock_session(
        &self,
        session_id: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<bool>;
    /// Gives the lease back (only `holder`'s).
    async fn unlock_session(&self, session_id: &str, holder: &str) -> StoreResult<()>;
    async fn session_by_title(&self, title: &str) -> StoreResult<Option<Session>>;
    /// Sets the session's system prompt unless it already has one, and returns the one it has
    /// now: the prompt is frozen once per session so it stays byte-stable (provider prompt
    /// caches) and survives restarts.
    async fn freeze_system_prompt(&self, session_id: &str, prompt: &str) -> StoreResult<String>;

    /// Adds token counts, cost and API calls to the session's totals.
    async fn add_usage(&self, session_id: &str, usage: &SessionUsage) -> StoreResult<()>;
    /// The chain from the lineage root down to this session (root first).
    async fn lineage(&self, session_id: &str) -> StoreResult<Vec<Session>>;
    /// Every session sharing this session's root, oldest first.
    async fn lineage_family(&self, session_id: &str) -> StoreResult<Vec<Session>>;

    /// Appends messages in one transaction, keeping the session's counters; returns their ids.
    async fn append_messages(
        &self,
        session_id: &str,
        messages: &[NewMessage],
    ) -> StoreResult<Vec<i64>>;
    /// The session's active messages, oldest first.
    async fn messages(&self, session_id: &str) -> StoreResult<Vec<Message>>;
    /// Marks messages inactive (e.g. `/undo`); they stay stored and searchable.
    async fn deactivate_messages(&self, session_id: &str, ids: &[i64]) -> StoreResult<u64>;

    /// Persists an inbound message unless `(source, platform_message_id)` was seen before.
    async fn inbox_accept(&self, item: &NewInboxItem) -> StoreResult<InboxAccept>;
    /// Marks the row as being processed and counts the attempt; returns the new count.
    async fn inbox_begin_attempt(&self, id: i64) -> StoreResult<i64>;
    async fn inbox_set_state(&self, id: i64, state: InboxState) -> StoreResult<()>;
    /// Rows accepted or in processing (to resume after a restart), oldest first.
    async fn inbox_unfinished(&self) -> StoreResult<Vec<InboxItem>>;

    /// The outbox row for `(inbox_id, target)`, created if new (a retried turn reuses it).
    async fn outbox_enqueue(&self, item: &NewOutboxItem) -> StoreResult<OutboxItem>;
    /// Counts a delivery attempt; returns the new count.
    async fn outbox_begin_attempt(&self, id: i64) -> StoreResult<i64>;
    async fn outbox_mark_delivered(
        &self,
        id: i64,
        platform_message_ids: &[String],
    ) -> StoreResult<()>;
    async fn outbox_mark_failed(&self, id: i64) -> StoreResult<()>;
    /// Rows still to deliver, oldest first.
    async fn outbox_pending(&self) -> StoreResult<Vec<OutboxItem>>;
    /// Answers an inbox row in one transaction: the reply's outbox row (an existing one for the
    /// same inbox row and target is kept: the first answer stands), marked delivered when the
    /// caller reads it directly, and the inbox row's new state.
    async fn answer_inbox(
        &self,
        reply: &NewOutboxItem,
        delivered: bool,
        state: InboxState,
    ) -> StoreResult<OutboxItem>;
    /// The replies to one inbox row (a repeated message gets its original outcome).
    async fn outbox_for_inbox(&self, inbox_id: i64) -> StoreResult<Vec<OutboxItem>>;

    /// Full-text search; any text is a valid query.
    async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>>;
    /// Brings the search index up to date now; returns how many messages it indexed.
    /// Backends that index synchronously return 0.
    async fn sync_search_index(&self) -> StoreResult<u64>;
}

/// Opens and migrates the store at `url`: `sqlite://PATH` or `postgres://…` /
/// `postgresql://…`.
pub async fn open(url: &str) -> StoreResult<Arc<dyn SessionStore>> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        Ok(Arc::new(
            SqliteStore::open(sqlite::path_from_url(rest)).await?,
        ))
    } else if is_postgres(url) {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Err(StoreError::BadUrl(url.to_owned()))
    }
}

/// Connects to the store at `url` without migrating it (to inspect its schema).
pub async fn connect_unmigrated(url: &str) -> StoreResult<Arc<dyn SessionStore>> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        Ok(Arc::new(
            SqliteStore::connect(sqlite::path_from_url(rest)).await?,
        ))
    } else if is_postgres(url) {
        Ok(Arc::new(
            PostgresStore::connect_unmigrated(url.parse()?).await?,
        ))
    } else {
        Err(StoreError::BadUrl(url.to_owned()))
    }
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The maximum of a limit field, with its default when zero.
fn effective_limit(limit: u32, default: u32) -> i64 {
    i64::from(if limit == 0 { default } else { limit.min(1000) })
}

/// Maps the stored role text, failing loudly on a corrupted row.
fn parse_role(text: &str) -> StoreResult<Role> {
    Role::parse(text).ok_or_else(|| StoreError::Invalid(format!("unknown role {text:?} in store")))
}

impl std::fmt::Debug for dyn SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("backend", &self.backend())
            .finish()
    }
}
