//! The router: conversation key → the actor's mailbox, spawning (or restoring) the actor on the
//! first message and dropping it when it has been idle. Eviction happens under the router's
//! lock and only when nobody holds the mailbox and it is empty, so a message can never land in
//! a mailbox that is going away, and there is never more than one actor per conversation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::actor::{Actor, Deps, Job};

struct Entry {
    id: u64,
    mailbox: mpsc::Sender<Job>,
    /// Jobs given and not yet answered (one running, the rest waiting).
    load: Arc<AtomicUsize>,
}

pub(super) struct RouterInner {
    actors: Mutex<HashMap<String, Entry>>,
    next_id: AtomicU64,
    deps: Arc<Deps>,
    mailbox_size: usize,
}

/// Routes jobs to conversation actors.
#[derive(Clone)]
pub struct Router {
    inner: Arc<RouterInner>,
}

/// The conversation's mailbox is full.
#[derive(Debug, thiserror::Error)]
#[error("the conversation's queue is full")]
pub struct Full;

impl Router {
    pub(super) fn new(deps: Arc<Deps>, mailbox_size: usize) -> Self {
        Self {
            inner: Arc::new(RouterInner {
                actors: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                deps,
                mailbox_size: mailbox_size.max(1),
            }),
        }
    }

    /// Whether `key` can take another message now: one may run and `queue_cap` wait.
    pub fn has_room(&self, key: &str) -> bool {
        let cap = self.inner.mailbox_size;
        self.inner
            .actors
            .lock()
            .map(|actors| {
                actors
                    .get(key)
                    .is_none_or(|e| e.load.load(Ordering::SeqCst) <= cap)
            })
            .unwrap_or(false)
    }

    /// Hands `job` to `key`'s actor, starting it if needed; waits while the mailbox is full.
    pub async fn dispatch(&self, key: &str, job: Job) {
        let mut job = job;
        loop {
            let mailbox = self.mailbox(key);
            match mailbox.send(job).await {
                Ok(()) => return,
                // The actor went away between the lookup and the send: start a new one.
                Err(mpsc::error::SendError(back)) => job = back,
            }
        }
    }

    /// Conversations with a live actor.
    pub fn resident(&self) -> usize {
        self.inner.actors.lock().map(|a| a.len()).unwrap_or(0)
    }

    /// Jobs given to actors and not answered yet.
    pub fn pending(&self) -> usize {
        self.inner
            .actors
            .lock()
            .map(|a| a.values().map(|e| e.load.load(Ordering::SeqCst)).sum())
            .unwrap_or(0)
    }

    fn mailbox(&self, key: &str) -> mpsc::Sender<Job> {
        let mut actors = match self.inner.actors.lock() {
            Ok(actors) => actors,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(entry) = actors.get(key)
            && !entry.mailbox.is_closed()
        {
            entry.load.fetch_add(1, Ordering::SeqCst);
            return entry.mailbox.clone();
        }
        let (tx, rx) = mpsc::channel(self.inner.mailbox_size);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let load = Arc::new(AtomicUsize::new(1));
        let actor = Actor {
            key: key.to_owned(),
            id,
            deps: self.inner.deps.clone(),
            router: Arc::downgrade(&self.inner),
            load: load.clone(),
        };
        // Everything the actor logs (its turns included) carries the conversation.
        let span = tracing::info_span!("conversation", conversation = %key);
        tokio::spawn(tracing::Instrument::instrument(actor.run(rx), span));
        actors.insert(
            key.to_owned(),
            Entry {
                id,
                mailbox: tx.clone(),
                load,
            },
        );
        tx
    }
}

impl RouterInner {
    /// Drops `key`'s actor if it is still actor `id`, its mailbox is empty and nobody is about
    /// to send to it. The actor then sees its mailbox close and leaves.
    pub(super) fn evict_if_idle(&self, key: &str, id: u64) {
        let Ok(mut actors) = self.actors.lock() else {
            return;
        };
        let idle = actors.get(key).is_some_and(|e| {
            e.id == id
                && e.mailbox.capacity() == e.mailbox.max_capacity()
                && e.mailbox.strong_count() == 1
                && e.load.load(Ordering::SeqCst) == 0
        });
        if idle {
            actors.remove(key);
            tracing::debug!(conversation = %key, "idle conversation evicted");
        }
    }
}
