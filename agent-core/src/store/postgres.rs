//! The shared backend: PostgreSQL, for several Iris processes on one database.
//!
//! The same schema as SQLite (see `migrations/postgres`). Search uses a GIN index over a
//! `tsvector` of each message (GIN's pending list keeps inserts cheap, so there is no separate
//! indexer and no lag) and a `pg_trgm` GIN index for CJK text and substrings. Migrations take
//! sqlx's advisory lock, so processes starting together do not race.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres};

use super::search_text::{self, Terms};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// A session store in a PostgreSQL database.
#[derive(Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// How many of the newest messages the first search step walks.
    recent_window: i64,
}

impl PostgresStore {
    const BACKEND: &'static str = "postgres";

    /// Connects to `url` and applies pending migrations.
    pub async fn connect(url: &str) -> super::StoreResult<Self> {
        Self::connect_with(url.parse()?).await
    }

    /// Connects with explicit options (e.g. a `search_path` for an isolated schema) and
    /// applies pending migrations.
    pub async fn connect_with(options: PgConnectOptions) -> super::StoreResult<Self> {
        let store = Self::connect_unmigrated(options).await?;
        store.migrate_impl().await?;
        Ok(store)
    }

    /// Connects without migrating (for `iris doctor`, which must see the schema as it is).
    pub async fn connect_unmigrated(options: PgConnectOptions) -> super::StoreResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        Ok(Self {
            pool,
            recent_window: RECENT_WINDOW,
        })
    }

    /// Changes how many of the newest messages the first search step walks (tests use a
    /// tiny window to exercise the second step on a small store).
    pub fn set_search_window(&mut self, messages: i64) {
        self.recent_window = messages.max(1);
    }

    /// PostgreSQL takes row locks; there is no process-wide write gate.
    async fn write_gate(&self) -> super::StoreResult<()> {
        Ok(())
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
        self.pool.begin().await
    }

    fn read_pool(&self) -> &PgPool {
        &self.pool
    }

    fn is_retryable(err: &super::StoreError) -> bool {
        match err {
            // serialization_failure, deadlock_detected
            super::StoreError::Database(sqlx::Error::Database(db)) => {
                matches!(db.code().as_deref(), Some("40001" | "40P01"))
            }
            _ => false,
        }
    }

    fn after_append(&self) {}

    async fn append_impl(
        &self,
        session_id: &str,
        messages: &[super::NewMessage],
    ) -> super::StoreResult<Vec<i64>> {
        write_tx!(self, |tx| {
            Self::append_in(&mut tx, session_id, messages).await?
        })
    }

    // A turn's hot writes: SQLite batches them (`sqlite_writes`); here each is a transaction.

    async fn add_usage_impl(&self, session_id: &str, usage: &SessionUsage) -> StoreResult<()> {
        write_tx!(self, |tx| {
            let done = sqlx::query(
                "UPDATE sessions SET input_tokens = input_tokens + $1, \
                 output_tokens = output_tokens + $2, \
                 cache_read_tokens = cache_read_tokens + $3, \
                 cache_write_tokens = cache_write_tokens + $4, \
                 reasoning_tokens = reasoning_tokens + $5, \
                 estimated_cost_usd = estimated_cost_usd + $6, \
                 api_call_count = api_call_count + $7 WHERE id = $8",
            )
            .bind(usage.input_tokens)
            .bind(usage.output_tokens)
            .bind(usage.cache_read_tokens)
            .bind(usage.cache_write_tokens)
            .bind(usage.reasoning_tokens)
            .bind(usage.estimated_cost_usd)
            .bind(usage.api_call_count)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound {
                    what: "session",
                    id: session_id.to_owned(),
                });
            }
        })
    }

    async fn inbox_accept_impl(&self, item: &NewInboxItem) -> StoreResult<InboxAccept> {
        let payload = serde_json::to_string(&item.payload)?;
        write_tx!(self, |tx| {
            let now = chrono::Utc::now();
            let inserted = sqlx::query(
                "INSERT INTO inbox (source, platform_message_id, conversation_key, payload, \
                 received_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) \
                 ON CONFLICT (source, platform_message_id) DO NOTHING",
            )
            .bind(&item.source)
            .bind(&item.platform_message_id)
            .bind(&item.conversation_key)
            .bind(&payload)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let row =
                sqlx::query("SELECT * FROM inbox WHERE source = $1 AND platform_message_id = $2")
                    .bind(&item.source)
                    .bind(&item.platform_message_id)
                    .fetch_one(&mut *tx)
                    .await?;
            InboxAccept {
                item: inbox_from_row(&row)?,
                fresh: inserted.rows_affected() == 1,
            }
        })
    }

    async fn inbox_begin_attempt_impl(&self, id: i64) -> StoreResult<i64> {
        write_tx!(self, |tx| {
            sqlx::query_scalar::<_, i64>(
                "UPDATE inbox SET attempts = attempts + 1, state = 'processing', updated_at = $1 \
                 WHERE id = $2 RETURNING attempts",
            )
            .bind(chrono::Utc::now())
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "inbox row",
                id: id.to_string(),
            })?
        })
    }

    async fn inbox_set_state_impl(&self, id: i64, state: InboxState) -> StoreResult<()> {
        write_tx!(self, |tx| {
            let done = sqlx::query("UPDATE inbox SET state = $1, updated_at = $2 WHERE id = $3")
                .bind(state.as_str())
                .bind(chrono::Utc::now())
                .bind(id)
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound {
                    what: "inbox row",
                    id: id.to_string(),
                });
            }
        })
    }

    async fn answer_inbox_impl(
        &self,
        reply: &NewOutboxItem,
        delivered: bool,
        state: InboxState,
    ) -> StoreResult<OutboxItem> {
        let inbox_id = reply
            .inbox_id
            .ok_or_else(|| StoreError::Invalid("answer_inbox needs an inbox id".into()))?;
        let payload = serde_json::to_string(&reply.payload)?;
        write_tx!(self, |tx| {
            let now = chrono::Utc::now();
            // The inbox row first: an unknown one writes nothing.
            let done = sqlx::query("UPDATE inbox SET state = $1, updated_at = $2 WHERE id = $3")
                .bind(state.as_str())
                .bind(now)
                .bind(inbox_id)
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound {
                    what: "inbox row",
                    id: inbox_id.to_string(),
                });
            }
            let existing = sqlx::query("SELECT * FROM outbox WHERE inbox_id = $1 AND target = $2")
                .bind(inbox_id)
                .bind(&reply.target)
                .fetch_optional(&mut *tx)
                .await?;
            let row = match existing {
                Some(row) => row,
                None => {
                    sqlx::query(
                        "INSERT INTO outbox (inbox_id, target, payload, created_at) \
                     VALUES ($1, $2, $3, $4) RETURNING *",
                    )
                    .bind(inbox_id)
                    .bind(&reply.target)
                    .bind(&payload)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?
                }
            };
            let mut item = outbox_from_row(&row)?;
            if delivered && item.state == OutboxState::Pending {
                sqlx::query(
                    "UPDATE outbox SET state = 'delivered', delivered_at = $1 WHERE id = $2",
                )
                .bind(now)
                .bind(item.id)
                .execute(&mut *tx)
                .await?;
                item.state = OutboxState::Delivered;
                item.delivered_at = Some(now);
            }
            item
        })
    }

    async fn ping_impl(&self) -> super::StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn migrate_impl(&self) -> super::StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn migration_status_impl(&self) -> super::StoreResult<super::MigrationStatus> {
        let known = MIGRATOR.iter().map(|m| m.version).collect();
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&self.pool)
            .await?;
        let applied = if exists {
            sqlx::query_scalar(
                "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
            )
            .fetch_all(&self.pool)
            .await?
        } else {
            Vec::new()
        };
        Ok(super::MigrationStatus { known, applied })
    }

    async fn sync_index_impl(&self) -> super::StoreResult<u64> {
        Ok(0)
    }

    /// Search in two bounded steps, because a single `ORDER BY id DESC LIMIT n` leaves the
    /// planner a bet it sometimes loses badly: walking the newest rows is fastest for a
    /// common word and scans the whole table for a word that is nowhere (measured: 0.5 s at
    /// a million messages). So: first walk only the newest `recent_window` messages; if
    /// that did not fill the page, the word is rare, and the older rows are collected through
    /// the indexes (a materialised CTE has no `LIMIT` to tempt the planner into a walk).
    async fn search_impl(
        &self,
        query: &super::SearchQuery,
        terms: &Terms,
        lineage: Option<&[String]>,
    ) -> super::StoreResult<Vec<PgRow>> {
        let limit = super::effective_limit(query.limit, 20);
        let newest: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM messages")
            .fetch_one(&self.pool)
            .await?;
        let floor = newest.unwrap_or(0) - self.recent_window;

        let mut recent =
            sqlx::QueryBuilder::<Postgres>::new(format!("SELECT {HIT_COLUMNS} {HIT_FROM}"));
        push_search_conditions(&mut recent, query, terms, lineage);
        recent
            .push(" AND m.id > ")
            .push_bind(floor)
            .push(" ORDER BY m.id DESC LIMIT ")
            .push_bind(limit);
        let mut rows = recent.build().fetch_all(&self.pool).await?;
        let missing = limit - rows.len() as i64;
        if missing > 0 && floor > 0 {
            let mut older = sqlx::QueryBuilder::<Postgres>::new(format!(
                "WITH hits AS MATERIALIZED (SELECT m.id {HIT_FROM}"
            ));
            push_search_conditions(&mut older, query, terms, lineage);
            older.push(" AND m.id <= ").push_bind(floor).push(format!(
                ") SELECT {HIT_COLUMNS} {HIT_FROM} AND m.id IN (SELECT id FROM hits) \
                 ORDER BY m.id DESC LIMIT "
            ));
            older.push_bind(missing);
            rows.extend(older.build().fetch_all(&self.pool).await?);
        }
        Ok(rows)
    }
}

/// The default of `recent_window`.
const RECENT_WINDOW: i64 = 25_000;

/// The columns a search hit is built from.
const HIT_COLUMNS: &str = "m.id, m.session_id, s.conversation_id, s.source, m.role, m.content, \
    m.tool_name, m.tool_calls, m.created_at";
const HIT_FROM: &str = "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE TRUE";

/// Pushes ` AND …` conditions: every term and every filter of the query.
///
/// Words match whole words in the word index or, in rows with CJK text (where word boundaries
/// are invisible: `用Rust写` is one word), as substrings — as on SQLite.
fn push_search_conditions(
    sql: &mut sqlx::QueryBuilder<Postgres>,
    query: &super::SearchQuery,
    terms: &Terms,
    lineage: Option<&[String]>,
) {
    const TEXT: &str = "iris_search_text(m.content, m.tool_name, m.tool_calls)";
    if !terms.words.is_empty() {
        sql.push(" AND (m.search_words @@ to_tsquery('simple'::regconfig, ")
            .push_bind(search_text::pg_tsquery(&terms.words))
            .push(") OR (m.has_cjk");
        for word in &terms.words {
            sql.push(format!(" AND {TEXT} ILIKE "))
                .push_bind(search_text::like_contains(word))
                .push(" ESCAPE '\\'");
        }
        sql.push("))");
    }
    if !terms.cjk.is_empty() {
        // The predicate of the trigram and recent-CJK indexes, so the planner can use them.
        sql.push(" AND m.has_cjk");
    }
    for term in &terms.cjk {
        sql.push(format!(" AND {TEXT} LIKE "))
            .push_bind(search_text::like_contains(term))
            .push(" ESCAPE '\\'");
    }
    push_search_filters(sql, query);
    if let Some(ids) = lineage {
        sql.push(" AND m.session_id = ANY(")
            .push_bind(ids.to_vec())
            .push(")");
    }
}

impl_session_store!(PostgresStore, Postgres);
impl_pairing!(PostgresStore);
impl_queues!(PostgresStore);
impl_conversations!(PostgresStore, Postgres);
