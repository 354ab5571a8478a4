//! The inbox and outbox statements both backends share (see `common.rs` for why a macro):
//! accepting and answering a message are each backend's hot path (`*_impl` in `sqlite_writes`
//! and `postgres`); the rest — resumption, the delivery queue — is the same text on both.

/// Expands the queue operations as inherent `*_impl` methods of `$store`; the
/// `SessionStore` methods call them.
macro_rules! impl_queues {
    ($store:ty) => {
        impl $store {
            async fn inbox_unfinished_impl(&self) -> StoreResult<Vec<InboxItem>> {
                let rows = sqlx::query(
                    "SELECT * FROM inbox WHERE state IN ('accepted', 'processing') ORDER BY id",
                )
                .fetch_all(self.read_pool())
                .await?;
                rows.iter().map(inbox_from_row).collect()
            }

            async fn outbox_enqueue_impl(&self, item: &NewOutboxItem) -> StoreResult<OutboxItem> {
                let payload = serde_json::to_string(&item.payload)?;
                write_tx!(self, |tx| {
                    if let Some(inbox_id) = item.inbox_id {
                        let existing = sqlx::query(
                            "SELECT * FROM outbox WHERE inbox_id = $1 AND target = $2",
                        )
                        .bind(inbox_id)
                        .bind(&item.target)
                        .fetch_optional(&mut *tx)
                        .await?;
                        if let Some(row) = existing {
                            return outbox_from_row(&row);
                        }
                    }
                    let row = sqlx::query(
                        "INSERT INTO outbox (inbox_id, target, payload, created_at) \
                         VALUES ($1, $2, $3, $4) RETURNING *",
                    )
                    .bind(item.inbox_id)
                    .bind(&item.target)
                    .bind(&payload)
                    .bind(chrono::Utc::now())
                    .fetch_one(&mut *tx)
                    .await?;
                    outbox_from_row(&row)?
                })
            }

            async fn outbox_begin_attempt_impl(&self, id: i64) -> StoreResult<i64> {
                write_tx!(self, |tx| {
                    sqlx::query_scalar::<_, i64>(
                        "UPDATE outbox SET attempts = attempts + 1 WHERE id = $1 RETURNING attempts",
                    )
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound { what: "outbox row", id: id.to_string() })?
                })
            }

            async fn outbox_mark_delivered_impl(
                &self,
                id: i64,
                platform_message_ids: &[String],
            ) -> StoreResult<()> {
                let ids = serde_json::to_string(platform_message_ids)?;
                write_tx!(self, |tx| {
                    let done = sqlx::query(
                        "UPDATE outbox SET state = 'delivered', platform_message_ids = $1, \
                         delivered_at = $2 WHERE id = $3",
                    )
                    .bind(&ids)
                    .bind(chrono::Utc::now())
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::NotFound { what: "outbox row", id: id.to_string() });
                    }
                })
            }

            async fn outbox_mark_failed_impl(&self, id: i64) -> StoreResult<()> {
                write_tx!(self, |tx| {
                    let done = sqlx::query("UPDATE outbox SET state = 'failed' WHERE id = $1")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::NotFound { what: "outbox row", id: id.to_string() });
                    }
                })
            }

            async fn outbox_pending_impl(&self) -> StoreResult<Vec<OutboxItem>> {
                let rows = sqlx::query("SELECT * FROM outbox WHERE state = 'pending' ORDER BY id")
                    .fetch_all(self.read_pool())
                    .await?;
                rows.iter().map(outbox_from_row).collect()
            }

            async fn outbox_for_inbox_impl(&self, inbox_id: i64) -> StoreResult<Vec<OutboxItem>> {
                let rows = sqlx::query("SELECT * FROM outbox WHERE inbox_id = $1 ORDER BY id")
                    .bind(inbox_id)
                    .fetch_all(self.read_pool())
                    .await?;
                rows.iter().map(outbox_from_row).collect()
            }
        }
    };
}
