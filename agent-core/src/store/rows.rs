//! Row mappers: database rows to the types in [`types`](super::types).
//!
//! Written once for both backends, as a macro that [`impl_session_store!`] expands with the
//! backend's row type; see `common.rs` for why a macro.

/// Expands `conversation_from_row`, `session_from_row`, `message_from_row`, `inbox_from_row`,
/// `outbox_from_row` and `title_conflict` for database `$db`.
macro_rules! impl_row_mappers {
    ($db:ty) => {
        type DbRow = <$db as sqlx::Database>::Row;

        fn conversation_from_row(row: &DbRow) -> StoreResult<Conversation> {
            let settings: String = row.try_get("settings")?;
            Ok(Conversation {
                id: row.try_get("id")?,
                key: row.try_get("key")?,
                source: row.try_get("source")?,
                chat_id: row.try_get("chat_id")?,
                thread_id: row.try_get("thread_id")?,
                user_id: row.try_get("user_id")?,
                current_session_id: row.try_get("current_session_id")?,
                settings: serde_json::from_str(&settings)?,
                created_at: row.try_get("created_at")?,
                updated_at: row.try_get("updated_at")?,
            })
        }

        fn session_from_row(row: &DbRow) -> StoreResult<Session> {
            Ok(Session {
                id: row.try_get("id")?,
                conversation_id: row.try_get("conversation_id")?,
                source: row.try_get("source")?,
                parent_session_id: row.try_get("parent_session_id")?,
                started_at: row.try_get("started_at")?,
                ended_at: row.try_get("ended_at")?,
                end_reason: row.try_get("end_reason")?,
                title: row.try_get("title")?,
                model: row.try_get("model")?,
                system_prompt: row.try_get("system_prompt")?,
                usage: SessionUsage {
                    input_tokens: row.try_get("input_tokens")?,
                    output_tokens: row.try_get("output_tokens")?,
                    cache_read_tokens: row.try_get("cache_read_tokens")?,
                    cache_write_tokens: row.try_get("cache_write_tokens")?,
                    reasoning_tokens: row.try_get("reasoning_tokens")?,
                    estimated_cost_usd: row.try_get("estimated_cost_usd")?,
                    api_call_count: row.try_get("api_call_count")?,
                },
                message_count: row.try_get("message_count")?,
                tool_call_count: row.try_get("tool_call_count")?,
                compression_count: row.try_get("compression_count")?,
            })
        }

        fn message_from_row(row: &DbRow) -> StoreResult<Message> {
            let role: String = row.try_get("role")?;
            let tool_calls: Option<String> = row.try_get("tool_calls")?;
            Ok(Message {
                id: row.try_get("id")?,
                session_id: row.try_get("session_id")?,
                created_at: row.try_get("created_at")?,
                active: row.try_get("active")?,
                body: NewMessage {
                    role: parse_role(&role)?,
                    content: row.try_get("content")?,
                    tool_call_id: row.try_get("tool_call_id")?,
                    tool_calls: tool_calls
                        .as_deref()
                        .map(serde_json::from_str)
                        .transpose()?,
                    tool_name: row.try_get("tool_name")?,
                    token_count: row.try_get("token_count")?,
                    finish_reason: row.try_get("finish_reason")?,
                    reasoning: row.try_get("reasoning")?,
                    platform_message_id: row.try_get("platform_message_id")?,
                },
            })
        }

        fn inbox_from_row(row: &DbRow) -> StoreResult<InboxItem> {
            let state: String = row.try_get("state")?;
            let payload: String = row.try_get("payload")?;
            Ok(InboxItem {
                id: row.try_get("id")?,
                source: row.try_get("source")?,
                platform_message_id: row.try_get("platform_message_id")?,
                conversation_key: row.try_get("conversation_key")?,
                payload: serde_json::from_str(&payload)?,
                state: InboxState::parse(&state)
                    .ok_or_else(|| StoreError::Invalid(format!("unknown inbox state {state:?}")))?,
                attempts: row.try_get("attempts")?,
                received_at: row.try_get("received_at")?,
            })
        }

        fn outbox_from_row(row: &DbRow) -> StoreResult<OutboxItem> {
            let state: String = row.try_get("state")?;
            let payload: String = row.try_get("payload")?;
            let ids: String = row.try_get("platform_message_ids")?;
            Ok(OutboxItem {
                id: row.try_get("id")?,
                inbox_id: row.try_get("inbox_id")?,
                target: row.try_get("target")?,
                payload: serde_json::from_str(&payload)?,
                state: OutboxState::parse(&state).ok_or_else(|| {
                    StoreError::Invalid(format!("unknown outbox state {state:?}"))
                })?,
                attempts: row.try_get("attempts")?,
                platform_message_ids: serde_json::from_str(&ids)?,
                created_at: row.try_get("created_at")?,
                delivered_at: row.try_get("delivered_at")?,
            })
        }

        /// Maps a unique violation on `sessions.title` to [`StoreError::TitleTaken`].
        fn title_conflict(err: sqlx::Error, title: Option<&str>) -> StoreError {
            match (&err, title) {
                (sqlx::Error::Database(db), Some(title))
                    if db.is_unique_violation() && db.message().contains("title") =>
                {
                    StoreError::TitleTaken(title.to_owned())
                }
                _ => StoreError::Database(err),
            }
        }
    };
}
