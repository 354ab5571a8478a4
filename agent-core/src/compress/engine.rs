//! The four phases run together: [`Compressor::compress`] turns a message list into a shorter
//! one, asking the compression model for the summary (then the main model once), cooling
//! down after failures, and falling back to a digest that says what it is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{CompressionSettings, assemble, boundary, prune, summary};
use crate::agent::estimate;
use crate::llm::{ChatMessage, ChatProvider, ErrorClass, LlmError};
use crate::redact::Redactor;

/// The most one summary call may take.
const SUMMARY_TIMEOUT: Duration = Duration::from_secs(180);

/// A compression's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    pub messages: Vec<ChatMessage>,
    /// Estimated tokens of the messages before and after.
    pub before_tokens: u64,
    pub after_tokens: u64,
    /// Messages replaced by the summary.
    pub summarised: usize,
    /// The summary written (or the fallback digest).
    pub summary: String,
    /// Why the fallback digest was used instead of a model summary, if it was.
    pub fallback_reason: Option<String>,
}

impl Compacted {
    /// Share of the estimated size saved (0–1).
    pub fn saved(&self) -> f64 {
        if self.before_tokens == 0 {
            return 0.0;
        }
        1.0 - self.after_tokens as f64 / self.before_tokens as f64
    }
}

/// Compresses message lists; shared by the conversations of a deployment.
pub struct Compressor {
    pub settings: CompressionSettings,
    /// Tried in order for each summary: the compression model (if configured), then the main
    /// model.
    summarisers: Vec<Arc<dyn ChatProvider>>,
    redactor: Arc<Redactor>,
    /// No summary calls before this instant (after failures).
    cooldown: Mutex<Option<(Instant, String)>>,
}

impl Compressor {
    /// `compression_model` summarises; `main` is tried once when it fails (or alone when no
    /// compression model is configured).
    pub fn new(
        settings: CompressionSettings,
        compression_model: Option<Arc<dyn ChatProvider>>,
        main: Arc<dyn ChatProvider>,
        redactor: Arc<Redactor>,
    ) -> Self {
        let mut summarisers: Vec<Arc<dyn ChatProvider>> = compression_model.into_iter().collect();
        summarisers.push(main);
        Self {
            settings,
            summarisers,
            redactor,
            cooldown: Mutex::new(None),
        }
    }

    /// Compresses `messages` for a window of `context_length` tokens. `None` when there is
    /// nothing to summarise or the result would not be smaller. `note` (the todo list) is
    /// appended to the summary. `forced` (an overflow or `/compress`, not the threshold) sizes
    /// the tail by the messages themselves when they are smaller than the threshold, so a
    /// request the provider refused still gets smaller. Only a cancel fails it: model
    /// failures become the fallback digest.
    pub async fn compress(
        &self,
        messages: &[ChatMessage],
        context_length: u64,
        forced: bool,
        focus: Option<&str>,
        note: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<Option<Compacted>, LlmError> {
        let before_tokens = estimate::messages(messages);
        let mut tail_budget = self.settings.tail_budget(context_length);
        if forced {
            let by_size = (before_tokens as f64 * self.settings.summary_target_ratio) as u64;
            tail_budget = tail_budget.min(by_size);
        }
        let cut = boundary::find(messages, self.settings.protect_first_n, tail_budget);
        if cut.is_empty() {
            return Ok(None);
        }
        let mut pruned = messages.to_vec();
        prune::prune(&mut pruned, cut.head_end..cut.tail_start);
        let mut head = pruned[..cut.head_end].to_vec();
        let mut middle = pruned[cut.head_end..cut.tail_start].to_vec();
        let tail = &pruned[cut.tail_start..];

        // The previous summary is updated, not summarised again as if it were conversation.
        let previous = take_summary(&mut middle).or_else(|| take_summary(&mut head));
        if middle.is_empty() {
            // Only the previous summary sits between head and tail: nothing new to fold in.
            return Ok(None);
        }
        let budget = summary::budget(estimate::messages(&middle), context_length);
        let (mut text, fallback_reason) = match self
            .summarise(&middle, previous.as_deref(), focus, budget, cancel)
            .await
        {
            Ok(text) => (text, None),
            Err(e) if e.class == ErrorClass::Cancelled => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "summary unavailable; using the fallback digest");
                (
                    summary::fallback_digest(&middle, previous.as_deref()),
                    Some(e.message),
                )
            }
        };
        text = self.redactor.redact(&text).into_owned();
        if let Some(note) = note.filter(|n| !n.trim().is_empty()) {
            text.push_str("\n\n");
            text.push_str(note.trim());
        }
        let out = assemble::assemble(&head, &text, tail);
        let after_tokens = estimate::messages(&out);
        if after_tokens >= before_tokens {
            return Ok(None);
        }
        Ok(Some(Compacted {
            messages: out,
            before_tokens,
            after_tokens,
            summarised: cut.tail_start - cut.head_end,
            summary: text,
            fallback_reason,
        }))
    }

    /// One call per summariser until one writes a summary; then a cooldown on failure.
    async fn summarise(
        &self,
        middle: &[ChatMessage],
        previous: Option<&str>,
        focus: Option<&str>,
        budget: u64,
        cancel: &CancellationToken,
    ) -> Result<String, LlmError> {
        if let Some((until, why)) = self.cooldown.lock().ok().and_then(|c| c.clone())
            && Instant::now() < until
        {
            return Err(LlmError::transport(
                format!("summaries are cooling down after: {why}"),
                false,
            ));
        }
        let request = summary::request(middle, previous, focus, budget, &self.redactor);
        let mut last = LlmError::transport("no summariser configured", false);
        for model in &self.summarisers {
            let call = model.complete(&request, &|_| {}, cancel);
            let result = match tokio::time::timeout(SUMMARY_TIMEOUT, call).await {
                Ok(result) => result,
                Err(_) => Err(LlmError::transport("the summary took too long", true)),
            };
            match result {
                Ok(response) if !response.content.trim().is_empty() => {
                    if let Ok(mut c) = self.cooldown.lock() {
                        *c = None;
                    }
                    return Ok(response.content);
                }
                Ok(_) => last = LlmError::transport("the summary came back empty", false),
                Err(e) if e.class == ErrorClass::Cancelled => return Err(e),
                Err(e) => last = e,
            }
        }
        let wait = cooldown_for(last.class);
        if let Ok(mut c) = self.cooldown.lock() {
            *c = Some((Instant::now() + wait, last.message.clone()));
        }
        Err(last)
    }
}

/// How long summaries pause after a failure of this class: 30 s for passing trouble, 60 s
/// for server faults, 600 s for what needs an operator (keys, billing, a missing model).
pub fn cooldown_for(class: ErrorClass) -> Duration {
    match class {
        ErrorClass::RateLimit
        | ErrorClass::Overloaded
        | ErrorClass::Timeout
        | ErrorClass::Transport
        | ErrorClass::Cancelled => Duration::from_secs(30),
        ErrorClass::Auth
        | ErrorClass::Billing
        | ErrorClass::ModelNotFound
        | ErrorClass::ContentPolicy => Duration::from_secs(600),
        _ => Duration::from_secs(60),
    }
}

/// Takes the first summary out of `messages`: a message that is only a summary is removed, a
/// message the summary was merged into keeps its own text.
fn take_summary(messages: &mut Vec<ChatMessage>) -> Option<String> {
    let index = messages.iter().position(|m| {
        m.content
            .as_deref()
            .is_some_and(|c| c.contains(super::SUMMARY_PREFIX))
    })?;
    let content = messages[index].content.clone().unwrap_or_default();
    let (summary, rest) = summary::split_summary(&content)?;
    if rest.is_empty() && messages[index].tool_calls.is_empty() {
        messages.remove(index);
    } else {
        messages[index].content = Some(rest);
    }
    Some(summary)
}
