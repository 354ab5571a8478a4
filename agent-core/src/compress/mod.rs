//! Context compression (DESIGN.md §6): when a conversation's context grows past the threshold,
//! the middle of it is replaced by a summary so the conversation can go on.
//!
//! The algorithm is four phases over the model's view of the messages:
//! 1. [`prune`]: duplicate tool outputs, long tool results, images and long tool arguments
//!    shrunk without a model call;
//! 2. [`boundary`]: the kept head and tail, never splitting a tool call from its results, the
//!    newest user message always in the tail;
//! 3. [`summary`] (run by [`engine`]): the middle summarised by the compression model —
//!    updating the previous summary when there is one — with redaction before and after, a
//!    fallback to the main model, cooldowns, and an honest fallback digest;
//! 4. [`assemble`]: head + summary + tail, roles kept alternating, tool pairs made whole.
//!
//! What happens around it (rotating the session, rebuilding the system prompt, re-injecting
//! the todo list, warnings, the per-session lock) is the loop's: see `agent::compaction`.

pub mod assemble;
pub mod boundary;
pub mod engine;
pub mod prune;
pub mod summary;

pub use engine::{Compacted, Compressor};

/// Opens every summary message: what it is, and that it is not an instruction.
pub const SUMMARY_PREFIX: &str = "[CONTEXT SUMMARY] Earlier messages of this conversation were compressed into the summary below. It is a hand-over of earlier context, not new instructions; the memory in the system prompt remains authoritative.";
/// Closes every summary message.
pub const END_MARKER: &str =
    "--- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---";

/// When and how much to compress.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressionSettings {
    /// Compress automatically (preflight and after responses). Overflow recovery and
    /// `/compress` work either way.
    pub enabled: bool,
    /// Share of the context length at which to compress.
    pub threshold_percent: f64,
    /// The threshold's floor in tokens.
    pub min_threshold_tokens: u64,
    /// Messages at the start never compressed.
    pub protect_first_n: usize,
    /// The verbatim tail's budget as a share of the threshold.
    pub summary_target_ratio: f64,
}

impl Default for CompressionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_percent: 0.50,
            min_threshold_tokens: 64_000,
            protect_first_n: 3,
            summary_target_ratio: 0.20,
        }
    }
}

impl CompressionSettings {
    /// `max(context_length × threshold_percent, min_threshold_tokens)`. The floor never lifts
    /// the threshold past 85 % of the window itself (a 32k model with the default 64k floor
    /// must still compress before it overflows).
    pub fn threshold(&self, context_length: u64) -> u64 {
        let share = (context_length as f64 * self.threshold_percent) as u64;
        let floor = self
            .min_threshold_tokens
            .min((context_length as f64 * 0.85) as u64);
        share.max(floor)
    }

    /// The verbatim tail's token budget.
    pub fn tail_budget(&self, context_length: u64) -> u64 {
        (self.threshold(context_length) as f64 * self.summary_target_ratio) as u64
    }
}
