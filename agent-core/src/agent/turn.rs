//! One turn: persist the user message, then call the model and run the tools it asks for
//! until it answers, persisting every message as it is produced.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::compaction::CompressionReport;
use super::history;
use super::prompt::PromptBuilder;
use super::retry::{RetryNotice, RetryPolicy};
use crate::compress::Compressor;
use crate::llm::{ChatMessage, ChatProvider, ChatRequest, FinishReason, LlmError};
use crate::store::{NewMessage, Role, SessionStore, StoreError};
use crate::tools::todo::Todo;
use crate::tools::{ToolContext, ToolRegistry};

/// Context-overflow errors recovered (compress, retry) per turn.
const MAX_OVERFLOW_RECOVERIES: u32 = 3;

/// The note sent (never stored) with the last call once the tool budget is spent.
const FINAL_ANSWER_NOTE: &str = "You have used every tool call this turn allows. Answer now with what you have, without calling tools.";

/// Limits of one turn.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// Model calls with tools before one last call without them.
    pub max_iterations: u32,
    /// Asked of the model per call (each provider lowers it to its own limit).
    pub max_tokens: u32,
    /// Sampling temperature; `None` leaves the provider's default.
    pub temperature: Option<f32>,
    /// Per tool call.
    pub tool_timeout: Duration,
    /// Bounds the whole turn, retries included.
    pub turn_deadline: Duration,
    pub retry: RetryPolicy,
    /// Before compressing, give the model one call with only the `memory` tool to save what
    /// it wants to keep (when that tool is registered).
    pub memory_flush: bool,
}

impl Default for TurnConfig {
    fn default() -> Self {
        Self {
            max_iterations: 90,
            max_tokens: 4096,
            temperature: None,
            tool_timeout: Duration::from_secs(120),
            turn_deadline: Duration::from_secs(900),
            retry: RetryPolicy::default(),
            memory_flush: true,
        }
    }
}

/// Everything a turn needs; shared by the conversations of a deployment.
pub struct Agent {
    /// The main provider first, then its fallbacks.
    pub providers: Vec<Arc<dyn ChatProvider>>,
    pub tools: ToolRegistry,
    pub store: Arc<dyn SessionStore>,
    /// Builds a session's system prompt on its first turn (and after compression).
    pub prompt: PromptBuilder,
    /// Context compression; `None` turns it off entirely (overflow errors then end the turn).
    pub compressor: Option<Arc<Compressor>>,
    /// The todo list, carried to the new session and shown in the summary on compression.
    pub todo: Option<Arc<Todo>>,
    pub config: TurnConfig,
}

/// What a user sent, for [`Agent::run_message`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInput {
    /// The text as stored, notes of any attachments included.
    pub text: String,
    /// The platform's id of the message, to recognise a turn resumed after a crash.
    pub platform_message_id: Option<String>,
    /// Images for the model to see this turn; not stored (the text notes them).
    pub images: Vec<crate::llm::ImagePart>,
}

impl UserInput {
    /// A platform message's text, without images.
    pub fn platform(text: impl Into<String>, platform_message_id: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            platform_message_id: Some(platform_message_id.into()),
            images: Vec::new(),
        }
    }
}

/// Where a conversation stands between turns. Its actor keeps it; a turn updates it (a
/// compression moves the conversation to a new session).
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationState {
    pub conversation_id: i64,
    pub session_id: String,
    /// The session's frozen system prompt once known; `None` loads it (building and freezing
    /// it on the session's first turn).
    pub system_prompt: Option<String>,
    pub context: ContextState,
    /// `/model`: this conversation's main model instead of the configured one (same provider
    /// and key; the fallbacks stay).
    pub model: Option<String>,
    /// Messages to fold into the running turn at its next tool boundary (busy mode `steer`).
    pub steering: Steering,
    /// The session's history as the model sees it, kept between turns (see [`CachedHistory`]).
    history: Option<CachedHistory>,
}

/// A session's stored history as the model sees it, kept by the conversation's state so a turn
/// does not read the whole session back from the store (at a hundred turns a session that read
/// was most of a turn's cost). It is exactly what [`chat_history`] of a fresh read gives: it is
/// filled by one read and then extended by the same conversion of every message the loop
/// stores. It belongs to one session: a state on another session reads afresh, and messages
/// are deactivated through [`ConversationState::deactivate_messages`], which drops it.
#[derive(Debug, Clone, PartialEq)]
struct CachedHistory {
    session_id: String,
    /// Stored non-system messages, converted ([`history::body_to_chat`]), before tool-pair repair.
    messages: Vec<ChatMessage>,
    /// `platform_message_id`s of the stored user messages (to recognise a resumed turn).
    platform_ids: Vec<String>,
}

impl CachedHistory {
    fn new(session_id: &str, stored: &[crate::store::Message]) -> Self {
        let mut cached = Self {
            session_id: session_id.to_owned(),
            messages: Vec::with_capacity(stored.len()),
            platform_ids: Vec::new(),
        };
        for message in stored {
            cached.push(&message.body);
        }
        cached
    }

    fn push(&mut self, body: &NewMessage) {
        if let Some(chat) = history::body_to_chat(body) {
            self.messages.push(chat);
        }
        if body.role == Role::User
            && let Some(id) = &body.platform_message_id
        {
            self.platform_ids.push(id.clone());
        }
    }
}

/// Text for the running turn, pushed from outside while it runs (busy mode `steer`) and taken
/// by the loop after each round of tools.
#[derive(Clone, Default)]
pub struct Steering(Arc<std::sync::Mutex<Vec<String>>>);

impl Steering {
    pub fn push(&self, text: impl Into<String>) {
        if let Ok(mut queue) = self.0.lock() {
            queue.push(text.into());
        }
    }

    /// Takes everything pushed so far.
    pub fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = self.0.lock().map(|q| q.len()).unwrap_or(0);
        f.debug_struct("Steering")
            .field("waiting", &waiting)
            .finish()
    }
}

impl PartialEq for Steering {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ConversationState {
    pub fn new(conversation_id: i64, session_id: impl Into<String>) -> Self {
        Self {
            conversation_id,
            session_id: session_id.into(),
            system_prompt: None,
            context: ContextState::default(),
            model: None,
            steering: Steering::default(),
            history: None,
        }
    }

    /// Drops the kept history: the next turn reads the session from the store. Call it after
    /// changing the session's stored messages outside the loop.
    pub fn forget_history(&mut self) {
        self.history = None;
    }

    /// Deactivates messages of the current session (`/undo`, `/retry`) and drops the kept
    /// history with them, so the next turn cannot send what was taken back.
    pub async fn deactivate_messages(
        &mut self,
        store: &dyn crate::store::SessionStore,
        ids: &[i64],
    ) -> Result<u64, StoreError> {
        let changed = store.deactivate_messages(&self.session_id, ids).await?;
        self.forget_history();
        Ok(changed)
    }

    /// The kept history of the current session, if any (what the next turn sends before tool-pair
    /// repair). For tests that check it against the store.
    pub fn kept_history(&self) -> Option<&[ChatMessage]> {
        self.history
            .as_ref()
            .filter(|h| h.session_id == self.session_id)
            .map(|h| h.messages.as_slice())
    }

    /// The current session's history, read from the store unless it is kept.
    async fn history(
        &mut self,
        store: &dyn crate::store::SessionStore,
    ) -> Result<&CachedHistory, StoreError> {
        let kept = self
            .history
            .as_ref()
            .is_some_and(|h| h.session_id == self.session_id);
        if !kept {
            let stored = store.messages(&self.session_id).await?;
            self.history = Some(CachedHistory::new(&self.session_id, &stored));
        }
        self.history
            .as_ref()
            .ok_or_else(|| StoreError::Invalid("history was not kept".into()))
    }

    /// Stores `messages` in the current session and keeps them in the history.
    pub(super) async fn append(
        &mut self,
        store: &dyn crate::store::SessionStore,
        messages: &[NewMessage],
    ) -> Result<Vec<i64>, StoreError> {
        let ids = store.append_messages(&self.session_id, messages).await?;
        if let Some(kept) = self
            .history
            .as_mut()
            .filter(|h| h.session_id == self.session_id)
        {
            for message in messages {
                kept.push(message);
            }
        }
        Ok(ids)
    }
}

/// What the loop knows about the size of a conversation's context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextState {
    /// The window, lowered when an overflow error named a smaller real limit; `None` uses the
    /// answering provider's configured context length.
    pub context_length: Option<u64>,
    /// The last known size: the last response's `prompt_tokens`, or an estimate.
    pub tokens: u64,
    /// Whether `tokens` is an estimate (after a compression, until real usage arrives).
    pub estimated: bool,
    /// Consecutive automatic compressions that saved less than 10 %.
    pub ineffective: u32,
}

impl ContextState {
    /// Automatic compression is paused after two ineffective ones in a row, until `/compress`
    /// or `/new`.
    pub fn auto_paused(&self) -> bool {
        self.ineffective >= 2
    }
}

/// What a turn reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Text(String),
    ToolStarted {
        name: String,
    },
    ToolFinished {
        name: String,
        is_error: bool,
    },
    Retry(RetryNotice),
    /// The context was compressed and the conversation moved to a new session.
    Compressed(CompressionReport),
    /// Something the user should know (repeated compression, compression paused).
    Warning(String),
}

/// A finished turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub text: String,
    /// Model calls made, failed ones included.
    pub api_calls: u32,
    /// Tool-loop iterations used.
    pub iterations: u32,
    /// The context size: the last call's `prompt_tokens` as the provider reported it, or the
    /// rough estimate of the last request when it reported none.
    pub context_tokens: u64,
    /// Whether `context_tokens` is the estimate.
    pub context_estimated: bool,
    /// Compressions during this turn.
    pub compressions: u32,
    /// Tokens of every call this turn made, summed (what it cost, not the context size).
    pub usage: crate::llm::Usage,
    /// The estimated cost of those calls, US dollars (each at its provider's prices).
    pub cost_usd: f64,
}

/// Why a turn ended without an answer. Everything produced until then is stored.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// Cancelled (`/stop`, interrupt); text streamed so far is stored, marked `interrupted`.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The model could not be reached or refused; `class` says what to tell the user.
    #[error("model call failed: {0}")]
    Model(LlmError),
    #[error("session store failed: {0}")]
    Store(#[from] StoreError),
}

/// The state of one running turn.
pub(super) struct Turn<'a> {
    pub agent: &'a Agent,
    /// The main provider (with the conversation's `/model` override) and the fallbacks.
    pub providers: Vec<Arc<dyn ChatProvider>>,
    pub state: &'a mut ConversationState,
    pub deadline: Instant,
    /// Model calls made, failed ones included.
    pub api_calls: u32,
    /// Compressions made.
    pub compressions: u32,
    /// Every call's usage, summed.
    pub usage: crate::llm::Usage,
    /// Their estimated cost, summed.
    pub cost_usd: f64,
    /// The provider the turn's calls start from: the one that last answered, so a main model
    /// that failed over (bad key, gone) is not asked again on every iteration.
    pub provider: usize,
    pub on_event: &'a (dyn Fn(TurnEvent) + Send + Sync),
    pub cancel: &'a CancellationToken,
}

impl Agent {
    /// The session's system prompt: the frozen one, or (first turn) one built now and frozen.
    pub async fn session_prompt(
        &self,
        conversation_id: i64,
        session_id: &str,
    ) -> Result<String, StoreError> {
        let session =
            self.store
                .session(session_id)
                .await?
                .ok_or_else(|| StoreError::NotFound {
                    what: "session",
                    id: session_id.to_owned(),
                })?;
        if let Some(prompt) = session.system_prompt {
            return Ok(prompt);
        }
        let built = self.prompt.build(conversation_id).await;
        self.store.freeze_system_prompt(session_id, &built).await
    }

    /// Runs one turn for `user_text`; see the module docs. `state` is updated as it goes.
    pub async fn run_turn(
        &self,
        state: &mut ConversationState,
        user_text: &str,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let input = UserInput {
            text: user_text.to_owned(),
            ..UserInput::default()
        };
        self.run_message(state, input, on_event, cancel).await
    }

    /// Runs one turn for a platform message. When the session already holds a user message
    /// with its `platform_message_id` (a turn resumed after a crash), it is not stored again:
    /// the turn goes on from what the interrupted attempt left, its images put back on it.
    pub async fn run_message(
        &self,
        state: &mut ConversationState,
        input: UserInput,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        // The history before the new message is stored (one actor writes to a session, so
        // nothing can come between); kept in the state between turns.
        let history = state.history(self.store.as_ref()).await?;
        let platform_id = input.platform_message_id.as_deref();
        let resumed = platform_id.is_some_and(|id| history.platform_ids.iter().any(|p| p == id));
        let mut messages = repair(history.messages.clone());
        if resumed {
            tracing::info!(session = %state.session_id, "resuming a turn an earlier attempt started");
            if let Some(user) = messages.iter_mut().rev().find(|m| m.role == Role::User) {
                user.images = input.images;
            }
        } else {
            let mut message = NewMessage::text(Role::User, &input.text);
            message.platform_message_id = input.platform_message_id;
            state.append(self.store.as_ref(), &[message]).await?;
            messages.push(ChatMessage {
                images: input.images,
                ..ChatMessage::text(Role::User, input.text)
            });
        }
        let mut turn = self.begin(state, on_event, cancel).await?;
        turn.run(messages).await
    }

    /// A turn over `state`, its system prompt loaded.
    pub(super) async fn begin<'a>(
        &'a self,
        state: &'a mut ConversationState,
        on_event: &'a (dyn Fn(TurnEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> Result<Turn<'a>, TurnError> {
        if state.system_prompt.is_none() {
            state.system_prompt = Some(
                self.session_prompt(state.conversation_id, &state.session_id)
                    .await?,
            );
        }
        let mut providers = self.providers.clone();
        if let (Some(model), Some(main)) = (&state.model, providers.first())
            && let Some(chosen) = main.with_model(model)
        {
            providers[0] = chosen;
        }
        Ok(Turn {
            agent: self,
            providers,
            state,
            deadline: Instant::now() + self.config.turn_deadline,
            api_calls: 0,
            compressions: 0,
            usage: crate::llm::Usage::default(),
            cost_usd: 0.0,
            provider: 0,
            on_event,
            cancel,
        })
    }
}

/// Stored messages as the model sees them: a call whose results never got stored (a crash
/// mid-tools) is answered with a stub, so every provider accepts the history.
fn repair(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    crate::compress::assemble::sanitize_tool_pairs(messages)
}

impl Turn<'_> {
    /// The current session's messages as the model sees them (see [`repair`]).
    pub(super) async fn load_messages(&mut self) -> Result<Vec<ChatMessage>, TurnError> {
        let history = self.state.history(self.agent.store.as_ref()).await?;
        Ok(repair(history.messages.clone()))
    }

    /// Stores messages in the current session (and the kept history).
    pub(super) async fn store_messages(
        &mut self,
        messages: &[NewMessage],
    ) -> Result<Vec<i64>, StoreError> {
        self.state.append(self.agent.store.as_ref(), messages).await
    }

    fn tool_context(&self) -> ToolContext {
        ToolContext {
            session_id: self.state.session_id.clone(),
            conversation_id: self.state.conversation_id,
        }
    }

    /// The outer tool loop, with preflight compression before it, compression when the real
    /// context passes the threshold, and compress-and-retry on context overflow.
    async fn run(&mut self, mut messages: Vec<ChatMessage>) -> Result<TurnOutcome, TurnError> {
        self.preflight(&mut messages).await?;
        let max_iterations = self.agent.config.max_iterations;
        // Text the model wrote beside tool calls this turn: the answer if it then falls silent.
        let mut earlier_text: Option<String> = None;
        let mut overflows = 0;
        let mut iteration = 0;
        while iteration <= max_iterations {
            if self.cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
            let last = iteration == max_iterations;
            let mut request = self.request(messages.clone(), !last);
            if last {
                request
                    .messages
                    .push(ChatMessage::text(Role::User, FINAL_ANSWER_NOTE));
            }
            let answered = match self.call_model(&request, self.provider, "").await {
                Ok(answered) => answered,
                Err(TurnError::Model(error)) if error.class.needs_compression() => {
                    overflows += 1;
                    if overflows > MAX_OVERFLOW_RECOVERIES
                        || !self.recover_overflow(&error, &mut messages).await?
                    {
                        return Err(TurnError::Model(error));
                    }
                    continue;
                }
                Err(other) => return Err(other),
            };
            self.provider = answered.provider;
            let response = answered.response;
            if response.finish_reason == Some(FinishReason::ContentFilter) {
                // Moderation: no retry, no nudge; what came before the filter is kept.
                self.store_cut_text(&response.content, FinishReason::ContentFilter.as_str())
                    .await?;
                return Err(TurnError::Model(LlmError::content_filtered()));
            }
            let calls = if last {
                Vec::new()
            } else {
                response.tool_calls.clone()
            };
            if calls.is_empty() {
                let text = self
                    .finish_answer(&messages, response, answered.provider, earlier_text)
                    .await?;
                return Ok(TurnOutcome {
                    text,
                    api_calls: self.api_calls,
                    iterations: iteration + 1,
                    context_tokens: self.state.context.tokens,
                    context_estimated: self.state.context.estimated,
                    compressions: self.compressions,
                    usage: self.usage,
                    cost_usd: self.cost_usd,
                });
            }
            if !response.content.trim().is_empty() {
                earlier_text = Some(response.content.clone());
            }
            let finish = response
                .finish_reason
                .as_ref()
                .map(|f| f.as_str().to_owned());
            let tokens = response.usage.map(|u| u.completion_tokens);
            self.store_messages(&[history::assistant(
                &response.content,
                &calls,
                finish,
                tokens,
            )])
            .await?;
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: Some(response.content),
                tool_calls: calls.clone(),
                tool_call_id: None,
                thinking: response.thinking,
                images: Vec::new(),
            });
            self.run_tools(&calls, &mut messages).await?;
            self.take_steering(&mut messages).await?;
            self.after_response(&mut messages).await?;
            iteration += 1;
        }
        // The last iteration never runs tools, so the loop always returns above.
        Err(TurnError::Model(LlmError::transport(
            "the tool loop ended without an answer",
            false,
        )))
    }

    /// Folds messages that arrived while the turn ran (busy mode `steer`) into it, stored as
    /// user messages, before the next model call.
    async fn take_steering(&mut self, messages: &mut Vec<ChatMessage>) -> Result<(), TurnError> {
        let steered = self.state.steering.take();
        if steered.is_empty() {
            return Ok(());
        }
        let stored: Vec<NewMessage> = steered
            .iter()
            .map(|text| NewMessage::text(Role::User, text))
            .collect();
        self.store_messages(&stored).await?;
        messages.extend(
            steered
                .into_iter()
                .map(|t| ChatMessage::text(Role::User, t)),
        );
        Ok(())
    }

    /// A request over `messages`, with the tool schemas when `with_tools`.
    pub(super) fn request(&self, messages: Vec<ChatMessage>, with_tools: bool) -> ChatRequest {
        let config = &self.agent.config;
        ChatRequest {
            system: self.state.system_prompt.clone().filter(|s| !s.is_empty()),
            messages,
            tools: if with_tools {
                self.agent.tools.schemas()
            } else {
                Vec::new()
            },
            max_tokens: config.max_tokens,
            temperature: config.temperature,
        }
    }

    /// Runs independent calls together, each bounded by the tool timeout, and stores their
    /// results (a cancelled tool's result says so).
    async fn run_tools(
        &mut self,
        calls: &[crate::llm::ToolCall],
        messages: &mut Vec<ChatMessage>,
    ) -> Result<(), TurnError> {
        let agent = self.agent;
        let ctx = &self.tool_context();
        let runs = calls.iter().map(|call| async {
            (self.on_event)(TurnEvent::ToolStarted {
                name: call.name.clone(),
            });
            let output = agent
                .tools
                .call(
                    &call.name,
                    &call.arguments,
                    ctx,
                    agent.config.tool_timeout,
                    self.cancel,
                )
                .await;
            (self.on_event)(TurnEvent::ToolFinished {
                name: call.name.clone(),
                is_error: output.is_error,
            });
            output
        });
        let outputs = futures_util::future::join_all(runs).await;
        let results: Vec<NewMessage> = calls
            .iter()
            .zip(&outputs)
            .map(|(call, out)| history::tool_result(call, &out.content))
            .collect();
        self.store_messages(&results).await?;
        for (call, out) in calls.iter().zip(outputs) {
            messages.push(ChatMessage {
                tool_call_id: Some(call.id.clone()),
                ..ChatMessage::text(Role::Tool, out.content)
            });
        }
        Ok(())
    }
}
