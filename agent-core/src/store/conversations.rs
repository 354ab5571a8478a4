//! Conversations: found or created by key, their settings, and the operator's listing
//! (shared by both backends; see `common.rs` for why a macro).

/// Expands the conversation operations as inherent `*_impl` methods of `$store` over database
/// `$db`; the `SessionStore` methods call them.
macro_rules! impl_conversations {
    ($store:ty, $db:ty) => {
        impl $store {
            async fn conversation_impl(&self, new: &NewConversation) -> StoreResult<Conversation> {
                if let Some(found) = self.conversation_by_key_impl(&new.key).await? {
                    return Ok(found);
                }
                write_tx!(self, |tx| {
                    let now = chrono::Utc::now();
                    sqlx::query(
                        "INSERT INTO conversations (key, source, chat_id, thread_id, user_id, \
                         created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) \
                         ON CONFLICT (key) DO NOTHING",
                    )
                    .bind(&new.key)
                    .bind(&new.source)
                    .bind(new.chat_id.as_deref())
                    .bind(new.thread_id.as_deref())
                    .bind(new.user_id.as_deref())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    let row = sqlx::query("SELECT * FROM conversations WHERE key = $1")
                        .bind(&new.key)
                        .fetch_one(&mut *tx)
                        .await?;
                    conversation_from_row(&row)?
                })
            }

            async fn conversation_by_key_impl(&self, key: &str) -> StoreResult<Option<Conversation>> {
                sqlx::query("SELECT * FROM conversations WHERE key = $1")
                    .bind(key)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(conversation_from_row)
                    .transpose()
            }

            async fn conversation_by_id_impl(&self, id: i64) -> StoreResult<Option<Conversation>> {
                sqlx::query("SELECT * FROM conversations WHERE id = $1")
                    .bind(id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(conversation_from_row)
                    .transpose()
            }

            async fn set_conversation_settings_impl(
                &self,
                id: i64,
                settings: &serde_json::Value,
            ) -> StoreResult<()> {
                let text = serde_json::to_string(settings)?;
                write_tx!(self, |tx| {
                    let done = sqlx::query(
                        "UPDATE conversations SET settings = $1, updated_at = $2 WHERE id = $3",
                    )
                    .bind(&text)
                    .bind(chrono::Utc::now())
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::NotFound { what: "conversation", id: id.to_string() });
                    }
                })
            }

            async fn list_conversations_impl(
                &self,
                filter: &ConversationFilter,
            ) -> StoreResult<Vec<ConversationSummary>> {
                // The newest message of the current session (messages_session index), or the
                // conversation's own last change when the session is still empty.
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT * FROM (SELECT c.*, s.title AS session_title, \
                     COALESCE(s.message_count, 0) AS session_messages, \
                     COALESCE((SELECT m.created_at FROM messages m \
                               WHERE m.session_id = c.current_session_id \
                               ORDER BY m.id DESC LIMIT 1), c.updated_at) AS last_active_at \
                     FROM conversations c LEFT JOIN sessions s ON s.id = c.current_session_id",
                );
                if let Some(source) = &filter.source {
                    query.push(" WHERE c.source = ").push_bind(source.clone());
                }
                query
                    .push(") listed ORDER BY last_active_at DESC, id DESC LIMIT ")
                    .push_bind(effective_limit(filter.limit, 50));
                let rows = query.build().fetch_all(self.read_pool()).await?;
                rows.iter()
                    .map(|row| {
                        Ok(ConversationSummary {
                            conversation: conversation_from_row(row)?,
                            title: row.try_get("session_title")?,
                            message_count: row.try_get("session_messages")?,
                            last_active_at: row.try_get("last_active_at")?,
                        })
                    })
                    .collect()
            }
        }
    };
}
