//! Model providers from configuration: the main model, then its fallbacks in order, each
//! with its own limits, prices and key (read from the environment, never from the file).

use std::sync::Arc;
use std::time::Duration;

use agent_core::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{ChatProvider, ModelSpec, Prices};
use anyhow::{Context, Result};

use crate::config::{LlmConfig, Loaded};

/// `[llm]` and its `[[llm.fallback]]` entries, in the order they are tried.
pub fn chain(loaded: &Loaded, llm: &LlmConfig) -> Result<Vec<Arc<dyn ChatProvider>>> {
    std::iter::once(llm)
        .chain(&llm.fallback)
        .map(|one| provider(loaded, one))
        .collect()
}

/// One provider.
pub fn provider(loaded: &Loaded, llm: &LlmConfig) -> Result<Arc<dyn ChatProvider>> {
    let spec = ModelSpec {
        context_length: llm.context_length,
        max_output_tokens: u32::try_from(llm.max_output_tokens).unwrap_or(u32::MAX),
        prices: Prices {
            input_per_mtok: llm.input_price_per_mtok,
            output_per_mtok: llm.output_price_per_mtok,
            cache_read_per_mtok: llm.cache_read_price_per_mtok,
            cache_write_per_mtok: llm.cache_write_price_per_mtok,
        },
        vision: llm.sees_images(),
    };
    let key = loaded.secret(llm.key_env());
    let secs = Duration::from_secs;
    let built: Arc<dyn ChatProvider> = match llm.provider.as_str() {
        "anthropic" => {
            let mut config = AnthropicConfig::new(&llm.base_url, &llm.model);
            config.api_key = key;
            config.connect_timeout = secs(llm.connect_timeout_secs);
            config.first_byte_timeout = secs(llm.first_token_timeout_secs);
            config.idle_timeout = secs(llm.idle_timeout_secs);
            config.spec = spec;
            Arc::new(AnthropicProvider::new(config).context("model client")?)
        }
        _ => {
            let mut config = OpenAiConfig::new(&llm.base_url, &llm.model);
            config.api_key = key;
            config.stream = llm.stream;
            config.connect_timeout = secs(llm.connect_timeout_secs);
            config.first_byte_timeout = secs(llm.first_token_timeout_secs);
            config.idle_timeout = secs(llm.idle_timeout_secs);
            config.spec = spec;
            Arc::new(OpenAiProvider::new(config).context("model client")?)
        }
    };
    Ok(Arc::new(Metered(built)))
}

/// A provider whose calls are counted and timed in [`crate::metrics`]: outcome (ok or the
/// error class), latency, tokens and estimated cost.
struct Metered(Arc<dyn ChatProvider>);

#[async_trait::async_trait]
impl ChatProvider for Metered {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }

    fn model(&self) -> &str {
        self.0.model()
    }

    fn spec(&self) -> &ModelSpec {
        self.0.spec()
    }

    fn with_model(&self, model: &str) -> Option<Arc<dyn ChatProvider>> {
        self.0
            .with_model(model)
            .map(|p| Arc::new(Metered(p)) as Arc<dyn ChatProvider>)
    }

    async fn complete(
        &self,
        request: &agent_core::llm::ChatRequest,
        on_event: &(dyn Fn(agent_core::llm::StreamEvent) + Send + Sync),
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<agent_core::llm::ChatResponse, agent_core::llm::LlmError> {
        let started = std::time::Instant::now();
        let result = self.0.complete(request, on_event, cancel).await;
        let metrics = crate::metrics::metrics();
        match &result {
            Ok(response) => {
                let usage = response.usage.unwrap_or_default();
                metrics.model_call(
                    self.kind(),
                    "ok",
                    started.elapsed(),
                    response
                        .usage
                        .map(|u| (u.prompt_tokens, u.completion_tokens)),
                    self.spec().prices.cost(&usage),
                );
            }
            Err(error) => metrics.model_call(
                self.kind(),
                error.class.as_str(),
                started.elapsed(),
                None,
                0.0,
            ),
        }
        result
    }
}
