//! One actor per conversation: it owns the conversation's state, takes its jobs one at a time
//! from a bounded mailbox (one turn at a time per conversation), and for each job records the
//! attempt, runs the command or the turn, writes the reply to the outbox and marks the inbox
//! row done. While a turn runs it keeps reading the mailbox: `/stop`, `/status`, `/new`,
//! `/reset` and `/help` act at once, other commands are told to wait, and messages follow the
//! conversation's busy mode (DESIGN.md §9). It leaves when idle; the next message restores it
//! from the store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use agent_core::agent::{Agent, ConversationState, TurnError, TurnEvent, UserInput};
use agent_core::store::{
    InboxItem, InboxState, NewConversation, NewOutboxItem, SessionSpec, SessionStore, StoreError,
};
use serde_json::json;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::command::{self, Command};
use super::router::RouterInner;
use super::{control, notice};
use crate::config::BusyMode;

/// Attempts per inbox row before it is marked failed.
pub const MAX_ATTEMPTS: i64 = 3;
/// At most one "queued" acknowledgement per conversation in this time.
pub const ACK_EVERY: Duration = Duration::from_secs(30);

/// One message for a conversation to answer.
pub struct Job {
    pub inbox: InboxItem,
    pub text: String,
    /// Where the reply goes (the outbox target).
    pub target: String,
    /// Someone waiting for the reply (a synchronous webhook call), if any.
    pub waiter: Option<oneshot::Sender<TurnReply>>,
    /// Someone streaming the answer as it is written (the API with `stream: true`), if any.
    pub stream: Option<mpsc::UnboundedSender<String>>,
}

/// A turn's reply, as written to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReply {
    pub inbox_id: i64,
    pub outbox_id: i64,
    pub session_id: String,
    pub text: String,
    /// Set when the turn failed or was cut short and `text` is the notice the user gets.
    pub error: Option<String>,
    /// Tokens the turn's model calls used (prompt, completion), when it ran.
    pub usage: Option<(u64, u64)>,
}

/// A side message for the conversation's platform that answers no particular message (the
/// "queued" acknowledgement). Adapters that can post freely subscribe to these.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub conversation_key: String,
    pub text: String,
}

/// What an actor needs.
pub(super) struct Deps {
    pub store: Arc<dyn SessionStore>,
    /// The agent new turns run with; a config reload swaps it (running turns keep theirs).
    pub agent: std::sync::RwLock<Arc<Agent>>,
    pub idle_ttl: Duration,
    /// The default busy mode (changed by a config reload; a conversation's own setting wins).
    pub busy_mode: std::sync::RwLock<BusyMode>,
    pub queue_cap: usize,
    pub notices: broadcast::Sender<Notice>,
    /// Set on shutdown: no new job starts (queued ones stay in the inbox for the next start).
    pub draining: std::sync::atomic::AtomicBool,
    /// Turns running now.
    pub active: AtomicUsize,
}

impl Deps {
    /// The agent a turn starting now runs with.
    pub fn agent(&self) -> Arc<Agent> {
        match self.agent.read() {
            Ok(agent) => agent.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The busy mode of conversations without their own.
    pub fn default_busy_mode(&self) -> BusyMode {
        self.busy_mode.read().map_or(BusyMode::Queue, |mode| *mode)
    }
}

pub(super) struct Actor {
    pub key: String,
    pub id: u64,
    pub deps: Arc<Deps>,
    pub router: Weak<RouterInner>,
    /// Jobs given to this actor and not yet answered (the router refuses more past the cap).
    pub load: Arc<AtomicUsize>,
}

/// The conversation as the actor holds it between jobs.
struct Live {
    state: ConversationState,
    /// The conversation's own busy mode (its settings); `None` follows the default, which a
    /// config reload may change while the actor lives.
    mode: Option<BusyMode>,
}

/// What arrived while a turn ran, sorted by what must happen to it.
#[derive(Default)]
struct Arrivals {
    /// The turn was cancelled by `/new`, `/reset` or a newer message (interrupt).
    interrupted: bool,
    /// Jobs folded into the running turn (steer); answered with its reply.
    riders: Vec<Job>,
    /// Jobs to answer together in one next turn (collect).
    collected: Vec<Job>,
    /// Commands to run as soon as the turn has ended.
    after: Vec<Job>,
}

/// Counts a turn as running while it lives.
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Actor {
    /// Runs until evicted (idle) or the router is gone.
    pub async fn run(self, mut mailbox: mpsc::Receiver<Job>) {
        let mut live: Option<Live> = None;
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut last_ack: Option<Instant> = None;
        loop {
            let job = match waiting.pop_front() {
                Some(job) => job,
                None => match tokio::time::timeout(self.deps.idle_ttl, mailbox.recv()).await {
                    Ok(Some(job)) => job,
                    Ok(None) => break,
                    Err(_) => {
                        match self.router.upgrade() {
                            Some(router) => router.evict_if_idle(&self.key, self.id),
                            None => break,
                        }
                        continue;
                    }
                },
            };
            if self.deps.draining.load(Ordering::SeqCst) {
                // Shutting down: the job's inbox row stays unfinished and runs on the next
                // start; whoever waits for it is told it was accepted.
                tracing::debug!(conversation = %self.key, inbox = job.inbox.id, "left for the next start (shutting down)");
                continue;
            }
            if let Err(error) = self
                .handle(&mut live, job, &mut mailbox, &mut waiting, &mut last_ack)
                .await
            {
                // The row stays unfinished and is resumed on the next start.
                tracing::error!(conversation = %self.key, %error, "store failed; message left for resumption");
                live = None;
                self.load
                    .store(waiting.len() + mailbox.len(), Ordering::SeqCst);
            }
        }
        tracing::debug!(conversation = %self.key, "actor left");
    }

    async fn handle(
        &self,
        live: &mut Option<Live>,
        job: Job,
        mailbox: &mut mpsc::Receiver<Job>,
        waiting: &mut VecDeque<Job>,
        last_ack: &mut Option<Instant>,
    ) -> Result<(), StoreError> {
        let store = &self.deps.store;
        let attempts = store.inbox_begin_attempt(job.inbox.id).await?;
        if live.is_none() {
            *live = Some(self.restore(&job).await?);
        }
        let Some(conversation) = live.as_mut() else {
            return Ok(());
        };
        if attempts > MAX_ATTEMPTS {
            tracing::warn!(conversation = %self.key, inbox = job.inbox.id, attempts, "giving up on a message");
            let session = conversation.state.session_id.clone();
            self.respond(
                job,
                &session,
                notice::GAVE_UP.to_owned(),
                Some("gave_up"),
                InboxState::Failed,
            )
            .await?;
            return Ok(());
        }
        match command::parse(&job.text, None) {
            Some(Command::Retry) => {
                match control::last_user_turn(&self.deps, &conversation.state).await? {
                    Some((ids, text)) => {
                        conversation
                            .state
                            .deactivate_messages(store.as_ref(), &ids)
                            .await?;
                        self.turn(conversation, job, text, false, mailbox, waiting, last_ack)
                            .await
                    }
                    None => {
                        let session = conversation.state.session_id.clone();
                        self.respond(
                            job,
                            &session,
                            "There is nothing to retry.".into(),
                            None,
                            InboxState::Done,
                        )
                        .await
                    }
                }
            }
            Some(command) => {
                let text = control::run(&self.deps, &mut conversation.state, command).await?;
                let session = conversation.state.session_id.clone();
                self.respond(job, &session, text, None, InboxState::Done)
                    .await
            }
            None => {
                let text = job.text.clone();
                self.turn(conversation, job, text, true, mailbox, waiting, last_ack)
                    .await
            }
        }
    }

    /// Runs a turn for `job` (its text as `text`), reading the mailbox meanwhile.
    #[allow(clippy::too_many_arguments)]
    async fn turn(
        &self,
        conversation: &mut Live,
        job: Job,
        text: String,
        with_platform_id: bool,
        mailbox: &mut mpsc::Receiver<Job>,
        waiting: &mut VecDeque<Job>,
        last_ack: &mut Option<Instant>,
    ) -> Result<(), StoreError> {
        let cancel = CancellationToken::new();
        self.deps.active.fetch_add(1, Ordering::SeqCst);
        let _running = Running(&self.deps.active);
        let steering = conversation.state.steering.clone();
        let mode = conversation
            .mode
            .unwrap_or_else(|| self.deps.default_busy_mode());
        let session_at_start = conversation.state.session_id.clone();
        // A child of the actor's `conversation` span.
        let span = tracing::info_span!(
            "turn",
            session = %session_at_start,
            source = %job.inbox.source,
        );
        let started = std::time::Instant::now();
        tracing::info!(parent: &span, inbox = job.inbox.id, chars = text.chars().count(), "message received");
        // A message as it came (not `/retry`'s replay of an earlier one) with its images.
        let input = if with_platform_id {
            UserInput {
                images: super::images::load(&job.inbox.payload).await,
                ..UserInput::platform(text.clone(), job.inbox.platform_message_id.clone())
            }
        } else {
            UserInput {
                text: text.clone(),
                ..UserInput::default()
            }
        };
        let mut arrivals = Arrivals::default();
        let result = {
            let stream = job.stream.clone();
            let on_event = move |event: TurnEvent| {
                if let (TurnEvent::Text(delta), Some(stream)) = (event, &stream) {
                    let _ = stream.send(delta);
                }
            };
            let agent = self.deps.agent();
            let running = tracing::Instrument::instrument(
                agent.run_message(&mut conversation.state, input, &on_event, &cancel),
                span.clone(),
            );
            tokio::pin!(running);
            loop {
                tokio::select! {
                    biased;
                    result = &mut running => break result,
                    next = mailbox.recv() => match next {
                        Some(next) => {
                            self.while_busy(next, mode, &session_at_start, started, &cancel, &steering, waiting, &mut arrivals, last_ack)
                                .await?;
                        }
                        // The router keeps the mailbox open while we run; if not, just finish.
                        None => break running.await,
                    },
                }
            }
        };
        let session = conversation.state.session_id.clone();
        let mut usage = None;
        let metrics = crate::metrics::metrics();
        let source = job.inbox.source.as_str();
        let (answer, error) = match result {
            Ok(outcome) => {
                metrics.turn_finished(source, "ok", outcome.compressions);
                usage = Some((outcome.usage.prompt_tokens, outcome.usage.completion_tokens));
                tracing::info!(
                    parent: &span,
                    duration_ms = started.elapsed().as_millis() as u64,
                    model_calls = outcome.api_calls,
                    tokens_in = outcome.usage.prompt_tokens,
                    tokens_out = outcome.usage.completion_tokens,
                    cost_usd = outcome.cost_usd,
                    context_tokens = outcome.context_tokens,
                    compressions = outcome.compressions,
                    "turn finished"
                );
                (outcome.text, None)
            }
            Err(TurnError::Store(e)) => {
                metrics.turn_finished(source, "error", 0);
                metrics.error("store");
                return Err(e);
            }
            Err(TurnError::Cancelled) if arrivals.interrupted => {
                metrics.turn_finished(source, "interrupted", 0);
                (
                    "Interrupted by a newer message.".to_owned(),
                    Some("interrupted".to_owned()),
                )
            }
            Err(e) => {
                let class = match &e {
                    TurnError::Model(m) => m.class.as_str().to_owned(),
                    _ => "cancelled".to_owned(),
                };
                metrics.turn_finished(source, "error", 0);
                metrics.error(&class);
                tracing::warn!(parent: &span, error = %e, "turn failed");
                (notice::turn_failed(&e), Some(class))
            }
        };
        // Steered text the turn never reached (no tool boundary came) runs as the next turn.
        let unread = steering.take();
        for rider in arrivals.riders {
            if unread.contains(&rider.text) {
                waiting.push_front(rider);
            } else {
                self.respond(
                    rider,
                    &session,
                    answer.clone(),
                    error.as_deref(),
                    InboxState::Done,
                )
                .await?;
            }
        }
        self.respond_with(
            job,
            &session,
            answer,
            error.as_deref(),
            InboxState::Done,
            usage,
        )
        .await?;
        // Collected messages become one next turn, answered on the last of them.
        if let Some(last) = arrivals.collected.pop() {
            let mut texts: Vec<String> =
                arrivals.collected.iter().map(|j| j.text.clone()).collect();
            texts.push(last.text.clone());
            for earlier in arrivals.collected {
                self.respond(
                    earlier,
                    &session,
                    "(Answered together with your next message.)".into(),
                    None,
                    InboxState::Done,
                )
                .await?;
            }
            waiting.push_front(Job {
                text: texts.join("\n\n"),
                ..last
            });
        }
        for command in arrivals.after.into_iter().rev() {
            waiting.push_front(command);
        }
        Ok(())
    }

    /// A job that arrived while a turn runs.
    #[allow(clippy::too_many_arguments)]
    async fn while_busy(
        &self,
        next: Job,
        mode: BusyMode,
        session: &str,
        started: std::time::Instant,
        cancel: &CancellationToken,
        steering: &agent_core::agent::Steering,
        waiting: &mut VecDeque<Job>,
        arrivals: &mut Arrivals,
        last_ack: &mut Option<Instant>,
    ) -> Result<(), StoreError> {
        match command::parse(&next.text, None) {
            Some(Command::Stop) => {
                cancel.cancel();
                self.respond(
                    next,
                    session,
                    "Stopping the running turn.".into(),
                    None,
                    InboxState::Done,
                )
                .await
            }
            Some(Command::Help) => {
                let help = super::command::HELP
                    .iter()
                    .map(|(usage, what)| format!("{usage} — {what}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                self.respond(next, session, help, None, InboxState::Done)
                    .await
            }
            Some(Command::Status) => {
                let text = format!(
                    "Session {session}: a turn is running ({} s so far). /stop stops it.",
                    started.elapsed().as_secs()
                );
                self.respond(next, session, text, None, InboxState::Done)
                    .await
            }
            Some(Command::New(_) | Command::Reset) => {
                cancel.cancel();
                arrivals.interrupted = true;
                arrivals.after.push(next);
                Ok(())
            }
            Some(_) => {
                let text =
                    "A turn is running; send this again when it has answered, or /stop it first.";
                self.respond(next, session, text.into(), Some("busy"), InboxState::Done)
                    .await
            }
            None => match mode {
                BusyMode::Queue => {
                    if waiting.len() >= self.deps.queue_cap {
                        return self
                            .respond(
                                next,
                                session,
                                "Too many messages are waiting; send this again shortly.".into(),
                                Some("queue_full"),
                                InboxState::Done,
                            )
                            .await;
                    }
                    if last_ack.is_none_or(|at| at.elapsed() >= ACK_EVERY) {
                        *last_ack = Some(Instant::now());
                        let _ = self.deps.notices.send(Notice {
                            conversation_key: self.key.clone(),
                            text: "Got it — I will answer once I have finished the current reply."
                                .into(),
                        });
                    }
                    waiting.push_back(next);
                    Ok(())
                }
                BusyMode::Interrupt => {
                    cancel.cancel();
                    arrivals.interrupted = true;
                    waiting.push_front(next);
                    Ok(())
                }
                BusyMode::Steer => {
                    steering.push(next.text.clone());
                    arrivals.riders.push(next);
                    Ok(())
                }
                BusyMode::Collect => {
                    arrivals.collected.push(next);
                    Ok(())
                }
            },
        }
    }

    /// Writes the reply to the outbox (a retried turn reuses its row: the first answer
    /// stands), sets the inbox row's state, and hands the reply to a waiting caller.
    async fn respond(
        &self,
        job: Job,
        session_id: &str,
        text: String,
        error: Option<&str>,
        state: InboxState,
    ) -> Result<(), StoreError> {
        self.respond_with(job, session_id, text, error, state, None)
            .await
    }

    /// [`Self::respond`] with the turn's token usage.
    async fn respond_with(
        &self,
        job: Job,
        session_id: &str,
        text: String,
        error: Option<&str>,
        state: InboxState,
        usage: Option<(u64, u64)>,
    ) -> Result<(), StoreError> {
        // One transaction: the reply, its delivery mark when the caller reads it directly, the
        // inbox row's state.
        let row = self
            .deps
            .store
            .answer_inbox(
                &NewOutboxItem {
                    inbox_id: Some(job.inbox.id),
                    target: job.target.clone(),
                    payload: json!({
                        "reply": text,
                        "session_id": session_id,
                        "error": error,
                        "usage": usage.map(|(prompt, completion)| json!({"prompt_tokens": prompt, "completion_tokens": completion})),
                        "meta": job.inbox.payload["meta"],
                    }),
                },
                is_pulled(&job.target),
                state,
            )
            .await?;
        self.load.fetch_sub(1, Ordering::SeqCst);
        if let Some(waiter) = job.waiter {
            let _ = waiter.send(reply_from_row(job.inbox.id, row.id, &row.payload));
        }
        Ok(())
    }

    /// The conversation from the store (created on its first message), at its current
    /// session, with its settings (`/model`, busy mode).
    async fn restore(&self, job: &Job) -> Result<Live, StoreError> {
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
        let mut state = ConversationState::new(conversation.id, session_id);
        state.model = conversation.settings["model"].as_str().map(str::to_owned);
        let mode = serde_json::from_value(conversation.settings["busy_mode"].clone()).ok();
        Ok(Live { state, mode })
    }
}

/// Targets whose replies are read by the caller (the webhook's HTTP answer and messages
/// endpoint, the API's response, the admin API) rather than pushed by a deliverer.
pub fn is_pulled(target: &str) -> bool {
    target.starts_with("webhook:") || target == "api" || target == ADMIN_TARGET
}

/// The target (and inbox source) of what an operator asks of a conversation through the
/// admin API.
pub const ADMIN_TARGET: &str = "admin";

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
        usage: payload["usage"]["prompt_tokens"]
            .as_u64()
            .zip(payload["usage"]["completion_tokens"].as_u64()),
    }
}
