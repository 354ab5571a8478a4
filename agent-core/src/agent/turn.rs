//! One turn: persist the user message, then call the model and run the tools it asks for
//! until it answers, persisting every message as it is produced.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history;
use super::prompt::PromptBuilder;
use super::retry::{RetryNotice, RetryPolicy};
use crate::llm::{ChatMessage, ChatProvider, ChatRequest, LlmError};
use crate::store::{NewMessage, Role, SessionStore, StoreError};
use crate::tools::{ToolContext, ToolRegistry};

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
        }
    }
}

/// Everything a turn needs; shared by the conversations of a deployment.
pub struct Agent {
    /// The main provider first, then its fallbacks.
    pub providers: Vec<Arc<dyn ChatProvider>>,
    pub tools: ToolRegistry,
    pub store: Arc<dyn SessionStore>,
    /// Builds a session's system prompt on its first turn.
    pub prompt: PromptBuilder,
    pub config: TurnConfig,
}

/// What a turn starts from.
#[derive(Debug, Clone)]
pub struct TurnInput {
    pub conversation_id: i64,
    pub session_id: String,
    /// The session's frozen system prompt when the caller holds it (from
    /// [`Agent::session_prompt`]); `None` loads it, building and freezing it on the session's
    /// first turn.
    pub system_prompt: Option<String>,
    pub user_text: String,
}

/// What a turn reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Text(String),
    ToolStarted { name: String },
    ToolFinished { name: String, is_error: bool },
    Retry(RetryNotice),
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
    pub session_id: &'a str,
    pub system: String,
    pub deadline: Instant,
    /// Model calls made, failed ones included.
    pub api_calls: u32,
    /// The last context size and whether it is estimated.
    pub context: (u64, bool),
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

    /// Runs one turn; see the module docs.
    pub async fn run_turn(
        &self,
        input: &TurnInput,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let deadline = Instant::now() + self.config.turn_deadline;
        self.store
            .append_messages(
                &input.session_id,
                &[NewMessage::text(Role::User, &input.user_text)],
            )
            .await?;
        let system = match &input.system_prompt {
            Some(prompt) => prompt.clone(),
            None => {
                self.session_prompt(input.conversation_id, &input.session_id)
                    .await?
            }
        };
        let messages: Vec<ChatMessage> = self
            .store
            .messages(&input.session_id)
            .await?
            .iter()
            .filter_map(history::to_chat)
            .collect();
        let mut turn = Turn {
            agent: self,
            session_id: &input.session_id,
            system,
            deadline,
            api_calls: 0,
            context: (0, true),
            provider: 0,
            on_event,
            cancel,
        };
        let ctx = ToolContext {
            session_id: input.session_id.clone(),
            conversation_id: input.conversation_id,
        };
        turn.run(messages, &ctx).await
    }
}

impl Turn<'_> {
    /// The outer tool loop.
    async fn run(
        &mut self,
        mut messages: Vec<ChatMessage>,
        ctx: &ToolContext,
    ) -> Result<TurnOutcome, TurnError> {
        let max_iterations = self.agent.config.max_iterations;
        // Text the model wrote beside tool calls this turn: the answer if it then falls silent.
        let mut earlier_text: Option<String> = None;
        for iteration in 0..=max_iterations {
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
            let answered = self.call_model(&request, self.provider, "").await?;
            self.provider = answered.provider;
            let response = answered.response;
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
                    context_tokens: self.context.0,
                    context_estimated: self.context.1,
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
            self.agent
                .store
                .append_messages(
                    self.session_id,
                    &[history::assistant(
                        &response.content,
                        &calls,
                        finish,
                        tokens,
                    )],
                )
                .await?;
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: Some(response.content),
                tool_calls: calls.clone(),
                tool_call_id: None,
                thinking: response.thinking,
            });
            self.run_tools(&calls, ctx, &mut messages).await?;
        }
        // The last iteration never runs tools, so the loop always returns above.
        Err(TurnError::Model(LlmError::transport(
            "the tool loop ended without an answer",
            false,
        )))
    }

    /// A request over `messages`, with the tool schemas when `with_tools`.
    pub(super) fn request(&self, messages: Vec<ChatMessage>, with_tools: bool) -> ChatRequest {
        let config = &self.agent.config;
        ChatRequest {
            system: Some(self.system.clone()).filter(|s| !s.is_empty()),
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
        &self,
        calls: &[crate::llm::ToolCall],
        ctx: &ToolContext,
        messages: &mut Vec<ChatMessage>,
    ) -> Result<(), TurnError> {
        let agent = self.agent;
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
        agent
            .store
            .append_messages(self.session_id, &results)
            .await?;
        for (call, out) in calls.iter().zip(outputs) {
            messages.push(ChatMessage {
                tool_call_id: Some(call.id.clone()),
                ..ChatMessage::text(Role::Tool, out.content)
            });
        }
        Ok(())
    }
}
