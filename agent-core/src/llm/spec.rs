//! What the loop must know about a model beyond its name: how much context it takes, how much
//! it may write, and what it costs. Each provider carries one, so a fallback model is sized
//! and priced as itself, not as the main model.

use serde::{Deserialize, Serialize};

use super::Usage;

/// A model's limits and prices.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Tokens of context the model accepts (prompt + answer).
    pub context_length: u64,
    /// The most a request asks it to write; larger requests are lowered to this.
    pub max_output_tokens: u32,
    pub prices: Prices,
    /// The model takes images (sent as image parts; otherwise only their text notes).
    pub vision: bool,
}

impl Default for ModelSpec {
    fn default() -> Self {
        Self {
            context_length: 128_000,
            max_output_tokens: 4096,
            prices: Prices::default(),
            vision: false,
        }
    }
}

/// US dollars per million tokens. Zero means free (local models) or unknown; the cost estimate
/// is only as good as these figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Prompt tokens served from the provider's cache; the input price when unset.
    pub cache_read_per_mtok: Option<f64>,
    /// Prompt tokens written to the provider's cache; the input price when unset.
    pub cache_write_per_mtok: Option<f64>,
}

impl Prices {
    /// The estimated cost of one call. `prompt_tokens` includes the cached tokens, which are
    /// priced at their own rates; completion tokens include reasoning (billed as output).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let fresh = usage.prompt_tokens.saturating_sub(cached);
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(fresh, self.input_per_mtok)
            + per(
                usage.cache_read_tokens,
                self.cache_read_per_mtok.unwrap_or(self.input_per_mtok),
            )
            + per(
                usage.cache_write_tokens,
                self.cache_write_per_mtok.unwrap_or(self.input_per_mtok),
            )
            + per(usage.completion_tokens, self.output_per_mtok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_prices_fresh_cached_and_output_tokens_at_their_rates() {
        let prices = Prices {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
        };
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 100_000,
            reasoning_tokens: 40_000,
        };
        // 400k fresh × 3 + 500k × 0.3 + 100k × 3.75 + 100k × 15 (reasoning is inside completion)
        let expected = 1.2 + 0.15 + 0.375 + 1.5;
        assert!((prices.cost(&usage) - expected).abs() < 1e-9);
    }

    #[test]
    fn unset_cache_prices_fall_back_to_the_input_price() {
        let prices = Prices {
            input_per_mtok: 2.0,
            output_per_mtok: 0.0,
            ..Prices::default()
        };
        let usage = Usage {
            prompt_tokens: 2_000_000,
            cache_read_tokens: 1_000_000,
            ..Usage::default()
        };
        assert!((prices.cost(&usage) - 4.0).abs() < 1e-9);
        assert_eq!(Prices::default().cost(&usage), 0.0);
    }
}
