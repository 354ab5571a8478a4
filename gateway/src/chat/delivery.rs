//! Sending replies: a platform's outbox rows, one at a time, by one task (so this process never
//! sends a row twice), marked delivered with the platform's message ids; and the side notices
//! of its conversations (the "queued" acknowledgement), which answer no message.

use std::sync::Arc;
use std::time::Duration;

use adapters::platform::Address;
use agent_core::store::OutboxItem;
use anyhow::Result;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Runner;

/// How often pending replies are looked for besides the ones handed over.
const SWEEP: Duration = Duration::from_secs(3);
/// Delivery attempts per reply before it is marked failed.
const MAX_ATTEMPTS: i64 = 8;

impl Runner {
    /// Sends outbox rows one at a time: those handed over as turns answer, and every few
    /// seconds whatever else is pending (replies to resumed turns, failed sends). It remembers
    /// what it finished, so a row is never sent twice by this process.
    pub(super) async fn deliver(
        self: Arc<Self>,
        mut queue: mpsc::UnboundedReceiver<Delivery>,
        stop: CancellationToken,
    ) {
        let name = self.caps.name;
        let mut finished = Recent::default();
        let mut sweep = tokio::time::interval(SWEEP);
        loop {
            let due = tokio::select! {
                () = stop.cancelled() => return,
                next = queue.recv() => match next { Some(delivery) => vec![delivery], None => return },
                _ = sweep.tick() => match self.store.outbox_pending().await {
                    Ok(rows) => rows.iter().filter_map(|r| Delivery::from_row(name, r)).collect(),
                    Err(error) => {
                        tracing::warn!(platform = name, %error, "outbox unreadable");
                        Vec::new()
                    }
                },
            };
            for delivery in due {
                if finished.contains(delivery.id) {
                    continue;
                }
                match self.deliver_one(&delivery).await {
                    Ok(()) => {
                        finished.insert(delivery.id);
                    }
                    Err(error) => {
                        tracing::warn!(platform = name, %error, outbox = delivery.id, "reply not delivered yet")
                    }
                }
            }
        }
    }

    async fn deliver_one(&self, delivery: &Delivery) -> Result<()> {
        let attempts = self.store.outbox_begin_attempt(delivery.id).await?;
        let metrics = crate::metrics::metrics();
        if attempts > MAX_ATTEMPTS {
            metrics.delivery(self.caps.name, "failed");
            self.store.outbox_mark_failed(delivery.id).await?;
            tracing::error!(
                platform = self.caps.name,
                outbox = delivery.id,
                "gave up on a reply after {MAX_ATTEMPTS} attempts"
            );
            return Ok(());
        }
        // On failure the row stays pending: the next sweep sends it again.
        let ids = match self.platform.send(&delivery.to, &delivery.text).await {
            Ok(ids) => ids,
            Err(error) => {
                metrics.delivery(self.caps.name, "retry");
                return Err(error.into());
            }
        };
        self.store.outbox_mark_delivered(delivery.id, &ids).await?;
        metrics.delivery(self.caps.name, "delivered");
        tracing::info!(
            platform = self.caps.name,
            outbox = delivery.id,
            attempt = attempts,
            parts = ids.len(),
            "reply delivered"
        );
        Ok(())
    }

    /// Side messages of this platform's conversations, sent as they come to where the
    /// conversation's last message came from; not threaded.
    pub(super) async fn relay_notices(self: Arc<Self>, stop: CancellationToken) {
        let mut notices = self.gateway.notices();
        loop {
            let notice = tokio::select! {
                () = stop.cancelled() => return,
                notice = notices.recv() => notice,
            };
            match notice {
                Ok(notice) => {
                    let to = self
                        .addresses
                        .lock()
                        .ok()
                        .and_then(|a| a.get(&notice.conversation_key).cloned());
                    if let Some(to) = to
                        && let Err(error) = self.platform.send(&to, &notice.text).await
                    {
                        tracing::debug!(platform = self.caps.name, %error, "notice not sent");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "skipped notices");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

/// How many finished rows a delivery task remembers.
const REMEMBERED: usize = 4_096;

/// The rows this task finished lately. A row handed over as its turn answered can also turn up
/// in a sweep that read it while it was still pending, so the task must know it sent it; once
/// far more rows have gone by than could still be in flight, it forgets the oldest, so memory
/// stays bounded however long the daemon runs.
#[derive(Default)]
struct Recent {
    ids: std::collections::HashSet<i64>,
    order: std::collections::VecDeque<i64>,
}

impl Recent {
    fn contains(&self, id: i64) -> bool {
        self.ids.contains(&id)
    }

    fn insert(&mut self, id: i64) {
        if self.ids.insert(id) {
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
    }
}

/// A reply to send: its outbox row, where it goes, and its text.
pub(crate) struct Delivery {
    pub id: i64,
    pub to: Address,
    pub text: String,
}

impl Delivery {
    /// A pending outbox row of platform `name` (target `<name>:<chat>`, the address in its
    /// meta).
    pub fn from_row(name: &str, row: &OutboxItem) -> Option<Self> {
        let chat = row.target.strip_prefix(name)?.strip_prefix(':')?;
        let meta = &row.payload["meta"];
        Some(Self {
            id: row.id,
            to: Address {
                chat: chat.to_owned(),
                thread: id_of(&meta["thread"]),
                reply_to: id_of(&meta["reply_to"]),
            },
            text: row.payload["reply"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// An id stored as a string (or, by earlier versions, a number).
fn id_of(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, meta: serde_json::Value) -> OutboxItem {
        serde_json::from_value(serde_json::json!({
            "id": 5, "inbox_id": 1, "target": target, "state": "pending", "attempts": 0,
            "platform_message_ids": [], "created_at": "2026-11-30T00:00:00Z",
            "payload": {"reply": "hi", "meta": meta},
        }))
        .expect("row")
    }

    #[test]
    fn rows_are_read_back_as_addresses_of_their_platform_only() {
        let d = Delivery::from_row(
            "telegram",
            &row(
                "telegram:-1005",
                serde_json::json!({"thread": "11", "reply_to": 7}),
            ),
        )
        .expect("telegram row");
        assert_eq!(
            d.to,
            Address {
                chat: "-1005".into(),
                thread: Some("11".into()),
                reply_to: Some("7".into())
            }
        );
        assert!(Delivery::from_row("discord", &row("telegram:1", serde_json::json!({}))).is_none());
        assert!(Delivery::from_row("tele", &row("telegram:1", serde_json::json!({}))).is_none());
    }

    #[test]
    fn finished_rows_are_remembered_up_to_a_bound() {
        let mut recent = Recent::default();
        for id in 0..(REMEMBERED as i64 + 10) {
            recent.insert(id);
            recent.insert(id);
        }
        assert!(!recent.contains(9), "the oldest are forgotten");
        assert!(recent.contains(10) && recent.contains(REMEMBERED as i64 + 9));
        assert_eq!(recent.ids.len(), REMEMBERED);
        assert_eq!(recent.order.len(), REMEMBERED);
    }
}
