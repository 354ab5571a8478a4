//! The embedded backend: one SQLite file in WAL mode.
//!
//! Writes go through a single connection (a pool of one), so writers inside this process queue
//! instead of contending for SQLite's lock; `BEGIN IMMEDIATE` plus jittered retries handle the
//! other processes that may open the same file (the CLI while the daemon runs). Reads use a
//! separate pool and never block the writer (WAL).
//!
//! Full-text indexing is the expensive part of a write, so it is not done by triggers on the
//! turn's path: a background indexer copies new messages into the FTS5 `unicode61` index in
//! small batches through the group-commit writer, woken after each append (search lags by well
//! under a second). Only messages with CJK text also go to the `trigram` index, which costs about five
//! times as much per row.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::group_commit::GroupCommit;
use super::search_text::{self, Terms};
use super::sqlite_writes;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Messages indexed per indexer transaction: small enough that an append waits at most a few
/// tens of milliseconds behind it.
const INDEX_BATCH: u64 = 512;
/// How long the indexer waits after a wake-up to gather more appends into one batch.
const INDEX_DEBOUNCE: Duration = Duration::from_millis(20);
/// The indexer also runs on this period, in case another process appended.
const INDEX_PERIOD: Duration = Duration::from_millis(500);

/// A session store in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    writer: SqlitePool,
    /// One permit: held by every write of this process (sqlx's and the group commit's).
    gate: Arc<Semaphore>,
    reader: SqlitePool,
    /// A turn's hot writes, committed in batches on the writer connection.
    commits: GroupCommit,
    index_wake: Arc<Notify>,
    stop: CancellationToken,
}

/// The file path of a `sqlite:` URL (the part after `sqlite:`), with `~/` expanded.
pub(crate) fn path_from_url(rest: &str) -> PathBuf {
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.split('?').next().unwrap_or(rest);
    match (rest.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(tail), Some(home)) => PathBuf::from(home).join(tail),
        _ => PathBuf::from(rest),
    }
}

fn unwritable(path: &Path, reason: impl std::fmt::Display) -> super::StoreError {
    super::StoreError::Unwritable {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

impl SqliteStore {
    const BACKEND: &'static str = "sqlite";

    /// Opens (creating if needed) and migrates the store at `path`, and starts its indexer.
    pub async fn open(path: impl AsRef<Path>) -> super::StoreResult<Self> {
        let store = Self::connect(path).await?;
        store.migrate_impl().await?;
        // Prove the file is writable now rather than at the first user message.
        let gate = store.write_gate().await?;
        sqlx::query("UPDATE search_index_state SET last_id = last_id WHERE name = 'messages'")
            .execute(&store.writer)
            .await
            .map_err(|e| unwritable(&store.path, e))?;
        drop(gate);
        store.spawn_indexer();
        Ok(store)
    }

    /// Opens the file without migrating it or starting the indexer (for `iris doctor`, which
    /// must see the schema as it is).
    pub async fn connect(path: impl AsRef<Path>) -> super::StoreResult<Self> {
        let path = path.as_ref().to_owned();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| unwritable(&path, e))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            .pragma("temp_store", "memory");
        // No ping before each acquire: these are local files, and the ping is a round trip to
        // the worker thread on every write.
        let writer = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options.clone())
            .await
            .map_err(|e| unwritable(&path, e))?;
        let store_reader = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(options.read_only(true));
        let gate = Arc::new(Semaphore::new(1));
        let commits = GroupCommit::start(&path, gate.clone()).map_err(|e| unwritable(&path, e))?;
        Ok(Self {
            path,
            writer,
            gate,
            reader: store_reader,
            commits,
            index_wake: Arc::new(Notify::new()),
            stop: CancellationToken::new(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The write gate, held for the whole of one sqlx write (see `group_commit`).
    async fn write_gate(&self) -> super::StoreResult<OwnedSemaphorePermit> {
        self.gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| super::StoreError::sqlite("the store's write gate is closed"))
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
        self.writer.begin_with("BEGIN IMMEDIATE").await
    }

    fn read_pool(&self) -> &SqlitePool {
        &self.reader
    }

    pub(super) fn is_retryable(err: &super::StoreError) -> bool {
        match err {
            super::StoreError::Sqlite {
                code: Some(code), ..
            } => matches!(code & 0xff, 5 | 6),
            super::StoreError::Database(sqlx::Error::Database(db)) => {
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
                db.code()
                    .and_then(|c| c.parse::<i32>().ok())
                    .is_some_and(|c| matches!(c & 0xff, 5 | 6))
            }
            super::StoreError::Database(sqlx::Error::PoolTimedOut) => true,
            _ => false,
        }
    }

    /// Appends through the group-commit writer (see `group_commit`).
    async fn append_impl(
        &self,
        session_id: &str,
        messages: &[super::NewMessage],
    ) -> super::StoreResult<Vec<i64>> {
        let session_id = session_id.to_owned();
        let messages = messages.to_vec();
        self.commits
            .write(move |db| sqlite_writes::append(db, &session_id, &messages))
            .await
    }

    async fn add_usage_impl(
        &self,
        session_id: &str,
        usage: &super::SessionUsage,
    ) -> super::StoreResult<()> {
        let session_id = session_id.to_owned();
        let usage = *usage;
        self.commits
            .write(move |db| sqlite_writes::add_usage(db, &session_id, &usage))
            .await
    }

    async fn inbox_accept_impl(
        &self,
        item: &super::NewInboxItem,
    ) -> super::StoreResult<super::InboxAccept> {
        let payload = serde_json::to_string(&item.payload)?;
        let item = item.clone();
        self.commits
            .write(move |db| sqlite_writes::inbox_accept(db, &item, &payload))
            .await
    }

    async fn inbox_begin_attempt_impl(&self, id: i64) -> super::StoreResult<i64> {
        self.commits
            .write(move |db| sqlite_writes::inbox_begin_attempt(db, id))
            .await
    }

    async fn inbox_set_state_impl(
        &self,
        id: i64,
        state: super::InboxState,
    ) -> super::StoreResult<()> {
        self.commits
            .write(move |db| sqlite_writes::inbox_set_state(db, id, state))
            .await
    }

    async fn answer_inbox_impl(
        &self,
        reply: &super::NewOutboxItem,
        delivered: bool,
        state: super::InboxState,
    ) -> super::StoreResult<super::OutboxItem> {
        let answer = sqlite_writes::Answer {
            inbox_id: reply.inbox_id.ok_or_else(|| {
                super::StoreError::Invalid("answer_inbox needs an inbox id".into())
            })?,
            target: reply.target.clone(),
            payload: serde_json::to_string(&reply.payload)?,
            delivered,
            state,
        };
        self.commits
            .write(move |db| sqlite_writes::answer_inbox(db, &answer))
            .await
    }

    fn after_append(&self) {
        self.index_wake.notify_one();
    }

    async fn ping_impl(&self) -> super::StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn migrate_impl(&self) -> super::StoreResult<()> {
        let _gate = self.write_gate().await?;
        MIGRATOR.run(&self.writer).await?;
        Ok(())
    }

    async fn migration_status_impl(&self) -> super::StoreResult<super::MigrationStatus> {
        let known = MIGRATOR.iter().map(|m| m.version).collect();
        let table: Option<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_optional(&self.reader)
        .await?;
        let applied = match table {
            Some(_) => {
                sqlx::query_scalar(
                    "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
                )
                .fetch_all(&self.reader)
                .await?
            }
            None => Vec::new(),
        };
        Ok(super::MigrationStatus { known, applied })
    }

    fn spawn_indexer(&self) {
        let commits = self.commits.clone();
        let wake = self.index_wake.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = wake.notified() => tokio::time::sleep(INDEX_DEBOUNCE).await,
                    () = tokio::time::sleep(INDEX_PERIOD) => {}
                }
                loop {
                    match index_batch(&commits).await {
                        Ok(n) if n < INDEX_BATCH => break,
                        Ok(_) => tokio::task::yield_now().await,
                        Err(err) => {
                            tracing::warn!(error = %err, "search indexer failed; will retry");
                            break;
                        }
                    }
                    if stop.is_cancelled() {
                        return;
                    }
                }
            }
        });
    }

    async fn sync_index_impl(&self) -> super::StoreResult<u64> {
        let mut total = 0;
        loop {
            let n = index_batch(&self.commits).await?;
            total += n;
            if n < INDEX_BATCH {
                return Ok(total);
            }
        }
    }

    async fn search_impl(
        &self,
        query: &super::SearchQuery,
        terms: &Terms,
        lineage: Option<&[String]>,
    ) -> super::StoreResult<Vec<sqlx::sqlite::SqliteRow>> {
        let limit = super::effective_limit(query.limit, 20);
        // Words match whole words in the word index. In CJK text a word tokeniser cannot see
        // word boundaries (`用Rust写` is one token), so the trigram index, which holds only
        // rows with CJK text, is also asked, with every term as a substring.
        let mut rows = Vec::new();
        if !terms.words.is_empty() {
            let mut sql = search_select("messages_fts");
            sql.push("messages_fts MATCH ")
                .push_bind(search_text::fts5_words(&terms.words));
            if !terms.cjk.is_empty() {
                sql.push(" AND m.id IN (SELECT rowid FROM messages_trigram WHERE ");
                push_substring_terms(&mut sql, &terms.cjk);
                sql.push(")");
            }
            push_filters(&mut sql, query, lineage, "messages_fts", limit)?;
            rows = sql.build().fetch_all(&self.reader).await?;
        }
        let mut sql = search_select("messages_trigram");
        let all: Vec<String> = terms.words.iter().chain(&terms.cjk).cloned().collect();
        push_substring_terms(&mut sql, &all);
        push_filters(&mut sql, query, lineage, "messages_trigram", limit)?;
        let more = sql.build().fetch_all(&self.reader).await?;
        if rows.is_empty() {
            return Ok(more);
        }
        // Merge the two newest-first lists, without duplicates, up to the limit.
        rows.extend(more);
        let mut keyed = rows
            .into_iter()
            .map(|r| Ok((r.try_get::<i64, _>("id")?, r)))
            .collect::<super::StoreResult<Vec<_>>>()?;
        keyed.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        keyed.dedup_by_key(|(id, _)| *id);
        keyed.truncate(usize::try_from(limit).unwrap_or(20));
        Ok(keyed.into_iter().map(|(_, r)| r).collect())
    }
}

/// The common head of both search queries. `CROSS JOIN` fixes the join order: the index
/// drives, newest first, and stops after `limit` hits. Left to itself the planner may start
/// from a selective-looking filter (`sessions.source`) and evaluate the full-text match once
/// per message of that source — seconds instead of milliseconds on a large store.
fn search_select(table: &str) -> sqlx::QueryBuilder<Sqlite> {
    sqlx::QueryBuilder::new(format!(
        "SELECT m.id, m.session_id, s.conversation_id, s.source, m.role, m.content, \
         m.tool_name, m.tool_calls, m.created_at \
         FROM {table} CROSS JOIN messages m ON m.id = {table}.rowid \
         CROSS JOIN sessions s ON s.id = m.session_id WHERE "
    ))
}

fn push_filters(
    sql: &mut sqlx::QueryBuilder<Sqlite>,
    query: &super::SearchQuery,
    lineage: Option<&[String]>,
    table: &str,
    limit: i64,
) -> super::StoreResult<()> {
    push_search_filters(sql, query);
    if let Some(ids) = lineage {
        sql.push(" AND m.session_id IN (SELECT value FROM json_each(")
            .push_bind(serde_json::to_string(ids)?)
            .push("))");
    }
    sql.push(format!(" ORDER BY {table}.rowid DESC LIMIT "))
        .push_bind(limit);
    Ok(())
}

/// Requires every term as a substring in the trigram table: a phrase match for three or more
/// characters (the trigram index answers it), `LIKE` for shorter ones (a scan of the CJK rows
/// only, which is all that table holds).
fn push_substring_terms(sql: &mut sqlx::QueryBuilder<Sqlite>, terms: &[String]) {
    let table = "messages_trigram";
    for (i, term) in terms.iter().enumerate() {
        if i > 0 {
            sql.push(" AND ");
        }
        if term.chars().count() >= 3 {
            sql.push(format!("{table} MATCH "))
                .push_bind(format!("\"{term}\""));
        } else {
            let pattern = search_text::like_contains(term);
            sql.push("(");
            for (j, column) in ["content", "tool_name", "tool_calls"].iter().enumerate() {
                if j > 0 {
                    sql.push(" OR ");
                }
                sql.push(format!("{table}.{column} LIKE "))
                    .push_bind(pattern.clone())
                    .push(" ESCAPE '\\'");
            }
            sql.push(")");
        }
    }
}

/// Indexes up to [`INDEX_BATCH`] messages past the high-water mark, in the writer's next batch;
/// returns how many.
async fn index_batch(commits: &GroupCommit) -> super::StoreResult<u64> {
    commits
        .write(|db| sqlite_writes::index_batch(db, INDEX_BATCH))
        .await
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl_session_store!(SqliteStore, Sqlite);
impl_pairing!(SqliteStore);
impl_queues!(SqliteStore);
impl_conversations!(SqliteStore, Sqlite);
