//! The agent from configuration: providers (`[llm]` and its fallbacks), tools (`[tools]`,
//! `[mcp]`), the system prompt with its memory snapshot (`[agent]`), and compression
//! (`[compression]`, summarising with `[compression.model]` or else the main model).

use std::sync::Arc;
use std::time::Duration;

use agent_core::agent::{Agent, PromptBuilder, TurnConfig};
use agent_core::compress::{CompressionSettings, Compressor};
use agent_core::llm::limit::Limited;
use agent_core::redact::Redactor;
use agent_core::store::SessionStore;
use anyhow::{Context, Result};
use tokio::sync::Semaphore;

use crate::config::Loaded;

/// An agent and what could not be set up (MCP servers left out), one line each.
pub struct Built {
    pub agent: Agent,
    pub problems: Vec<String>,
}

/// Builds the agent; MCP servers are connected now.
pub async fn build(
    loaded: &Loaded,
    store: Arc<dyn SessionStore>,
    redactor: Arc<Redactor>,
) -> Result<Built> {
    let config = &loaded.config;
    // One limit on model calls in flight, shared by every provider (summaries included).
    let permits = Arc::new(Semaphore::new(
        usize::try_from(config.agent.max_concurrent_model_calls).unwrap_or(usize::MAX),
    ));
    let providers = Limited::all(crate::providers::chain(loaded, &config.llm)?, &permits);
    let main = providers
        .first()
        .cloned()
        .context("no model provider configured")?;
    let tools = crate::tools::build(loaded, store.clone(), redactor.clone()).await;
    let mut prompt = PromptBuilder::new(&config.agent.system_prompt);
    if let Some(memory) = &tools.memory {
        prompt = prompt.with_memory(memory.clone());
    }
    let c = &config.compression;
    let compression_model = c
        .model
        .as_ref()
        .map(|model| crate::providers::provider(loaded, model))
        .transpose()?
        .and_then(|model| Limited::all(vec![model], &permits).pop());
    let compressor = Compressor::new(
        CompressionSettings {
            enabled: c.enabled,
            threshold_percent: c.threshold_percent,
            min_threshold_tokens: c.min_threshold_tokens,
            protect_first_n: usize::try_from(c.protect_first_n).unwrap_or(usize::MAX),
            summary_target_ratio: c.summary_target_ratio,
        },
        compression_model,
        main,
        redactor,
    );
    let max_tokens = u32::try_from(config.llm.max_output_tokens).unwrap_or(u32::MAX);
    let agent = Agent {
        providers,
        tools: tools.registry,
        store,
        prompt,
        compressor: Some(Arc::new(compressor)),
        todo: tools.todo,
        config: TurnConfig {
            max_iterations: config.agent.max_iterations,
            max_tokens,
            tool_timeout: Duration::from_secs(config.tools.timeout_secs),
            turn_deadline: Duration::from_secs(config.agent.turn_timeout_secs),
            memory_flush: c.memory_flush,
            ..TurnConfig::default()
        },
    };
    Ok(Built {
        agent,
        problems: tools.problems,
    })
}
