//! One model call of a turn, through the retry chain: its text streamed out as events, its
//! calls, usage and estimated cost added to the session row, the context size updated, and —
//! when the turn is cancelled mid-stream — the text streamed so far stored as `interrupted`.

use std::sync::Mutex;

use super::estimate;
use super::history;
use super::retry::{self, RetryNotice};
use super::turn::{Turn, TurnError, TurnEvent};
use crate::llm::{ChatRequest, ChatResponse, ErrorClass, StreamEvent, Usage};
use crate::store::{SessionUsage, StoreError};

/// The `finish_reason` stored on text cut short by a cancel.
pub const INTERRUPTED: &str = "interrupted";

/// A model's answer and which provider gave it (an index into `Agent::providers`).
pub(super) struct Answered {
    pub response: ChatResponse,
    pub provider: usize,
}

impl Turn<'_> {
    /// Calls the providers from index `from` on. `unsaved` is answer text this turn already
    /// holds but has not stored (a truncated answer being continued): on cancel it is stored
    /// with whatever this call streamed, marked interrupted.
    pub(super) async fn call_model(
        &mut self,
        request: &ChatRequest,
        from: usize,
        unsaved: &str,
    ) -> Result<Answered, TurnError> {
        let providers = &self.providers;
        let from = from.min(providers.len());
        let streamed = Mutex::new(String::new());
        let on_event = self.on_event;
        let text_events = |e: StreamEvent| {
            if let StreamEvent::TextDelta(t) = e {
                if let Ok(mut s) = streamed.lock() {
                    s.push_str(&t);
                }
                on_event(TurnEvent::Text(t));
            }
        };
        let notices = |n: RetryNotice| {
            // A retry starts the answer over.
            if let Ok(mut s) = streamed.lock() {
                s.clear();
            }
            on_event(TurnEvent::Retry(n));
        };
        let result = retry::call(
            &providers[from..],
            request,
            &self.agent.config.retry,
            self.deadline,
            &text_events,
            &notices,
            self.cancel,
        )
        .await;
        match result {
            Ok(called) => {
                let provider = from + called.provider;
                self.api_calls += called.calls;
                self.record_calls(called.calls, called.response.usage, provider)
                    .await?;
                let (tokens, estimated) = match called.response.usage {
                    Some(u) => (u.prompt_tokens, false),
                    None => (estimate::request(request), true),
                };
                self.state.context.tokens = tokens;
                self.state.context.estimated = estimated;
                Ok(Answered {
                    response: called.response,
                    provider,
                })
            }
            Err(failed) => {
                self.api_calls += failed.calls;
                self.record_calls(failed.calls, None, from).await?;
                if failed.error.class == ErrorClass::Cancelled {
                    let streamed = streamed.into_inner().unwrap_or_default();
                    self.store_cut_text(&format!("{unsaved}{streamed}"), INTERRUPTED)
                        .await?;
                    return Err(TurnError::Cancelled);
                }
                Err(TurnError::Model(failed.error))
            }
        }
    }

    /// Stores answer text cut short (by a cancel: `interrupted`; by moderation:
    /// `content_filter`), so the transcript shows what the user saw.
    pub(super) async fn store_cut_text(
        &mut self,
        text: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let message = history::assistant(text, &[], Some(reason.to_owned()), None);
        self.store_messages(&[message]).await.map(drop)
    }

    /// Adds calls, their usage and its estimated cost (at the answering provider's prices)
    /// to the session's totals.
    pub(super) async fn record_calls(
        &mut self,
        calls: u32,
        usage: Option<Usage>,
        provider: usize,
    ) -> Result<(), StoreError> {
        let u = usage.unwrap_or_default();
        self.usage.prompt_tokens += u.prompt_tokens;
        self.usage.completion_tokens += u.completion_tokens;
        self.usage.cache_read_tokens += u.cache_read_tokens;
        self.usage.cache_write_tokens += u.cache_write_tokens;
        self.usage.reasoning_tokens += u.reasoning_tokens;
        let cost = self
            .providers
            .get(provider)
            .map_or(0.0, |p| p.spec().prices.cost(&u));
        self.cost_usd += cost;
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.agent
            .store
            .add_usage(
                &self.state.session_id,
                &SessionUsage {
                    input_tokens: to_i64(u.prompt_tokens),
                    output_tokens: to_i64(u.completion_tokens),
                    cache_read_tokens: to_i64(u.cache_read_tokens),
                    cache_write_tokens: to_i64(u.cache_write_tokens),
                    reasoning_tokens: to_i64(u.reasoning_tokens),
                    estimated_cost_usd: cost,
                    api_call_count: i64::from(calls),
                },
            )
            .await
    }
}
