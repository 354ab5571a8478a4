//! Phase 2: where the kept head ends and the kept tail starts. Everything between is
//! summarised.
//!
//! Rules (DESIGN.md §6): the head is the first `protect_first_n` messages; the tail is found
//! walking back from the end within a token budget (a message that overflows it is still
//! taken while the tail stays under 1.5× the budget), and holds at least 3 messages; neither
//! boundary separates a tool call from its results; the newest user message is always in the
//! tail.

use crate::agent::estimate;
use crate::llm::ChatMessage;
use crate::store::Role;

/// The tail holds at least this many messages (fewer only when there are fewer).
pub const MIN_TAIL_MESSAGES: usize = 3;
/// How far past its budget the tail may grow to take one more (large) message.
pub const TAIL_SOFT_CAP: f64 = 1.5;

/// `messages[..head_end]` is kept, `messages[head_end..tail_start]` summarised,
/// `messages[tail_start..]` kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundaries {
    pub head_end: usize,
    pub tail_start: usize,
}

impl Boundaries {
    /// Nothing between head and tail: nothing to summarise.
    pub fn is_empty(&self) -> bool {
        self.tail_start <= self.head_end
    }
}

/// Finds the boundaries; see the module docs.
pub fn find(messages: &[ChatMessage], protect_first_n: usize, tail_budget: u64) -> Boundaries {
    let len = messages.len();
    // Head: never end it between a call and its results.
    let mut head_end = protect_first_n.min(len);
    while head_end < len && messages[head_end].role == Role::Tool {
        head_end += 1;
    }

    // Tail: walk back within the budget.
    let soft_cap = (tail_budget as f64 * TAIL_SOFT_CAP) as u64;
    let mut tail_start = len;
    let mut used = 0u64;
    while tail_start > head_end {
        let size = estimate::message(&messages[tail_start - 1]);
        let taken = len - tail_start;
        if taken >= MIN_TAIL_MESSAGES && used + size > tail_budget {
            // One large message may still come in under the soft cap.
            if used + size <= soft_cap {
                tail_start -= 1;
            }
            break;
        }
        used += size;
        tail_start -= 1;
    }
    // Never start the tail on a tool result: take its call (and the call's other results).
    while tail_start > head_end && tail_start < len && messages[tail_start].role == Role::Tool {
        tail_start -= 1;
    }
    // The newest user message is what the model must answer: always kept verbatim.
    if let Some(last_user) = messages.iter().rposition(|m| m.role == Role::User)
        && last_user < tail_start
        && last_user >= head_end
    {
        tail_start = last_user;
    }
    Boundaries {
        head_end,
        tail_start: tail_start.max(head_end),
    }
}
