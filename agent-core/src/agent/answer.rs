//! Turning the model's last answer into the turn's answer (DESIGN.md §5):
//!
//! - **length-truncated**: asked to continue exactly where it stopped, up to 3 times, joined;
//! - **empty**: after tools, the text the model wrote beside its calls is the answer;
//!   otherwise nudged and retried up to 3 times, then each fallback provider is asked once,
//!   then an honest note that no answer came.
//!
//! The nudges, continue notes and partial answers are scaffolding: never stored. The answer is
//! stored once.

use super::history;
use super::retry::RetryNotice;
use super::turn::{Turn, TurnError, TurnEvent};
use crate::llm::{ChatMessage, ChatResponse, FinishReason};
use crate::store::Role;

/// How often an empty answer is nudged, and a truncated one continued.
const MAX_RECOVERIES: u32 = 3;
/// Sent (never stored) after an empty answer.
const EMPTY_NUDGE: &str = "Your last reply was empty. Please answer the message above.";
/// Sent (never stored) after an answer cut off by the length limit.
const CONTINUE_NOTE: &str = "Continue exactly where you stopped, without repeating anything.";
/// The answer when every model stays silent.
pub const NO_ANSWER: &str = "(The model returned no answer. Please try again or rephrase.)";

impl Turn<'_> {
    /// See the module docs. `provider` answered `response`; `earlier_text` is what the model
    /// wrote beside its tool calls this turn.
    pub(super) async fn finish_answer(
        &mut self,
        history: &[ChatMessage],
        response: ChatResponse,
        mut provider: usize,
        earlier_text: Option<String>,
    ) -> Result<String, TurnError> {
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
                if nudges >= MAX_RECOVERIES {
                    // This provider stays silent; each fallback gets one nudged call.
                    let Some(next) = self.providers.get(provider + 1) else {
                        text = NO_ANSWER.to_owned();
                        break;
                    };
                    provider += 1;
                    (self.on_event)(TurnEvent::Retry(RetryNotice::FallingBackAfterEmpty {
                        to_model: next.model().to_owned(),
                    }));
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
            let request = self.request(messages, false);
            let unsaved = if empty { "" } else { text.as_str() };
            let next = self.call_model(&request, provider, unsaved).await?;
            provider = next.provider;
            if empty {
                text = next.response.content;
            } else {
                text.push_str(&next.response.content);
            }
            finish = next.response.finish_reason;
            usage = next.response.usage.or(usage);
        }
        let finish_text = finish.as_ref().map(|f| f.as_str().to_owned());
        let answer =
            history::assistant(&text, &[], finish_text, usage.map(|u| u.completion_tokens));
        self.store_messages(&[answer]).await?;
        Ok(text)
    }
}
