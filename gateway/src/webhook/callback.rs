//! Replies to webhook calls that named a `callback_url` are POSTed there by one delivery loop:
//! it reads pending outbox rows (so replies written before a crash are delivered after it),
//! signs each body with the route's secret (`X-Iris-Signature`, as inbound calls are signed),
//! and retries failures with exponential backoff until a 2xx, or gives up after
//! [`MAX_ATTEMPTS`]. Only a 2xx marks a row delivered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{OutboxItem, SessionStore};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::auth::{self, RouteAuth};

/// Delivery attempts per reply.
pub const MAX_ATTEMPTS: i64 = 8;
const PREFIX: &str = "callback:";

/// The outbox target of a reply for `url` on `route`.
pub fn target(route: &str, url: &str) -> String {
    format!("{PREFIX}{route}|{url}")
}

/// `(route, url)` of a callback target.
fn parse(target: &str) -> Option<(&str, &str)> {
    target.strip_prefix(PREFIX)?.split_once('|')
}

/// The delivery loop's settings.
pub struct Deliverer {
    pub store: Arc<dyn SessionStore>,
    pub routes: HashMap<String, RouteAuth>,
    pub client: reqwest::Client,
    /// How often pending rows are looked at.
    pub poll: Duration,
    /// First retry delay; doubles per attempt, capped at 5 minutes.
    pub backoff: Duration,
}

impl Deliverer {
    /// Runs until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        let mut next_try: HashMap<i64, Instant> = HashMap::new();
        loop {
            match self.store.outbox_pending().await {
                Ok(rows) => {
                    for row in rows {
                        let Some((route, url)) = parse(&row.target) else {
                            continue;
                        };
                        if next_try.get(&row.id).is_some_and(|at| Instant::now() < *at) {
                            continue;
                        }
                        match self.deliver(&row, route, url).await {
                            Ok(()) => {
                                next_try.remove(&row.id);
                            }
                            Err(wait) => {
                                next_try.insert(row.id, Instant::now() + wait);
                            }
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "callback delivery: outbox unreadable"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.poll) => {}
            }
        }
    }

    /// One attempt; `Err` says when to try again.
    async fn deliver(&self, row: &OutboxItem, route: &str, url: &str) -> Result<(), Duration> {
        let attempts = self
            .store
            .outbox_begin_attempt(row.id)
            .await
            .map_err(|_| self.backoff)?;
        let meta = &row.payload["meta"];
        let body = json!({
            "conversation": meta["conversation"],
            "message_id": meta["message_id"],
            "session_id": row.payload["session_id"],
            "reply": row.payload["reply"],
            "error": row.payload["error"],
        });
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(bytes.clone());
        if let Some(secret) = self.routes.get(route).and_then(|a| a.secret.as_deref()) {
            request = request.header(auth::SIGNATURE_HEADER, auth::sign(secret, &bytes));
        }
        let outcome = match request.send().await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("HTTP {}", response.status())),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(()) => {
                if let Err(error) = self.store.outbox_mark_delivered(row.id, &[]).await {
                    tracing::warn!(%error, outbox = row.id, "callback delivered but not marked");
                }
                tracing::info!(route, outbox = row.id, attempts, "callback delivered");
                crate::metrics::metrics().delivery("webhook", "delivered");
                Ok(())
            }
            Err(why) if attempts >= MAX_ATTEMPTS => {
                tracing::error!(route, outbox = row.id, attempts, %why, "callback given up");
                let _ = self.store.outbox_mark_failed(row.id).await;
                crate::metrics::metrics().delivery("webhook", "failed");
                Ok(())
            }
            Err(why) => {
                let wait = self
                    .backoff
                    .saturating_mul(1 << attempts.clamp(0, 16))
                    .min(Duration::from_secs(300));
                tracing::warn!(route, outbox = row.id, attempts, %why, retry_in = ?wait, "callback failed");
                crate::metrics::metrics().delivery("webhook", "retry");
                Err(wait)
            }
        }
    }
}
