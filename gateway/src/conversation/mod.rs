//! Conversations at run time (DESIGN.md §2): every inbound message is written to the inbox
//! before anyone is told it arrived, then handed to its conversation's actor; the reply is
//! written to the outbox before it is delivered. A message seen twice runs once; messages left
//! unanswered by a crash are resumed on the next start.
//!
//! # Layout
//! - [`key`]: conversation keys, from one pure function.
//! - [`router`]: key → actor, spawned on demand, evicted when idle.
//! - [`actor`]: one per conversation: attempts, the turn, the outbox.
//! - [`notice`]: what the user is told when a turn fails.
//! - [`command`]: chat commands, recognised the same way on every platform.
//! - `images`: the images saved with a message, read for the model when its turn runs.

pub mod actor;
pub mod command;
mod control;
mod images;
pub mod key;
pub mod notice;
pub mod router;

use std::sync::Arc;
use std::time::Duration;

use agent_core::agent::Agent;
use agent_core::store::{InboxItem, NewInboxItem, OutboxItem, SessionStore, StoreError};
use serde_json::json;
use tokio::sync::{broadcast, oneshot};

use crate::config::BusyMode;

pub use actor::{Job, Notice, TurnReply};
pub use router::Router;

/// A message from any platform, normalised.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// `webhook`, `api`, `telegram`, `discord`.
    pub source: String,
    /// The platform's id for the message (deduplication); `(source, id)` runs once.
    pub platform_message_id: String,
    /// See [`key::conversation_key`].
    pub conversation_key: String,
    pub text: String,
    /// Images saved with the message, for a model that sees images (the text notes them).
    pub images: Vec<ImageFile>,
    /// Where the reply goes (outbox target).
    pub target: String,
    /// Anything else the adapter wants to keep with the message (user, chat ids…).
    pub meta: serde_json::Value,
    /// Receives the answer's text as it is written (not stored; the reply still is).
    pub stream: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

/// An image a user sent, saved on disk; read when its turn runs (and again if the turn is
/// resumed after a crash), so the inbox holds only the path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageFile {
    pub path: std::path::PathBuf,
    pub media_type: String,
}

/// What [`Gateway::submit`] did with a message.
#[derive(Debug)]
pub enum Submission {
    /// Persisted and queued; the reply arrives on `reply`.
    Accepted {
        inbox_id: i64,
        reply: oneshot::Receiver<TurnReply>,
    },
    /// Seen before: nothing runs again. `reply` is the original answer once there is one.
    Duplicate {
        inbox: Box<InboxItem>,
        reply: Option<TurnReply>,
    },
}

/// Why a message was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The conversation's queue is full; try again later.
    #[error("the conversation's queue is full")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why [`Gateway::end_current_session`] did not end it.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The daemon is shutting down; the request stays in the inbox and runs on the next start.
    #[error("the daemon is shutting down; the request runs on the next start")]
    ShuttingDown,
}

/// Settings of the conversation runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// An actor with nothing to do for this long leaves memory (its state stays in the store).
    pub idle_ttl: Duration,
    /// Messages a conversation may have waiting.
    pub queue_cap: usize,
    /// What happens to messages that arrive while a turn runs, unless the conversation's
    /// settings say otherwise.
    pub busy_mode: BusyMode,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            idle_ttl: Duration::from_secs(30 * 60),
            queue_cap: 32,
            busy_mode: BusyMode::Queue,
        }
    }
}

/// The conversation runtime: inbox, router, actors.
pub struct Gateway {
    store: Arc<dyn SessionStore>,
    router: Router,
    notices: broadcast::Sender<Notice>,
    deps: Arc<actor::Deps>,
}

/// What a drain left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Turns still running when the grace period ended (resumed on the next start).
    pub unfinished_turns: usize,
}

impl Gateway {
    pub fn new(store: Arc<dyn SessionStore>, agent: Arc<Agent>, config: RuntimeConfig) -> Self {
        let (notices, _) = broadcast::channel(256);
        let deps = Arc::new(actor::Deps {
            store: store.clone(),
            agent: std::sync::RwLock::new(agent),
            idle_ttl: config.idle_ttl,
            busy_mode: std::sync::RwLock::new(config.busy_mode),
            queue_cap: config.queue_cap,
            notices: notices.clone(),
            draining: std::sync::atomic::AtomicBool::new(false),
            active: std::sync::atomic::AtomicUsize::new(0),
        });
        Self {
            store,
            router: Router::new(deps.clone(), config.queue_cap),
            notices,
            deps,
        }
    }

    /// Persists `inbound` (deduplicated) and queues it. Once this returns `Accepted` the
    /// message is durable: the platform may be acknowledged.
    pub async fn submit(&self, inbound: Inbound) -> Result<Submission, SubmitError> {
        if !self.router.has_room(&inbound.conversation_key) {
            return Err(SubmitError::Busy);
        }
        let mut payload = json!({
            "text": inbound.text,
            "target": inbound.target,
            "meta": inbound.meta,
        });
        if !inbound.images.is_empty() {
            payload["images"] = json!(inbound.images);
        }
        let accepted = self
            .store
            .inbox_accept(&NewInboxItem {
                source: inbound.source.clone(),
                platform_message_id: inbound.platform_message_id.clone(),
                conversation_key: inbound.conversation_key.clone(),
                payload,
            })
            .await?;
        if !accepted.fresh {
            let reply = self.original_reply(&accepted.item).await?;
            return Ok(Submission::Duplicate {
                inbox: Box::new(accepted.item),
                reply,
            });
        }
        crate::metrics::metrics().message_received(&inbound.source);
        let (tx, rx) = oneshot::channel();
        let inbox_id = accepted.item.id;
        self.router
            .dispatch(
                &inbound.conversation_key,
                Job {
                    inbox: accepted.item,
                    text: inbound.text,
                    target: inbound.target,
                    waiter: Some(tx),
                    stream: inbound.stream,
                },
            )
            .await;
        Ok(Submission::Accepted {
            inbox_id,
            reply: rx,
        })
    }

    /// Ends the conversation's current session the way its own `/new` does, through its
    /// actor: a resident actor moves to the new session at once and a running turn is
    /// interrupted. The request is an inbox row like any message (source and target
    /// `admin`), so it survives a restart; the reply names the new session.
    pub async fn end_current_session(&self, key: &str) -> Result<TurnReply, EndError> {
        let id = format!(
            "end-{}-{:016x}",
            chrono::Utc::now().timestamp_millis(),
            fastrand::u64(..)
        );
        let submitted = self
            .submit(Inbound {
                source: actor::ADMIN_TARGET.to_owned(),
                platform_message_id: id,
                conversation_key: key.to_owned(),
                text: "/new".to_owned(),
                images: Vec::new(),
                target: actor::ADMIN_TARGET.to_owned(),
                meta: json!({}),
                stream: None,
            })
            .await?;
        match submitted {
            Submission::Accepted { reply, .. } => reply.await.map_err(|_| EndError::ShuttingDown),
            // Not expected (the id is fresh), but a duplicate's reply is as good.
            Submission::Duplicate { reply, .. } => reply.ok_or(EndError::ShuttingDown),
        }
    }

    /// Requeues every message accepted but not answered (a crash or restart mid-turn). Each
    /// runs once more; a row that already failed its attempts is answered with a notice.
    pub async fn resume_unfinished(&self) -> Result<usize, StoreError> {
        let rows = self.store.inbox_unfinished().await?;
        let count = rows.len();
        for inbox in rows {
            let text = inbox.payload["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let target = inbox.payload["target"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            tracing::info!(conversation = %inbox.conversation_key, inbox = inbox.id, attempts = inbox.attempts, "resuming an unanswered message");
            let key = inbox.conversation_key.clone();
            self.router
                .dispatch(
                    &key,
                    Job {
                        inbox,
                        text,
                        target,
                        waiter: None,
                        stream: None,
                    },
                )
                .await;
        }
        Ok(count)
    }

    /// The first reply written for an inbox row, if any.
    pub async fn original_reply(&self, inbox: &InboxItem) -> Result<Option<TurnReply>, StoreError> {
        let rows: Vec<OutboxItem> = self.store.outbox_for_inbox(inbox.id).await?;
        Ok(rows
            .first()
            .map(|row| actor::reply_from_row(inbox.id, row.id, &row.payload)))
    }

    /// Side messages for platforms (the "queued" acknowledgement), from now on.
    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Stops starting new turns and waits up to `grace` for the running ones to finish.
    /// Queued messages stay unfinished in the inbox and run on the next start.
    pub async fn drain(&self, grace: Duration) -> Drained {
        use std::sync::atomic::Ordering;
        self.deps.draining.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + grace;
        while self.deps.active.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Drained {
            unfinished_turns: self.deps.active.load(Ordering::SeqCst),
        }
    }

    /// Sets the default busy mode: every conversation without its own follows it from its
    /// next turn on.
    pub fn set_busy_mode(&self, mode: BusyMode) {
        if let Ok(mut current) = self.deps.busy_mode.write() {
            *current = mode;
        }
    }

    /// Swaps the agent (models, tools, prompt, compression): turns that start from now on run
    /// with `agent`; running turns finish with the one they started with.
    pub fn set_agent(&self, agent: Arc<Agent>) {
        match self.deps.agent.write() {
            Ok(mut current) => *current = agent,
            Err(poisoned) => *poisoned.into_inner() = agent,
        }
    }

    /// The main model's name (what the OpenAI-compatible API reports).
    pub fn model_name(&self) -> String {
        self.deps
            .agent()
            .providers
            .first()
            .map(|p| p.model().to_owned())
            .unwrap_or_default()
    }

    /// Turns running now.
    pub fn active_turns(&self) -> usize {
        self.deps.active.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Conversations with an actor in memory.
    pub fn resident(&self) -> usize {
        self.router.resident()
    }

    /// Messages given to conversations and not answered yet (running turns included).
    pub fn pending(&self) -> usize {
        self.router.pending()
    }
}
