//! Sending replies: the outbox rows of Telegram conversations, one at a time, by one task (so
//! this process never sends a row twice), marked delivered with Telegram's message ids; and
//! the side notices of Telegram conversations.

use std::sync::Arc;

use adapters::telegram::send::{Destination, send_reply};
use agent_core::store::OutboxItem;
use anyhow::Result;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Adapter, MAX_ATTEMPTS, SWEEP, TARGET_PREFIX};

impl Adapter {
    /// Sends outbox rows one at a time: those handed over as turns answer, and every few
    /// seconds whatever else is pending (replies to resumed turns, failed sends). One task
    /// sends, and it remembers what it finished, so a row is never sent twice by this process.
    pub(super) async fn deliver(
        self: Arc<Self>,
        mut queue: mpsc::UnboundedReceiver<Delivery>,
        stop: CancellationToken,
    ) {
        let mut finished = std::collections::HashSet::new();
        let mut sweep = tokio::time::interval(SWEEP);
        loop {
            let due = tokio::select! {
                () = stop.cancelled() => return,
                next = queue.recv() => match next { Some(delivery) => vec![delivery], None => return },
                _ = sweep.tick() => match self.store.outbox_pending().await {
                    Ok(rows) => rows.iter().filter_map(Delivery::from_row).collect(),
                    Err(error) => {
                        tracing::warn!(%error, "telegram: outbox unreadable");
                        Vec::new()
                    }
                },
            };
            for delivery in due {
                if finished.contains(&delivery.id) {
                    continue;
                }
                match self.deliver_one(&delivery).await {
                    Ok(()) => {
                        finished.insert(delivery.id);
                    }
                    Err(error) => {
                        tracing::warn!(%error, outbox = delivery.id, "telegram: reply not delivered yet")
                    }
                }
            }
        }
    }

    async fn deliver_one(&self, delivery: &Delivery) -> Result<()> {
        let attempts = self.store.outbox_begin_attempt(delivery.id).await?;
        if attempts > MAX_ATTEMPTS {
            self.store.outbox_mark_failed(delivery.id).await?;
            tracing::error!(
                outbox = delivery.id,
                "telegram: gave up on a reply after {MAX_ATTEMPTS} attempts"
            );
            return Ok(());
        }
        // On failure the row stays pending: the next sweep sends it again.
        let ids = send_reply(&self.bot, delivery.to, &delivery.text).await?;
        self.store.outbox_mark_delivered(delivery.id, &ids).await?;
        Ok(())
    }

    /// Side messages of Telegram conversations (the "queued" acknowledgement) sent as they
    /// come; they answer no message, so they are not threaded.
    pub(super) async fn relay_notices(self: Arc<Self>, stop: CancellationToken) {
        let mut notices = self.gateway.notices();
        loop {
            let notice = tokio::select! {
                () = stop.cancelled() => return,
                notice = notices.recv() => notice,
            };
            match notice {
                Ok(notice) => {
                    if let Some(to) = notice_destination(&notice.conversation_key)
                        && let Err(error) = send_reply(&self.bot, to, &notice.text).await
                    {
                        tracing::debug!(%error, "telegram: notice not sent");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "telegram: skipped notices");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

/// A reply to send: its outbox row, where it goes, and its text.
pub(super) struct Delivery {
    pub id: i64,
    pub to: Destination,
    pub text: String,
}

impl Delivery {
    /// A pending outbox row of this adapter (its target and the meta stored with it).
    pub fn from_row(row: &OutboxItem) -> Option<Self> {
        let chat_id = row.target.strip_prefix(TARGET_PREFIX)?.parse().ok()?;
        let meta = &row.payload["meta"];
        Some(Self {
            id: row.id,
            to: Destination {
                chat_id,
                topic_id: meta["topic_id"].as_i64(),
                reply_to: meta["reply_to"].as_i64(),
            },
            text: row.payload["reply"].as_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Where a notice for a Telegram conversation goes, from its key (DESIGN.md §3; this adapter
/// keys groups per user: `telegram:group:<chat>[:<topic>]:<user>`).
fn notice_destination(key: &str) -> Option<Destination> {
    let parts: Vec<&str> = key.strip_prefix(TARGET_PREFIX)?.split(':').collect();
    let (chat, topic) = match parts.as_slice() {
        ["dm", chat] => (chat, None),
        ["group", chat, _user] => (chat, None),
        ["group", chat, topic, _user] => (chat, topic.parse().ok()),
        _ => return None,
    };
    Some(Destination {
        chat_id: chat.parse().ok()?,
        topic_id: topic,
        reply_to: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_find_their_chat_and_topic_from_the_key() {
        let dm = notice_destination("telegram:dm:42").expect("dm");
        assert_eq!((dm.chat_id, dm.topic_id), (42, None));
        let group = notice_destination("telegram:group:-1005:7").expect("group");
        assert_eq!((group.chat_id, group.topic_id), (-1005, None));
        let topic = notice_destination("telegram:group:-1005:11:7").expect("topic");
        assert_eq!((topic.chat_id, topic.topic_id), (-1005, Some(11)));
        assert!(notice_destination("webhook:crm:x").is_none());
        assert!(notice_destination("telegram:dm:not-a-number").is_none());
    }
}
