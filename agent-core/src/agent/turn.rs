//! One turn: persist the user message, then call the model and run the tools it asks for
//! until it answers, persisting every message as it is produced.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::history;
use super::retry::{self, RetryNotice, RetryPolicy};
use crate::llm::{
    ChatMessage, ChatProvider, ChatRequest, ErrorClass, FinishReason, LlmError, StreamEvent,
};
use crate::store::{NewMessage, Role, SessionStore, SessionUsage, StoreError};
use crate::tools::{ToolContext, ToolRegistry};

/// How often an empty answer is nudged, and a truncated one continued.
const MAX_RECOVERIES: u32 = 3;
/// Sent (never stored) after an empty answer.
const EMPTY_NUDGE: &str = "Your last reply was empty. Please answer the message above.";
/// Sent (never stored) after an answer cut off by the length limit.
const CONTINUE_NOTE: &str = "Continue exactly where you stopped, without repeating anything.";
/// The answer when the model stays silent.
const NO_ANSWER: &str = "(The model returned no answer. Please try again or rephrase.)";

/// The note sent (never stored) with the last call once the tool budget is spent.
const FINAL_ANSWER_NOTE: &str = "You have used every tool call this turn allows. Answer now with what you have, without calling tools.";

/// Limits of one turn.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// Model calls with tools before one last call without them.
    pub max_iterations: u32,
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
    pub config: TurnConfig,
}

/// What a turn starts from.
#[derive(Debug, Clone)]
pub struct TurnInput {
    pub conversation_id: i64,
    pub session_id: String,
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
    /// The last call's prompt size as the provider reported it: the context size.
    pub context_tokens: Option<u64>,
}

/// Why a turn ended without an answer. Everything produced until then is stored.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("the turn was cancelled")]
    Cancelled,
    /// The model could not be reached or refused; `class` says what to tell the user.
    #[error("model call failed: {0}")]
    Model(LlmError),
    #[error("session store failed: {0}")]
    Store(#[from] StoreError),
}

impl Agent {
    /// Runs one turn; see the module docs.
    pub async fn run_turn(
        &self,
        input: &TurnInput,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let deadline = tokio::time::Instant::now() + self.config.turn_deadline;
        self.store
            .append_messages(
                &input.session_id,
                &[NewMessage::text(Role::User, &input.user_text)],
            )
            .await?;
        let mut messages: Vec<ChatMessage> = self
            .store
            .messages(&input.session_id)
            .await?
            .iter()
            .filter_map(history::to_chat)
            .collect();
        let ctx = ToolContext {
            session_id: input.session_id.clone(),
            conversation_id: input.conversation_id,
        };
        let mut api_calls = 0;
        // Text the model wrote beside tool calls this turn: the answer if it then falls silent.
        let mut earlier_text: Option<String> = None;
        for iteration in 0..=self.config.max_iterations {
            if cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
            let last = iteration == self.config.max_iterations;
            let mut request = ChatRequest {
                system: input.system_prompt.clone(),
                messages: messages.clone(),
                tools: if last {
                    Vec::new()
                } else {
                    self.tools.schemas()
                },
                max_tokens: self.config.max_tokens,
                temperature: self.config.temperature,
            };
            if last {
                request
                    .messages
                    .push(ChatMessage::text(Role::User, FINAL_ANSWER_NOTE));
            }
            let response = self
                .call_model(
                    &input.session_id,
                    &request,
                    deadline,
                    &mut api_calls,
                    on_event,
                    cancel,
                )
                .await?;
            let finish = response
                .finish_reason
                .as_ref()
                .map(|f| f.as_str().to_owned());
            let calls = if last {
                Vec::new()
            } else {
                response.tool_calls.clone()
            };
            if calls.is_empty() {
                return self
                    .finish_answer(
                        input,
                        &messages,
                        response,
                        earlier_text,
                        deadline,
                        api_calls,
                        iteration + 1,
                        on_event,
                        cancel,
                    )
                    .await;
            }
            if !response.content.trim().is_empty() {
                earlier_text = Some(response.content.clone());
            }
            let tokens = response.usage.map(|u| u.completion_tokens);
            self.store
                .append_messages(
                    &input.session_id,
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
                content: Some(response.content.clone()),
                tool_calls: calls.clone(),
                tool_call_id: None,
                thinking: response.thinking.clone(),
            });
            // Independent calls run together, each bounded by the tool timeout.
            let runs = calls.iter().map(|call| async {
                on_event(TurnEvent::ToolStarted {
                    name: call.name.clone(),
                });
                let output = self
                    .tools
                    .call(
                        &call.name,
                        &call.arguments,
                        &ctx,
                        self.config.tool_timeout,
                        cancel,
                    )
                    .await;
                on_event(TurnEvent::ToolFinished {
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
            self.store
                .append_messages(&input.session_id, &results)
                .await?;
            for (call, out) in calls.iter().zip(outputs) {
                messages.push(ChatMessage {
                    tool_call_id: Some(call.id.clone()),
                    ..ChatMessage::text(Role::Tool, out.content)
                });
            }
        }
        // The last iteration never runs tools, so the loop always returns above.
        Err(TurnError::Model(LlmError::transport(
            "the tool loop ended without an answer",
            false,
        )))
    }

    /// One model call through the retry chain, its calls and usage recorded on the session.
    async fn call_model(
        &self,
        session_id: &str,
        request: &ChatRequest,
        deadline: tokio::time::Instant,
        api_calls: &mut u32,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<crate::llm::ChatResponse, TurnError> {
        let text_events = |e: StreamEvent| {
            if let StreamEvent::TextDelta(t) = e {
                on_event(TurnEvent::Text(t));
            }
        };
        let notices = |n: RetryNotice| on_event(TurnEvent::Retry(n));
        match retry::call(
            &self.providers,
            request,
            &self.config.retry,
            deadline,
            &text_events,
            &notices,
            cancel,
        )
        .await
        {
            Ok(called) => {
                *api_calls += called.calls;
                self.record_calls(session_id, called.calls, called.response.usage)
                    .await?;
                Ok(called.response)
            }
            Err(failed) => {
                *api_calls += failed.calls;
                self.record_calls(session_id, failed.calls, None).await?;
                Err(match failed.error.class {
                    ErrorClass::Cancelled => TurnError::Cancelled,
                    _ => TurnError::Model(failed.error),
                })
            }
        }
    }

    /// Turns the model's last answer into the turn's answer: a length-truncated answer is
    /// continued (up to 3 times, joined); an empty one falls back to text the model wrote
    /// beside its tool calls, else is nudged and retried (up to 3 times), else ends with a
    /// note that says so. The nudges and partial answers are never stored; the answer is,
    /// once.
    #[allow(clippy::too_many_arguments)]
    async fn finish_answer(
        &self,
        input: &TurnInput,
        history: &[ChatMessage],
        response: crate::llm::ChatResponse,
        earlier_text: Option<String>,
        deadline: tokio::time::Instant,
        mut api_calls: u32,
        iterations: u32,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let mut text = response.content;
        let mut finish = response.finish_reason;
        let mut usage = response.usage;
        let (mut continuations, mut nudges) = (0, 0);
        loop {
            let empty = text.trim().is_empty();
            let mut messages = history.to_vec();
            if empty {
                if let Some(earlier) = &earlier_text {
                    text = earlier.clone();
                    break;
                }
                if nudges == MAX_RECOVERIES {
                    text = NO_ANSWER.to_owned();
                    break;
                }
                nudges += 1;
                messages.push(ChatMessage::text(Role::User, EMPTY_NUDGE));
            } else if finish == Some(FinishReason::Length) && continuations < MAX_RECOVERIES {
                continuations += 1;
                messages.push(ChatMessage::text(Role::Assistant, &text));
                messages.push(ChatMessage::text(Role::User, CONTINUE_NOTE));
            } else {
                break;
            }
            let request = ChatRequest {
                system: input.system_prompt.clone(),
                messages,
                tools: Vec::new(),
                max_tokens: self.config.max_tokens,
                temperature: self.config.temperature,
            };
            let next = self
                .call_model(
                    &input.session_id,
                    &request,
                    deadline,
                    &mut api_calls,
                    on_event,
                    cancel,
                )
                .await?;
            if empty {
                text = next.content;
            } else {
                text.push_str(&next.content);
            }
            finish = next.finish_reason;
            usage = next.usage.or(usage);
        }
        let finish_text = finish.as_ref().map(|f| f.as_str().to_owned());
        let answer =
            history::assistant(&text, &[], finish_text, usage.map(|u| u.completion_tokens));
        self.store
            .append_messages(&input.session_id, &[answer])
            .await?;
        Ok(TurnOutcome {
            text,
            api_calls,
            iterations,
            context_tokens: usage.map(|u| u.prompt_tokens),
        })
    }

    /// Adds calls and their usage to the session's totals.
    async fn record_calls(
        &self,
        session_id: &str,
        calls: u32,
        usage: Option<crate::llm::Usage>,
    ) -> Result<(), StoreError> {
        let u = usage.unwrap_or_default();
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.store
            .add_usage(
                session_id,
                &SessionUsage {
                    input_tokens: to_i64(u.prompt_tokens),
                    output_tokens: to_i64(u.completion_tokens),
                    cache_read_tokens: to_i64(u.cache_read_tokens),
                    cache_write_tokens: 0,
                    reasoning_tokens: to_i64(u.reasoning_tokens),
                    estimated_cost_usd: 0.0,
                    api_call_count: i64::from(calls),
                },
            )
            .await
    }
}
