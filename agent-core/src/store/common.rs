//! The operations both backends share, written once.
//!
//! SQLite (through sqlx) accepts PostgreSQL's `$1` placeholders, `RETURNING`, `ON CONFLICT` and
//! recursive CTEs, so almost every statement is the same text on both. sqlx has no practical
//! way to be generic over the database for this much code (every function would carry the same
//! page of trait bounds), so [`impl_session_store!`] expands the shared `SessionStore` methods
//! for each backend. A backend supplies the parts that differ as inherent methods:
//!
//! - `write_gate()`: held for a whole write transaction (SQLite: the process's one write permit,
//!   shared with the group-commit writer; PostgreSQL: nothing);
//! - `begin_write()`: a write transaction (SQLite: `BEGIN IMMEDIATE` on the single writer);
//! - `read_pool()`: where reads go;
//! - `is_retryable(&StoreError)`: which failures a write retries (SQLite busy/locked,
//!   PostgreSQL serialization failures) with jittered backoff;
//! - `append_impl()`, `add_usage_impl()`, `inbox_accept_impl()`, `inbox_begin_attempt_impl()`,
//!   `inbox_set_state_impl()`, `answer_inbox_impl()`: a turn's hot writes (SQLite commits them
//!   in batches across conversations, see `group_commit`);
//! - `after_append()`: a hook after messages are committed (SQLite wakes its indexer);
//! - `ping_impl`, `migrate_impl`, `migration_status_impl`, `search_impl`, `sync_index_impl`.
//!
//! Statements that are the same on both backends but belong together live in their own macro
//! files beside this one: `conversations` (find or create, settings, the operator's listing),
//! `queues` (inbox resumption and the outbox) and `pairing`.

use std::time::Duration;

/// Messages per `INSERT` statement: 11 parameters a row keeps a statement far below SQLite's
/// variable limit.
pub(crate) const APPEND_CHUNK: usize = 500;

/// How often a write is retried when the database is busy.
pub(crate) const MAX_WRITE_RETRIES: u32 = 12;

/// Jittered exponential backoff for the n-th retry (1-based): 5 ms doubling, capped at 500 ms.
pub(crate) fn retry_delay(attempt: u32) -> Duration {
    let ceiling = 5u64.saturating_mul(1 << attempt.min(7)).min(500);
    Duration::from_millis(ceiling / 2 + fastrand::u64(0..=ceiling / 2))
}

/// Columns of `sessions`, in the order the row mappers read them.
pub(crate) const SESSION_COLUMNS: &str = "id, conversation_id, source, parent_session_id, \
    started_at, ended_at, end_reason, title, model, system_prompt, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated_cost_usd, api_call_count, \
    message_count, tool_call_count, compression_count";

/// Columns of `messages` the row mapper reads (PostgreSQL adds search columns nobody reads).
pub(crate) const MESSAGE_COLUMNS: &str = "id, session_id, role, content, tool_call_id, tool_calls, \
    tool_name, created_at, token_count, finish_reason, reasoning, platform_message_id, active";

/// Runs `$body` in a write transaction, committing on success and retrying the whole
/// transaction on failures the backend calls retryable. The body must not move its captures:
/// it may run more than once.
macro_rules! write_tx {
    ($self:ident, |$tx:ident| $body:block) => {{
        let mut attempt: u32 = 0;
        loop {
            let result: $crate::store::StoreResult<_> = async {
                let _gate = $self.write_gate().await?;
                #[allow(unused_mut)]
                let mut $tx = $self.begin_write().await?;
                let value = $body;
                $tx.commit().await?;
                Ok(value)
            }
            .await;
            match result {
                Err(err)
                    if attempt < $crate::store::common::MAX_WRITE_RETRIES
                        && Self::is_retryable(&err) =>
                {
                    attempt += 1;
                    tracing::debug!(attempt, error = %err, "store busy, retrying write");
                    tokio::time::sleep($crate::store::common::retry_delay(attempt)).await;
                }
                other => break other,
            }
        }
    }};
}

/// Expands the shared `SessionStore` implementation for `$store` over database `$db`.
macro_rules! impl_session_store {
    ($store:ty, $db:ty) => {
        #[allow(unused_imports)]
        use sqlx::Row as _;
        use $crate::store::common::{MESSAGE_COLUMNS, SESSION_COLUMNS};
        use $crate::store::ids::{new_session_id, next_numbered_title, numbered_title_pattern, split_numbered_title};
        use $crate::store::*;

        type Tx = sqlx::Transaction<'static, $db>;

        impl_row_mappers!($db);

        /// Pushes `INSERT INTO messages … RETURNING id` for `chunk` (at most
        /// [`APPEND_CHUNK`]($crate::store::common::APPEND_CHUNK) rows).
        fn push_insert_messages(
            sql: &mut sqlx::QueryBuilder<$db>,
            session_id: &str,
            chunk: &[NewMessage],
            now: chrono::DateTime<chrono::Utc>,
        ) -> StoreResult<()> {
            let mut tool_calls = Vec::with_capacity(chunk.len());
            for m in chunk {
                tool_calls.push(m.tool_calls.as_ref().map(serde_json::to_string).transpose()?);
            }
            sql.push(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, \
                 tool_name, created_at, token_count, finish_reason, reasoning, \
                 platform_message_id) ",
            );
            sql.push_values(chunk.iter().zip(tool_calls), |mut row, (m, calls)| {
                row.push_bind(session_id.to_owned())
                    .push_bind(m.role.as_str())
                    .push_bind(m.content.clone())
                    .push_bind(m.tool_call_id.clone())
                    .push_bind(calls)
                    .push_bind(m.tool_name.clone())
                    .push_bind(now)
                    .push_bind(m.token_count)
                    .push_bind(m.finish_reason.clone())
                    .push_bind(m.reasoning.clone())
                    .push_bind(m.platform_message_id.clone());
            });
            sql.push(" RETURNING id");
            Ok(())
        }

        /// Pushes the search filters both backends express the same way (source, role,
        /// conversation); each backend adds the lineage filter in its own dialect.
        fn push_search_filters(sql: &mut sqlx::QueryBuilder<$db>, query: &SearchQuery) {
            if let Some(source) = &query.source {
                sql.push(" AND s.source = ").push_bind(source.clone());
            }
            if let Some(role) = query.role {
                sql.push(" AND m.role = ").push_bind(role.as_str());
            }
            if let Some(id) = query.conversation_id {
                sql.push(" AND s.conversation_id = ").push_bind(id);
            }
        }

        /// Pushes the `UPDATE sessions` that counts `messages` and their tool calls.
        fn push_counter_update(sql: &mut sqlx::QueryBuilder<$db>, session_id: &str, messages: &[NewMessage]) {
            let tool_calls: i64 = messages.iter().map(NewMessage::tool_call_len).sum();
            sql.push("UPDATE sessions SET message_count = message_count + ")
                .push_bind(messages.len() as i64)
                .push(", tool_call_count = tool_call_count + ")
                .push_bind(tool_calls)
                .push(" WHERE id = ")
                .push_bind(session_id.to_owned());
        }

        impl $store {
            async fn session_in(tx: &mut Tx, id: &str) -> StoreResult<Session> {
                let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound { what: "session", id: id.to_owned() })?;
                session_from_row(&row)
            }

            async fn conversation_in(tx: &mut Tx, id: i64) -> StoreResult<Conversation> {
                let row = sqlx::query("SELECT * FROM conversations WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "conversation",
                        id: id.to_string(),
                    })?;
                conversation_from_row(&row)
            }

            async fn title_free(tx: &mut Tx, title: &str) -> StoreResult<bool> {
                let row = sqlx::query("SELECT 1 FROM sessions WHERE title = $1")
                    .bind(title)
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(row.is_none())
            }

            /// The next free `Base (N)` title of a lineage.
            async fn numbered_title(tx: &mut Tx, base: &str) -> StoreResult<String> {
                let (base, _) = split_numbered_title(base);
                let taken: Vec<String> = sqlx::query_scalar(
                    "SELECT title FROM sessions WHERE title = $1 OR title LIKE $2 ESCAPE '\\'",
                )
                .bind(base)
                .bind(numbered_title_pattern(base))
                .fetch_all(&mut **tx)
                .await?;
                Ok(next_numbered_title(base, taken.iter().map(String::as_str)))
            }

            /// Inserts a session (retrying the rare id collision) and points its
            /// conversation at it.
            async fn insert_session(
                tx: &mut Tx,
                conversation: &Conversation,
                parent: Option<&Session>,
                spec: &SessionSpec,
                title: Option<&str>,
                compression_count: i64,
            ) -> StoreResult<Session> {
                let now = chrono::Utc::now();
                let mut id = new_session_id(now);
                loop {
                    let inserted = sqlx::query(
                        "INSERT INTO sessions (id, conversation_id, source, parent_session_id, \
                         started_at, title, model, system_prompt, compression_count) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(&id)
                    .bind(conversation.id)
                    .bind(&conversation.source)
                    .bind(parent.map(|p| p.id.as_str()))
                    .bind(now)
                    .bind(title)
                    .bind(spec.model.as_deref())
                    .bind(spec.system_prompt.as_deref())
                    .bind(compression_count)
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| title_conflict(e, title))?;
                    if inserted.rows_affected() == 1 {
                        break;
                    }
                    id = new_session_id(now);
                }
                sqlx::query(
                    "UPDATE conversations SET current_session_id = $1, updated_at = $2 WHERE id = $3",
                )
                .bind(&id)
                .bind(now)
                .bind(conversation.id)
                .execute(&mut **tx)
                .await?;
                Self::session_in(tx, &id).await
            }

            /// Ends a session unless it already ended; true when this call ended it.
            async fn end_in(tx: &mut Tx, id: &str, reason: EndReason) -> StoreResult<bool> {
                let done = sqlx::query(
                    "UPDATE sessions SET ended_at = $1, end_reason = $2 \
                     WHERE id = $3 AND end_reason IS NULL",
                )
                .bind(chrono::Utc::now())
                .bind(reason.as_str())
                .bind(id)
                .execute(&mut **tx)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            /// Appends messages and bumps the session's counters; returns their ids.
            async fn append_in(
                tx: &mut Tx,
                session_id: &str,
                messages: &[NewMessage],
            ) -> StoreResult<Vec<i64>> {
                if messages.is_empty() {
                    return Ok(Vec::new());
                }
                let now = chrono::Utc::now();
                let mut ids = Vec::with_capacity(messages.len());
                for chunk in messages.chunks($crate::store::common::APPEND_CHUNK) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new("");
                    push_insert_messages(&mut insert, session_id, chunk, now)?;
                    let mut chunk_ids: Vec<i64> =
                        insert.build_query_scalar().fetch_all(&mut **tx).await?;
                    // RETURNING order is not promised; ids are assigned in insert order.
                    chunk_ids.sort_unstable();
                    ids.extend(chunk_ids);
                }
                let mut update = sqlx::QueryBuilder::<$db>::new("");
                push_counter_update(&mut update, session_id, messages);
                let updated = update.build().execute(&mut **tx).await?;
                if updated.rows_affected() == 0 {
                    return Err(StoreError::NotFound { what: "session", id: session_id.to_owned() });
                }
                Ok(ids)
            }

            async fn active_messages_in(tx: &mut Tx, session_id: &str) -> StoreResult<Vec<NewMessage>> {
                let rows = sqlx::query(
                    sqlx::AssertSqlSafe(format!(
                        "SELECT {MESSAGE_COLUMNS} FROM messages \
                         WHERE session_id = $1 AND active = TRUE ORDER BY id"
                    )),
                )
                .bind(session_id)
                .fetch_all(&mut **tx)
                .await?;
                rows.iter().map(|r| message_from_row(r).map(|m| m.body)).collect()
            }

            async fn rotate_in(tx: &mut Tx, rotation: &Rotation) -> StoreResult<Session> {
                let conversation = Self::conversation_in(tx, rotation.conversation_id).await?;
                if conversation.current_session_id.as_deref() != Some(&rotation.from_session_id) {
                    return Err(StoreError::Invalid(format!(
                        "session {} is not the current session of conversation {}",
                        rotation.from_session_id, conversation.key
                    )));
                }
                let old = Self::session_in(tx, &rotation.from_session_id).await?;
                Self::end_in(tx, &old.id, rotation.end_reason).await?;
                let parent = rotation.link_parent.then_some(&old);
                let title = match (&rotation.spec.title, parent.and_then(|p| p.title.as_deref())) {
                    (Some(title), _) => Some(title.clone()),
                    (None, Some(parent_title)) => Some(Self::numbered_title(tx, parent_title).await?),
                    (None, None) => None,
                };
                if let Some(title) = &title
                    && !Self::title_free(tx, title).await?
                {
                    return Err(StoreError::TitleTaken(title.clone()));
                }
                let compressions = if !rotation.link_parent {
                    0
                } else if rotation.end_reason == EndReason::Compression {
                    old.compression_count + 1
                } else {
                    old.compression_count
                };
                let new = Self::insert_session(
                    tx,
                    &conversation,
                    parent,
                    &rotation.spec,
                    title.as_deref(),
                    compressions,
                )
                .await?;
                Self::append_in(tx, &new.id, &rotation.messages).await?;
                Self::session_in(tx, &new.id).await
            }
        }

        #[async_trait::async_trait]
        impl SessionStore for $store {
            fn backend(&self) -> &'static str {
                Self::BACKEND
            }

            async fn ping(&self) -> StoreResult<()> {
                self.ping_impl().await
            }

            async fn migrate(&self) -> StoreResult<()> {
                self.migrate_impl().await
            }

            async fn migration_status(&self) -> StoreResult<MigrationStatus> {
                self.migration_status_impl().await
            }

            async fn conversation(&self, new: &NewConversation) -> StoreResult<Conversation> {
                self.conversation_impl(new).await
            }

            async fn conversation_by_key(&self, key: &str) -> StoreResult<Option<Conversation>> {
                self.conversation_by_key_impl(key).await
            }

            async fn conversation_by_id(&self, id: i64) -> StoreResult<Option<Conversation>> {
                self.conversation_by_id_impl(id).await
            }

            async fn list_conversations(
                &self,
                filter: &ConversationFilter,
            ) -> StoreResult<Vec<ConversationSummary>> {
                self.list_conversations_impl(filter).await
            }

            async fn set_conversation_settings(
                &self,
                id: i64,
                settings: &serde_json::Value,
            ) -> StoreResult<()> {
                self.set_conversation_settings_impl(id, settings).await
            }

            async fn start_session(
                &self,
                conversation_id: i64,
                spec: &SessionSpec,
            ) -> StoreResult<Session> {
                write_tx!(self, |tx| {
                    let conversation = Self::conversation_in(&mut tx, conversation_id).await?;
                    if let Some(title) = &spec.title
                        && !Self::title_free(&mut tx, title).await?
                    {
                        return Err(StoreError::TitleTaken(title.clone()));
                    }
                    Self::insert_session(&mut tx, &conversation, None, spec, spec.title.as_deref(), 0)
                        .await?
                })
            }

            async fn session(&self, id: &str) -> StoreResult<Option<Session>> {
                let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(session_from_row)
                    .transpose()
            }

            async fn list_sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<Session>> {
                let mut query = sqlx::QueryBuilder::<$db>::new(format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE 1 = 1"
                ));
                if let Some(id) = filter.conversation_id {
                    query.push(" AND conversation_id = ").push_bind(id);
                }
                if let Some(source) = &filter.source {
                    query.push(" AND source = ").push_bind(source.clone());
                }
                query
                    .push(" ORDER BY started_at DESC, id DESC LIMIT ")
                    .push_bind(effective_limit(filter.limit, 50));
                let rows = query.build().fetch_all(self.read_pool()).await?;
                rows.iter().map(session_from_row).collect()
            }

            async fn end_session(&self, id: &str, reason: EndReason) -> StoreResult<bool> {
                write_tx!(self, |tx| {
                    Self::session_in(&mut tx, id).await?;
                    Self::end_in(&mut tx, id, reason).await?
                })
            }

            async fn rotate(&self, rotation: &Rotation) -> StoreResult<Session> {
                let session = write_tx!(self, |tx| { Self::rotate_in(&mut tx, rotation).await? })?;
                if !rotation.messages.is_empty() {
                    self.after_append();
                }
                Ok(session)
            }

            async fn branch(
                &self,
                source_session_id: &str,
                title: Option<&str>,
            ) -> StoreResult<Session> {
                let session = write_tx!(self, |tx| {
                    let source = Self::session_in(&mut tx, source_session_id).await?;
                    let messages = Self::active_messages_in(&mut tx, source_session_id).await?;
                    let conversation = Self::conversation_in(&mut tx, source.conversation_id).await?;
                    let rotation = Rotation {
                        conversation_id: source.conversation_id,
                        from_session_id: source.id.clone(),
                        end_reason: EndReason::Branched,
                        link_parent: true,
                        spec: SessionSpec {
                            title: title.map(str::to_owned),
                            model: source.model.clone(),
                            system_prompt: source.system_prompt.clone(),
                        },
                        messages,
                    };
                    if conversation.current_session_id.as_deref() != Some(source_session_id) {
                        // Branching an older session switches away from the current one,
                        // and the source becomes current so the rotation can end it.
                        if let Some(current) = &conversation.current_session_id {
                            Self::end_in(&mut tx, current, EndReason::SessionSwitch).await?;
                        }
                        sqlx::query("UPDATE conversations SET current_session_id = $1 WHERE id = $2")
                            .bind(source_session_id)
                            .bind(conversation.id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Self::rotate_in(&mut tx, &rotation).await?
                })?;
                self.after_append();
                Ok(session)
            }

            async fn resume(&self, conversation_id: i64, session_id: &str) -> StoreResult<Session> {
                write_tx!(self, |tx| {
                    let conversation = Self::conversation_in(&mut tx, conversation_id).await?;
                    let target = Self::session_in(&mut tx, session_id).await?;
                    if target.conversation_id != conversation_id {
                        return Err(StoreError::Invalid(format!(
                            "session {session_id} belongs to another conversation"
                        )));
                    }
                    if let Some(current) = &conversation.current_session_id
                        && current != session_id
                    {
                        Self::end_in(&mut tx, current, EndReason::SessionSwitch).await?;
                    }
                    let now = chrono::Utc::now();
                    sqlx::query("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = $1")
                        .bind(session_id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE conversations SET current_session_id = $1, updated_at = $2 WHERE id = $3",
                    )
                    .bind(session_id)
                    .bind(now)
                    .bind(conversation_id)
                    .execute(&mut *tx)
                    .await?;
                    Self::session_in(&mut tx, session_id).await?
                })
            }

            async fn set_title(&self, session_id: &str, title: &str) -> StoreResult<()> {
                let title = title.trim();
                if title.is_empty() {
                    return Err(StoreError::Invalid("a title cannot be empty".into()));
                }
                write_tx!(self, |tx| {
                    let session = Self::session_in(&mut tx, session_id).await?;
                    if session.title.as_deref() == Some(title) {
                        return Ok(());
                    }
                    if !Self::title_free(&mut tx, title).await? {
                        return Err(StoreError::TitleTaken(title.to_owned()));
                    }
                    sqlx::query("UPDATE sessions SET title = $1 WHERE id = $2")
                        .bind(title)
                        .bind(session_id)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| title_conflict(e, Some(title)))?;
                })
            }

            async fn freeze_system_prompt(&self, session_id: &str, prompt: &str) -> StoreResult<String> {
                write_tx!(self, |tx| {
                    sqlx::query("UPDATE sessions SET system_prompt = $1 WHERE id = $2 AND system_prompt IS NULL")
                        .bind(prompt)
                        .bind(session_id)
                        .execute(&mut *tx)
                        .await?;
                    let session = Self::session_in(&mut tx, session_id).await?;
                    session.system_prompt.unwrap_or_default()
                })
            }

            async fn pairing_request(
                &self,
                request: &NewPairing,
                limits: PairingLimits,
            ) -> StoreResult<PairingOutcome> {
                self.pairing_request_impl(request, limits).await
            }

            async fn pairing_approve(&self, platform: &str, code_hash: &str) -> StoreResult<Option<PairedUser>> {
                self.pairing_approve_impl(platform, code_hash).await
            }

            async fn is_paired(&self, platform: &str, user_id: &str) -> StoreResult<bool> {
                self.is_paired_impl(platform, user_id).await
            }

            async fn try_lock_session(&self, session_id: &str, holder: &str, ttl: std::time::Duration) -> StoreResult<bool> {
                let now = chrono::Utc::now();
                let until = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
                write_tx!(self, |tx| {
                    let done = sqlx::query(
                        "INSERT INTO session_locks (session_id, holder, expires_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
                         WHERE session_locks.expires_at < $4 OR session_locks.holder = $2",
                    )
                    .bind(session_id)
                    .bind(holder)
                    .bind(until)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    done.rows_affected() == 1
                })
            }

            async fn unlock_session(&self, session_id: &str, holder: &str) -> StoreResult<()> {
                write_tx!(self, |tx| {
                    sqlx::query("DELETE FROM session_locks WHERE session_id = $1 AND holder = $2")
                        .bind(session_id)
                        .bind(holder)
                        .execute(&mut *tx)
                        .await?;
                })
            }

            async fn session_by_title(&self, title: &str) -> StoreResult<Option<Session>> {
                let (base, _) = split_numbered_title(title);
                let sql = format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE title = $1 OR title = $2 \
                     OR title LIKE $3 ESCAPE '\\'"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(title)
                    .bind(base)
                    .bind(numbered_title_pattern(base))
                    .fetch_all(self.read_pool())
                    .await?;
                let sessions = rows.iter().map(session_from_row).collect::<StoreResult<Vec<_>>>()?;
                if let Some(exact) = sessions.iter().find(|s| s.title.as_deref() == Some(title)) {
                    if title != base {
                        return Ok(Some(exact.clone()));
                    }
                }
                // The bare title names its newest numbered variant.
                Ok(sessions
                    .into_iter()
                    .filter_map(|s| {
                        let (b, n) = split_numbered_title(s.title.as_deref()?);
                        (b == base).then_some((n, s))
                    })
                    .max_by_key(|(n, _)| *n)
                    .map(|(_, s)| s))
            }

            async fn add_usage(&self, session_id: &str, usage: &SessionUsage) -> StoreResult<()> {
                self.add_usage_impl(session_id, usage).await
            }

            async fn lineage(&self, session_id: &str) -> StoreResult<Vec<Session>> {
                let sql = format!(
                    "WITH RECURSIVE up(sid, depth) AS ( \
                       SELECT id, 0 FROM sessions WHERE id = $1 \
                       UNION ALL \
                       SELECT s.parent_session_id, up.depth + 1 FROM sessions s JOIN up ON s.id = up.sid \
                       WHERE s.parent_session_id IS NOT NULL AND up.depth < 100000) \
                     SELECT {SESSION_COLUMNS} FROM sessions JOIN up ON sessions.id = up.sid \
                     ORDER BY up.depth DESC"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(session_id)
                    .fetch_all(self.read_pool())
                    .await?;
                if rows.is_empty() {
                    return Err(StoreError::NotFound { what: "session", id: session_id.to_owned() });
                }
                rows.iter().map(session_from_row).collect()
            }

            async fn lineage_family(&self, session_id: &str) -> StoreResult<Vec<Session>> {
                let chain = self.lineage(session_id).await?;
                let root = chain.first().map(|s| s.id.clone()).unwrap_or_default();
                let sql = format!(
                    "WITH RECURSIVE down(sid, depth) AS ( \
                       SELECT id, 0 FROM sessions WHERE id = $1 \
                       UNION ALL \
                       SELECT s.id, down.depth + 1 FROM sessions s JOIN down ON s.parent_session_id = down.sid \
                       WHERE down.depth < 100000) \
                     SELECT {SESSION_COLUMNS} FROM sessions WHERE id IN (SELECT sid FROM down) \
                     ORDER BY started_at, id"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&root)
                    .fetch_all(self.read_pool())
                    .await?;
                rows.iter().map(session_from_row).collect()
            }

            async fn append_messages(
                &self,
                session_id: &str,
                messages: &[NewMessage],
            ) -> StoreResult<Vec<i64>> {
                let ids = self.append_impl(session_id, messages).await?;
                self.after_append();
                Ok(ids)
            }

            async fn messages(&self, session_id: &str) -> StoreResult<Vec<Message>> {
                let rows = sqlx::query(
                    sqlx::AssertSqlSafe(format!(
                        "SELECT {MESSAGE_COLUMNS} FROM messages \
                         WHERE session_id = $1 AND active = TRUE ORDER BY id"
                    )),
                )
                .bind(session_id)
                .fetch_all(self.read_pool())
                .await?;
                rows.iter().map(message_from_row).collect()
            }

            async fn deactivate_messages(&self, session_id: &str, ids: &[i64]) -> StoreResult<u64> {
                write_tx!(self, |tx| {
                    let mut changed = 0;
                    for id in ids {
                        changed += sqlx::query(
                            "UPDATE messages SET active = FALSE WHERE id = $1 AND session_id = $2 AND active = TRUE",
                        )
                        .bind(*id)
                        .bind(session_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    }
                    changed
                })
            }

            async fn inbox_accept(&self, item: &NewInboxItem) -> StoreResult<InboxAccept> {
                self.inbox_accept_impl(item).await
            }

            async fn inbox_begin_attempt(&self, id: i64) -> StoreResult<i64> {
                self.inbox_begin_attempt_impl(id).await
            }

            async fn inbox_set_state(&self, id: i64, state: InboxState) -> StoreResult<()> {
                self.inbox_set_state_impl(id, state).await
            }

            async fn inbox_unfinished(&self) -> StoreResult<Vec<InboxItem>> {
                self.inbox_unfinished_impl().await
            }

            async fn outbox_enqueue(&self, item: &NewOutboxItem) -> StoreResult<OutboxItem> {
                self.outbox_enqueue_impl(item).await
            }

            async fn outbox_begin_attempt(&self, id: i64) -> StoreResult<i64> {
                self.outbox_begin_attempt_impl(id).await
            }

            async fn outbox_mark_delivered(
                &self,
                id: i64,
                platform_message_ids: &[String],
            ) -> StoreResult<()> {
                self.outbox_mark_delivered_impl(id, platform_message_ids).await
            }

            async fn outbox_mark_failed(&self, id: i64) -> StoreResult<()> {
                self.outbox_mark_failed_impl(id).await
            }

            async fn outbox_pending(&self) -> StoreResult<Vec<OutboxItem>> {
                self.outbox_pending_impl().await
            }

            async fn outbox_for_inbox(&self, inbox_id: i64) -> StoreResult<Vec<OutboxItem>> {
                self.outbox_for_inbox_impl(inbox_id).await
            }

            async fn answer_inbox(
                &self,
                reply: &NewOutboxItem,
                delivered: bool,
                state: InboxState,
            ) -> StoreResult<OutboxItem> {
                self.answer_inbox_impl(reply, delivered, state).await
            }

            async fn search(&self, query: &SearchQuery) -> StoreResult<Vec<SearchHit>> {
                let terms = $crate::store::search_text::terms(&query.text);
                if terms.is_empty() {
                    return Ok(Vec::new());
                }
                let lineage = match &query.lineage_of {
                    Some(id) => Some(
                        self.lineage_family(id).await?.into_iter().map(|s| s.id).collect::<Vec<_>>(),
                    ),
                    None => None,
                };
                let rows = self.search_impl(query, &terms, lineage.as_deref()).await?;
                let mut roots = std::collections::HashMap::<String, String>::new();
                let mut hits = Vec::with_capacity(rows.len());
                for row in rows {
                    let session_id: String = row.try_get("session_id")?;
                    let root = match roots.get(&session_id) {
                        Some(root) => root.clone(),
                        None => {
                            let chain = self.lineage(&session_id).await?;
                            let root = chain.first().map(|s| s.id.clone()).unwrap_or_else(|| session_id.clone());
                            roots.insert(session_id.clone(), root.clone());
                            root
                        }
                    };
                    let fields: [Option<String>; 3] =
                        [row.try_get("content")?, row.try_get("tool_name")?, row.try_get("tool_calls")?];
                    let snippet = $crate::store::search_text::best_snippet(&fields, &terms);
                    let role: String = row.try_get("role")?;
                    hits.push(SearchHit {
                        message_id: row.try_get("id")?,
                        session_id,
                        root_session_id: root,
                        conversation_id: row.try_get("conversation_id")?,
                        source: row.try_get("source")?,
                        role: parse_role(&role)?,
                        snippet,
                        created_at: row.try_get("created_at")?,
                    });
                }
                Ok(hits)
            }

            async fn sync_search_index(&self) -> StoreResult<u64> {
                self.sync_index_impl().await
            }
        }
    };
}
