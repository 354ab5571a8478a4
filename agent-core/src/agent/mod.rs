//! The conversation loop: one user message in, one final answer out, with tools in between
//! and every message persisted as it is produced (DESIGN.md §5).
//!
//! # Layout
//! - [`turn`]: the outer tool loop ([`Agent::run_turn`]).
//! - [`call`]: one model call of a turn: usage, cost, context size, interrupted text.
//! - [`compaction`]: compression inside the loop: triggers, memory flush, session rotation.
//! - [`answer`]: the final answer: truncated ones continued, empty ones recovered.
//! - [`retry`]: the inner retry chain around each model call, acting on the error class.
//! - [`prompt`]: the session's system prompt, frozen with a memory snapshot.
//! - [`estimate`]: the rough context size when the provider reports none.
//! - [`history`]: stored messages to model messages and back.

pub mod answer;
pub mod call;
pub mod compaction;
pub mod estimate;
pub mod history;
pub mod prompt;
pub mod retry;
pub mod turn;

pub use compaction::{CompressionReport, Trigger};
pub use prompt::PromptBuilder;
pub use turn::{
    Agent, ContextState, ConversationState, Steering, TurnConfig, TurnError, TurnEvent,
    TurnOutcome, UserInput,
};
