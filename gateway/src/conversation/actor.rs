//! One actor per conversation: it owns the conversation's state, takes its jobs one at a time
//! from a bounded mailbox (so one turn runs at a time per conversation), and for each job
//! records the attempt, runs the turn, writes the reply to the outbox, and marks the inbox row
//! done. It leaves when it has been idle for the configured time; the next message restores
//! it from the store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use agent_core::agent::{Agent, ConversationState, TurnError};
use agent_core::store::{
    InboxItem, InboxState, NewConversation, NewOutboxItem, SessionSpec, SessionStore, StoreError,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::notice;
use super::router::RouterInner;

/// Attempts per inbox row before it is marked failed.
pub const MAX_ATTEMPTS: i64 = 3;

/// One message for a conversation to answer.
pub struct Job {
    pub inbox: InboxItem,
    pub text: String,
    /// Where the reply goes (the outbox target).
    pub target: String,
    /// Someone waiting for the reply (a synchronous webhook call), if any.
    pub waiter: Option<oneshot::Sender<TurnReply>>,
}

/// A turn's reply, as written to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReply {
    pub inbox_id: i64,
    pub outbox_id: i64,
    pub session_id: String,
    pub text: String,
    /// Set when the turn failed and `text` is the notice the user gets.
    pub error: Option<String>,
}

/// What an actor needs.
pub(super) struct Deps {
    pub store: Arc<dyn SessionStore>,
    pub agent: Arc<Agent>,
    pub idle_ttl: Duration,
}

pub(super) struct Actor {
    pub key: String,
    pub id: u64,
    pub deps: Arc<Deps>,
    pub router: Weak<RouterInner>,
}

impl Actor {
    /// Runs until evicted (idle) or the router is gone.
    pub async fn run(self, mut mailbox: mpsc::Receiver<Job>) {
        let mut state: Option<ConversationState> = None;
        loop {
            let job = match tokio::time::timeout(self.deps.idle_ttl, mailbox.recv()).await {
                Ok(Some(job)) => job,
                Ok(None) => break,
                Err(_) => {
                    match self.router.upgrade() {
                        Some(router) => router.evict_if_idle(&self.key, self.id),
                        None => break,
                    }
                    continue;
                }
            };
            if let Err(error) = self.process(&mut state, job).await {
                // The row stays unfinished and is resumed on the next start.
                tracing::error!(conversation = %self.key, %error, "store failed; message left for resumption");
                state = None;
            }
        }
        tracing::debug!(conversation = %self.key, "actor left");
    }

    async fn process(
        &self,
        state: &mut Option<ConversationState>,
        job: Job,
    ) -> Result<(), StoreError> {
        let store = &self.deps.store;
        let attempts = store.inbox_begin_attempt(job.inbox.id).await?;
        if state.is_none() {
            *state = Some(self.restore(&job).await?);
        }
        let Some(state) = state.as_mut() else {
            return Ok(());
        };
        if attempts > MAX_ATTEMPTS {
            tracing::warn!(conversation = %self.key, inbox = job.inbox.id, attempts, "giving up on a message");
            let reply = self
                .reply(
                    &job,
                    state,
                    notice::GAVE_UP.to_owned(),
                    Some("gave_up".into()),
                )
                .await?;
            store
                .inbox_set_state(job.inbox.id, InboxState::Failed)
                .await?;
            if let Some(waiter) = job.waiter {
                let _ = waiter.send(reply);
            }
            return Ok(());
        }
        let cancel = CancellationToken::new();
        let span = tracing::info_span!(
            "turn",
            conversation = %self.key,
            session = %state.session_id,
            source = %job.inbox.source,
        );
        let started = std::time::Instant::now();
        tracing::info!(parent: &span, inbox = job.inbox.id, attempt = attempts, chars = job.text.chars().count(), "message received");
        let result = tracing::Instrument::instrument(
            self.deps.agent.run_message(
                state,
                &job.text,
                Some(&job.inbox.platform_message_id),
                &|_| {},
                &cancel,
            ),
            span.clone(),
        )
        .await;
        let (text, error) = match result {
            Ok(outcome) => {
                tracing::info!(
                    parent: &span,
                    duration_ms = started.elapsed().as_millis() as u64,
                    model_calls = outcome.api_calls,
                    context_tokens = outcome.context_tokens,
                    compressions = outcome.compressions,
                    "turn finished"
                );
                (outcome.text, None)
            }
            Err(TurnError::Store(e)) => return Err(e),
            Err(e) => {
                let class = match &e {
                    TurnError::Model(m) => m.class.as_str().to_owned(),
                    _ => "cancelled".to_owned(),
                };
                tracing::warn!(conversation = %self.key, error = %e, "turn failed");
                (notice::turn_failed(&e), Some(class))
            }
        };
        let reply = self.reply(&job, state, text, error).await?;
        store
            .inbox_set_state(job.inbox.id, InboxState::Done)
            .await?;
        if let Some(waiter) = job.waiter {
            let _ = waiter.send(reply);
        }
        Ok(())
    }

    /// Writes the reply to the outbox (a retried turn reuses its row: the first answer stands).
    async fn reply(
        &self,
        job: &Job,
        state: &ConversationState,
        text: String,
        error: Option<String>,
    ) -> Result<TurnReply, StoreError> {
        let row = self
            .deps
            .store
            .outbox_enqueue(&NewOutboxItem {
                inbox_id: Some(job.inbox.id),
                target: job.target.clone(),
                payload: json!({
                    "reply": text,
                    "session_id": state.session_id,
                    "error": error,
                    "meta": job.inbox.payload["meta"],
                }),
            })
            .await?;
        Ok(reply_from_row(job.inbox.id, row.id, &row.payload))
    }

    /// The conversation from the store (created on its first message), at its current session.
    async fn restore(&self, job: &Job) -> Result<ConversationState, StoreError> {
        let store = &self.deps.store;
        let conversation = store
            .conversation(&NewConversation::new(&self.key, &job.inbox.source))
            .await?;
        let session_id = match conversation.current_session_id {
            Some(id) => id,
            None => {
                store
                    .start_session(conversation.id, &SessionSpec::default())
                    .await?
                    .id
            }
        };
        Ok(ConversationState::new(conversation.id, session_id))
    }
}

/// A reply from a stored outbox payload.
pub fn reply_from_row(inbox_id: i64, outbox_id: i64, payload: &serde_json::Value) -> TurnReply {
    TurnReply {
        inbox_id,
        outbox_id,
        session_id: payload["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        text: payload["reply"].as_str().unwrap_or_default().to_owned(),
        error: payload["error"].as_str().map(str::to_owned),
    }
}
