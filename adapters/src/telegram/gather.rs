//! Webhook mode's joining of messages that are parts of one — an album's photos, the pieces
//! of a long text the Telegram client split — which arrive as separate requests. Each part's
//! request waits until no further part came for [`QUIET`] (at most [`GATHER_AT_MOST`]); then
//! the parts are joined, handed over as one message, and every waiting request learns
//! together whether it was stored. Nothing is acknowledged before it is stored; if the process
//! stops meanwhile, Telegram sends the parts again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::inbound::{Incoming, may_continue, merge_parts};
use crate::platform::Arrival;

/// A group of parts is closed when no part came for this long.
pub const QUIET: Duration = Duration::from_millis(800);
/// A group of parts is closed this long after it opened, whatever still arrives.
pub const GATHER_AT_MOST: Duration = Duration::from_secs(3);

/// What the parts of one message share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum GroupKey {
    /// An album: chat and `media_group_id`.
    Album(i64, String),
    /// A long text in pieces: chat, sender, topic.
    Split(i64, i64, Option<i64>),
}

type Outcome = Option<Result<(), String>>;

/// Parts waiting to be joined, by what they share.
#[derive(Default)]
pub struct Gatherer {
    open: Mutex<HashMap<GroupKey, Group>>,
}

struct Group {
    parts: Vec<Incoming>,
    last: Instant,
    /// `None` until the group is handed over; then whether it was stored.
    done: watch::Receiver<Outcome>,
}

impl Gatherer {
    /// Hands `message` over on `arrivals` — at once, or joined with the other parts of its
    /// group — and waits until it is stored.
    pub async fn hand_over(
        self: &Arc<Self>,
        arrivals: &mpsc::Sender<Arrival>,
        message: Incoming,
    ) -> Result<(), String> {
        let Some(key) = self.key(&message) else {
            return Arrival::hand_over(arrivals, message.into_inbound()).await;
        };
        let mut done = {
            let Ok(mut open) = self.open.lock() else {
                return Err("the gatherer is poisoned".into());
            };
            match open.get_mut(&key) {
                Some(group) => {
                    group.parts.push(message);
                    group.last = Instant::now();
                    group.done.clone()
                }
                None => {
                    let (tx, rx) = watch::channel(None);
                    open.insert(
                        key.clone(),
                        Group {
                            parts: vec![message],
                            last: Instant::now(),
                            done: rx.clone(),
                        },
                    );
                    tokio::spawn(self.clone().close_when_quiet(arrivals.clone(), key, tx));
                    rx
                }
            }
        };
        match done.wait_for(Option::is_some).await {
            Ok(result) => result.clone().unwrap_or(Ok(())),
            Err(_) => Err("the part's group was dropped".into()),
        }
    }

    /// The group `message` belongs to, if it may be a part: an album's, or a long text's
    /// (a long message opens one; any message of its sender joins one that is open).
    fn key(&self, message: &Incoming) -> Option<GroupKey> {
        if let Some(album) = &message.album {
            return Some(GroupKey::Album(message.chat_id, album.clone()));
        }
        let split = GroupKey::Split(message.chat_id, message.user_id, message.topic_id);
        let open = self.open.lock().is_ok_and(|open| open.contains_key(&split));
        (open || may_continue(message)).then_some(split)
    }

    /// Closes a group when it is quiet: joins its parts, hands them over, tells every part.
    async fn close_when_quiet(
        self: Arc<Self>,
        arrivals: mpsc::Sender<Arrival>,
        key: GroupKey,
        done: watch::Sender<Outcome>,
    ) {
        let parts = self.take_when_quiet(&key).await;
        let mut result = Ok(());
        for message in merge_parts(parts) {
            if let Err(error) = Arrival::hand_over(&arrivals, message.into_inbound()).await {
                result = Err(error);
                break;
            }
        }
        let _ = done.send(Some(result));
    }

    /// The group's parts once it has been quiet for [`QUIET`] (or open for
    /// [`GATHER_AT_MOST`]), taken out of the open groups.
    async fn take_when_quiet(&self, key: &GroupKey) -> Vec<Incoming> {
        let opened = Instant::now();
        loop {
            let last = match self.open.lock() {
                Ok(open) => open.get(key).map(|g| g.last),
                Err(_) => None,
            };
            let Some(last) = last else {
                return Vec::new();
            };
            let until = (last + QUIET).min(opened + GATHER_AT_MOST);
            if Instant::now() >= until {
                break;
            }
            tokio::time::sleep_until(until).await;
        }
        self.open
            .lock()
            .ok()
            .and_then(|mut open| open.remove(key))
            .map(|g| g.parts)
            .unwrap_or_default()
    }
}
