//! DM pairing requests and approvals, shared by both backends (see `common.rs` for why a
//! macro): the statements are the same text on SQLite and PostgreSQL.

/// Expands the pairing operations as inherent `*_impl` methods of `$store`; the
/// `SessionStore` methods call them.
macro_rules! impl_pairing {
    ($store:ty) => {
        impl $store {
            async fn pairing_request_impl(
                &self,
                request: &NewPairing,
                limits: PairingLimits,
            ) -> StoreResult<PairingOutcome> {
                let now = chrono::Utc::now();
                let expires = now + chrono::Duration::from_std(limits.ttl).unwrap_or(chrono::Duration::MAX);
                let recent = now - chrono::Duration::from_std(limits.per_user_interval).unwrap_or(chrono::Duration::MAX);
                write_tx!(self, |tx| {
                    let paired: Option<String> = sqlx::query_scalar(
                        "SELECT user_id FROM paired_users WHERE platform = $1 AND user_id = $2",
                    )
                    .bind(&request.platform)
                    .bind(&request.user_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if paired.is_some() {
                        return Ok(PairingOutcome::AlreadyPaired);
                    }
                    let asked: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pairing_requests \
                         WHERE platform = $1 AND user_id = $2 AND created_at > $3",
                    )
                    .bind(&request.platform)
                    .bind(&request.user_id)
                    .bind(recent)
                    .fetch_one(&mut *tx)
                    .await?;
                    if asked > 0 {
                        return Ok(PairingOutcome::TooSoon);
                    }
                    let pending: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pairing_requests \
                         WHERE platform = $1 AND approved_at IS NULL AND expires_at > $2",
                    )
                    .bind(&request.platform)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                    if pending >= limits.max_pending {
                        return Ok(PairingOutcome::TooMany);
                    }
                    sqlx::query(
                        "INSERT INTO pairing_requests (platform, user_id, username, code_hash, created_at, expires_at) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(&request.platform)
                    .bind(&request.user_id)
                    .bind(&request.username)
                    .bind(&request.code_hash)
                    .bind(now)
                    .bind(expires)
                    .execute(&mut *tx)
                    .await?;
                    PairingOutcome::Created
                })
            }

            async fn pairing_approve_impl(&self, platform: &str, code_hash: &str) -> StoreResult<Option<PairedUser>> {
                let now = chrono::Utc::now();
                write_tx!(self, |tx| {
                    let row: Option<(i64, String, Option<String>)> = sqlx::query_as(
                        "SELECT id, user_id, username FROM pairing_requests \
                         WHERE platform = $1 AND code_hash = $2 AND approved_at IS NULL AND expires_at > $3 \
                         ORDER BY id DESC LIMIT 1",
                    )
                    .bind(platform)
                    .bind(code_hash)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((id, user_id, username)) = row else {
                        return Ok(None);
                    };
                    sqlx::query("UPDATE pairing_requests SET approved_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO paired_users (platform, user_id, username, approved_at) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (platform, user_id) DO NOTHING",
                    )
                    .bind(platform)
                    .bind(&user_id)
                    .bind(&username)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    Some(PairedUser { platform: platform.to_owned(), user_id, username })
                })
            }

            async fn is_paired_impl(&self, platform: &str, user_id: &str) -> StoreResult<bool> {
                let found: Option<String> = sqlx::query_scalar(
                    "SELECT user_id FROM paired_users WHERE platform = $1 AND user_id = $2",
                )
                .bind(platform)
                .bind(user_id)
                .fetch_optional(self.read_pool())
                .await?;
                Ok(found.is_some())
            }
        }
    };
}
