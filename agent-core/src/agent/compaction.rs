//! Compression inside the loop (DESIGN.md §6): the three triggers — preflight (the rough
//! estimate of the whole request, up to 3 passes), after a response (its real prompt tokens),
//! and a context-overflow error (lower the window to the real limit, compress, retry; at most
//! 3 times a turn) — plus `/compress`, and what happens around the algorithm:
//!
//! 1. the session's lease is taken (no two processes compress one session);
//! 2. the model may save what it wants to keep with the `memory` tool (one call, never stored);
//! 3. the messages are compressed ([`crate::compress`]), the todo list added to the summary;
//! 4. the system prompt is rebuilt (re-reading MEMORY.md / USER.md);
//! 5. the session is rotated atomically: the old one ends `compression`, the new one links to
//!    it as its parent, takes the next numbered title, and starts with the compressed messages;
//! 6. the todo list moves to the new session; the size estimate stands until real usage comes;
//! 7. the user is warned from the second compression of a lineage on, and when two automatic
//!    compressions in a row saved less than 10 % (automatic compression then pauses until
//!    `/compress` or `/new`).

use std::sync::OnceLock;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::estimate;
use super::history;
use super::retry;
use super::turn::{Agent, ConversationState, Turn, TurnError, TurnEvent};
use crate::llm::{ChatMessage, ChatRequest, LlmError};
use crate::store::{EndReason, Role, Rotation, SessionSpec};
use crate::tools::todo::Todo;

/// Preflight passes at most.
const PREFLIGHT_PASSES: usize = 3;
/// A compression saving less than this share counts as ineffective.
const INEFFECTIVE_SAVING: f64 = 0.10;
/// How long a compression may hold the session's lease.
const LOCK_TTL: Duration = Duration::from_secs(600);
/// Sent (never stored) with the memory tool before compressing.
const MEMORY_FLUSH_NOTE: &str = "The earlier part of this conversation is about to be compressed into a summary. If anything in it is worth remembering beyond this conversation (facts about the user, preferences, decisions), save it now with the memory tool. Otherwise reply \"nothing to save\".";

/// What started a compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Before the first model call of a turn (rough estimate).
    Preflight,
    /// After a response whose prompt passed the threshold.
    Threshold,
    /// The provider said the request does not fit.
    Overflow,
    /// `/compress`.
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preflight => "preflight",
            Self::Threshold => "threshold",
            Self::Overflow => "overflow",
            Self::Manual => "manual",
        }
    }

    fn automatic(self) -> bool {
        matches!(self, Self::Preflight | Self::Threshold)
    }
}

/// One compression, for the log, the metrics and the user.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressionReport {
    pub trigger: Trigger,
    pub from_session: String,
    pub to_session: String,
    /// Estimated tokens of the messages before and after.
    pub before_tokens: u64,
    pub after_tokens: u64,
    /// Messages replaced by the summary.
    pub summarised: usize,
    /// The summary is the fallback digest (no model could summarise).
    pub fallback: bool,
    /// Compressions along the lineage, this one included.
    pub lineage_compressions: i64,
}

/// Who holds a session lease: this process.
fn holder() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(|| format!("{}-{:08x}", std::process::id(), fastrand::u32(..)))
}

impl Agent {
    /// `/compress [focus]`: compresses now, whatever the threshold, and resumes automatic
    /// compression if it was paused. `None` when there is nothing to compress.
    pub async fn compress_now(
        &self,
        state: &mut ConversationState,
        focus: Option<&str>,
        on_event: &(dyn Fn(TurnEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Option<CompressionReport>, TurnError> {
        let mut turn = self.begin(state, on_event, cancel).await?;
        let mut messages = turn.load_messages().await?;
        let report = turn.compact(&mut messages, Trigger::Manual, focus).await?;
        turn.state.context.ineffective = 0;
        Ok(report)
    }
}

impl Turn<'_> {
    /// The window in force: lowered by an overflow, else the answering provider's.
    pub(super) fn context_length(&self) -> u64 {
        self.state.context.context_length.unwrap_or_else(|| {
            self.providers
                .get(self.provider)
                .or(self.providers.first())
                .map_or(128_000, |p| p.spec().context_length)
        })
    }

    /// The rough size of a request over `messages` with the tool schemas, without building it.
    fn estimate(&self, messages: &[ChatMessage]) -> u64 {
        let system = self
            .state
            .system_prompt
            .as_deref()
            .filter(|s| !s.is_empty());
        estimate::parts(system, messages, &self.agent.tools.schemas())
    }

    /// The threshold for automatic compression, or `None` when it is off or paused.
    fn auto_threshold(&self) -> Option<u64> {
        let compressor = self.agent.compressor.as_ref()?;
        if !compressor.settings.enabled || self.state.context.auto_paused() {
            return None;
        }
        Some(compressor.settings.threshold(self.context_length()))
    }

    /// Preflight: the rough size of the whole request (system prompt and tool schemas
    /// included) against the threshold; up to 3 passes, stopping when under it or when a pass
    /// removes nothing.
    pub(super) async fn preflight(
        &mut self,
        messages: &mut Vec<ChatMessage>,
    ) -> Result<(), TurnError> {
        let Some(threshold) = self.auto_threshold() else {
            return Ok(());
        };
        for _ in 0..PREFLIGHT_PASSES {
            let size = self.estimate(messages);
            if size <= threshold {
                break;
            }
            if self
                .compact(messages, Trigger::Preflight, None)
                .await?
                .is_none()
            {
                break;
            }
        }
        Ok(())
    }

    /// After a response: compress once when its real prompt passed the threshold.
    pub(super) async fn after_response(
        &mut self,
        messages: &mut Vec<ChatMessage>,
    ) -> Result<(), TurnError> {
        let Some(threshold) = self.auto_threshold() else {
            return Ok(());
        };
        let context = self.state.context;
        if !context.estimated && context.tokens > threshold {
            self.compact(messages, Trigger::Threshold, None).await?;
        }
        Ok(())
    }

    /// A context overflow: lower the window to the real limit (or by a quarter when the error
    /// names none; a 413 leaves it), compress, and say whether to retry.
    pub(super) async fn recover_overflow(
        &mut self,
        error: &LlmError,
        messages: &mut Vec<ChatMessage>,
    ) -> Result<bool, TurnError> {
        if self.agent.compressor.is_none() {
            return Ok(false);
        }
        let current = self.context_length();
        let lowered = match error.context_limit {
            Some(limit) => limit.min(current),
            None if error.class == crate::llm::ErrorClass::ContextOverflow => current / 4 * 3,
            None => current,
        };
        self.state.context.context_length = Some(lowered);
        tracing::warn!(
            class = error.class.as_str(),
            limit = ?error.context_limit,
            context_length = lowered,
            "request too large; compressing and retrying"
        );
        Ok(self
            .compact(messages, Trigger::Overflow, None)
            .await?
            .is_some())
    }

    /// One compression with everything around it (module docs). `None`: nothing was
    /// compressed (nothing to summarise, no saving, or another process holds the session).
    pub(super) async fn compact(
        &mut self,
        messages: &mut Vec<ChatMessage>,
        trigger: Trigger,
        focus: Option<&str>,
    ) -> Result<Option<super::CompressionReport>, TurnError> {
        let Some(compressor) = self.agent.compressor.clone() else {
            return Ok(None);
        };
        let store = self.agent.store.clone();
        let from = self.state.session_id.clone();
        if !store.try_lock_session(&from, holder(), LOCK_TTL).await? {
            tracing::info!(session = %from, "another process is compressing this session");
            return Ok(None);
        }
        let result = self
            .compact_locked(messages, trigger, focus, &compressor)
            .await;
        if let Err(error) = store.unlock_session(&from, holder()).await {
            tracing::warn!(session = %from, %error, "could not release the compression lease");
        }
        result
    }

    async fn compact_locked(
        &mut self,
        messages: &mut Vec<ChatMessage>,
        trigger: Trigger,
        focus: Option<&str>,
        compressor: &crate::compress::Compressor,
    ) -> Result<Option<super::CompressionReport>, TurnError> {
        if self.agent.config.memory_flush {
            self.flush_memory(messages).await?;
        }
        let from = self.state.session_id.clone();
        let todo_note = self.agent.todo.as_ref().and_then(|todo| {
            let items = todo.items(&from);
            (!items.is_empty())
                .then(|| format!("## Your todo list (still active)\n{}", Todo::render(&items)))
        });
        let compacted = match compressor
            .compress(
                messages,
                self.context_length(),
                !trigger.automatic(),
                focus,
                todo_note.as_deref(),
                self.cancel,
            )
            .await
        {
            Ok(Some(compacted)) => compacted,
            Ok(None) => return Ok(None),
            Err(_) => return Err(TurnError::Cancelled),
        };
        let prompt = self.agent.prompt.build(self.state.conversation_id).await;
        let model = self
            .providers
            .get(self.provider)
            .map(|p| p.model().to_owned());
        let session = self
            .agent
            .store
            .rotate(&Rotation {
                conversation_id: self.state.conversation_id,
                from_session_id: from.clone(),
                end_reason: EndReason::Compression,
                link_parent: true,
                spec: SessionSpec {
                    title: None,
                    model,
                    system_prompt: Some(prompt.clone()),
                },
                messages: history::to_new(&compacted.messages),
            })
            .await?;
        if let Some(todo) = &self.agent.todo {
            todo.carry(&from, &session.id);
        }
        *messages = compacted.messages.clone();
        self.state.session_id = session.id.clone();
        self.state.system_prompt = Some(prompt);
        self.state.context.tokens = self.estimate(messages);
        self.state.context.estimated = true;
        self.compressions += 1;
        let saved = compacted.saved();
        tracing::info!(
            trigger = trigger.as_str(),
            from = %from,
            to = %session.id,
            before = compacted.before_tokens,
            after = compacted.after_tokens,
            saved_percent = (saved * 100.0).round(),
            fallback = compacted.fallback_reason.is_some(),
            "context compressed"
        );
        let report = super::CompressionReport {
            trigger,
            from_session: from,
            to_session: session.id,
            before_tokens: compacted.before_tokens,
            after_tokens: compacted.after_tokens,
            summarised: compacted.summarised,
            fallback: compacted.fallback_reason.is_some(),
            lineage_compressions: session.compression_count,
        };
        (self.on_event)(TurnEvent::Compressed(report.clone()));
        if report.lineage_compressions >= 2 {
            (self.on_event)(TurnEvent::Warning(format!(
                "This conversation has been compressed {} times; details from early on may be \
                 lost. /new starts a fresh session.",
                report.lineage_compressions
            )));
        }
        if trigger.automatic() {
            if saved < INEFFECTIVE_SAVING {
                self.state.context.ineffective += 1;
                if self.state.context.auto_paused() {
                    tracing::warn!(
                        "automatic compression paused: the last two saved under 10 % each"
                    );
                    (self.on_event)(TurnEvent::Warning(
                        "Automatic compression is paused: the last two compressions saved less \
                         than 10 % each. Use /compress to compress anyway, or /new to start fresh."
                            .into(),
                    ));
                }
            } else {
                self.state.context.ineffective = 0;
            }
        }
        Ok(Some(report))
    }

    /// One call offering only the `memory` tool, so the model can save what the summary might
    /// lose; its calls run, nothing of it is stored in the transcript.
    async fn flush_memory(&mut self, messages: &[ChatMessage]) -> Result<(), TurnError> {
        let Some(memory) = self
            .agent
            .tools
            .schemas()
            .into_iter()
            .find(|s| s.name == "memory")
        else {
            return Ok(());
        };
        let mut request: ChatRequest = self.request(messages.to_vec(), false);
        request.tools = vec![memory];
        request
            .messages
            .push(ChatMessage::text(Role::User, MEMORY_FLUSH_NOTE));
        let providers = &self.providers[self.provider.min(self.providers.len())..];
        let result = retry::call(
            providers,
            &request,
            &self.agent.config.retry,
            self.deadline,
            &|_| {},
            &|_| {},
            self.cancel,
        )
        .await;
        let response = match result {
            Ok(called) => {
                self.api_calls += called.calls;
                self.record_calls(
                    called.calls,
                    called.response.usage,
                    self.provider + called.provider,
                )
                .await?;
                called.response
            }
            Err(failed) => {
                self.api_calls += failed.calls;
                self.record_calls(failed.calls, None, self.provider).await?;
                if failed.error.class == crate::llm::ErrorClass::Cancelled {
                    return Err(TurnError::Cancelled);
                }
                // Compression goes on without the flush.
                tracing::warn!(error = %failed.error, "memory flush before compression failed");
                return Ok(());
            }
        };
        let ctx = crate::tools::ToolContext {
            session_id: self.state.session_id.clone(),
            conversation_id: self.state.conversation_id,
        };
        for call in response.tool_calls.iter().filter(|c| c.name == "memory") {
            let out = self
                .agent
                .tools
                .call(
                    &call.name,
                    &call.arguments,
                    &ctx,
                    self.agent.config.tool_timeout,
                    self.cancel,
                )
                .await;
            tracing::info!(is_error = out.is_error, "memory saved before compression");
        }
        Ok(())
    }
}
