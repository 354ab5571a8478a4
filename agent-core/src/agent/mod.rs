//! The conversation loop: one user message in, one final answer out, with tools in between
//! and every message persisted as it is produced (DESIGN.md §5).
//!
//! # Layout
//! - [`turn`]: the outer tool loop ([`Agent::run_turn`]).
//! - [`retry`]: the inner retry chain around each model call, acting on the error class.
//! - [`history`]: stored messages to model messages and back.

pub mod history;
pub mod retry;
pub mod turn;

pub use turn::{Agent, TurnConfig, TurnError, TurnEvent, TurnInput, TurnOutcome};
