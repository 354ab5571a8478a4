//! Tools the model can call: the [`Tool`] trait, the [`ToolRegistry`] that runs them, and the
//! built-in tools.
//!
//! A tool call never fails the turn: unknown tools, invalid JSON arguments, errors, timeouts
//! and cancellation all become a [`ToolOutput`] the model reads (marked as an error), so the
//! loop can always answer every call it was given. Every output is redacted before anyone sees
//! it: a tool that prints a key (a config file, an environment dump) never puts it in the
//! transcript, the store or the next request.
//!
//! # Layout
//! - [`clock`]: the current time (UTC, or a fixed offset).
//! - [`mcp`]: tools of MCP servers (stdio child processes, streamable HTTP).
//! - [`memory`]: MEMORY.md and USER.md per conversation, with hard size limits.
//! - [`session_search`]: full-text search over this conversation's earlier messages.
//! - [`todo`]: a per-session task list the agent keeps for itself.

pub mod clock;
pub mod mcp;
pub mod memory;
pub mod session_search;
pub mod todo;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::llm::ToolSchema;
use crate::redact::Redactor;

/// What a tool knows about the call it serves.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub session_id: String,
    pub conversation_id: i64,
}

/// A tool's answer, as the model will read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    /// The call failed (bad arguments, error, timeout…); the content says why.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

/// A tool the model can call.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    /// Runs the call. Long-running tools should check `cancel`; the registry also stops
    /// waiting for them when it fires.
    async fn call(&self, args: Value, ctx: &ToolContext, cancel: &CancellationToken) -> ToolOutput;
}

/// The tools of one deployment, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    redactor: Arc<Redactor>,
}

impl ToolRegistry {
    /// A registry redacting outputs by the pattern rules only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Redacts outputs with `redactor` (which also knows the deployment's own secrets).
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// Adds a tool; a later tool with the same name replaces the earlier one.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    /// The schemas to offer the model, sorted by name (a stable prompt caches better).
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools
            .values()
            .map(|t| ToolSchema {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// Runs one call as the model made it, bounded by `timeout` and `cancel`; the output comes
    /// back redacted.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        ctx: &ToolContext,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let mut output = self.call_raw(name, arguments, ctx, timeout, cancel).await;
        if let std::borrow::Cow::Owned(clean) = self.redactor.redact(&output.content) {
            output.content = clean;
        }
        output
    }

    async fn call_raw(
        &self,
        name: &str,
        arguments: &str,
        ctx: &ToolContext,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            return ToolOutput::error(format!(
                "unknown tool {name:?}; available: {}",
                known.join(", ")
            ));
        };
        let args: Value = if arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str(arguments) {
                Ok(args) => args,
                Err(e) => {
                    return ToolOutput::error(format!(
                        "arguments are not valid JSON ({e}); send a JSON object"
                    ));
                }
            }
        };
        tokio::select! {
            // A cancel wins over a tool that notices it at the same moment: one answer.
            biased;
            () = cancel.cancelled() => ToolOutput::error("cancelled"),
            result = tokio::time::timeout(timeout, tool.call(args, ctx, cancel)) => match result {
                Ok(output) => output,
                Err(_) => ToolOutput::error(format!("{name} did not finish within {} s", timeout.as_secs())),
            },
        }
    }
}

/// Reads a string argument.
pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolOutput> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolOutput::error(format!("missing string argument {key:?}")))
}
