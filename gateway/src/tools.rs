//! The agent's tools from configuration: the built-ins (`[tools]`) and the tools of every
//! enabled MCP server (`[mcp.servers.*]`), with secrets resolved from the environment.

use std::sync::Arc;
use std::time::Duration;

use agent_core::redact::Redactor;
use agent_core::store::SessionStore;
use agent_core::tools::ToolRegistry;
use agent_core::tools::clock::Clock;
use agent_core::tools::mcp::{self, McpServerConfig, McpTransport};
use agent_core::tools::memory::MemoryStore;
use agent_core::tools::session_search::{SearchScope, SessionSearch};
use agent_core::tools::todo::Todo;
use anyhow::{Result, anyhow};

use crate::config::{Loaded, McpServerEntry, SearchScopeConfig};

/// The registry and what the system prompt needs from it.
pub struct Tools {
    pub registry: ToolRegistry,
    /// The memory the system prompt snapshots (when the tool is on).
    pub memory: Option<Arc<MemoryStore>>,
    /// The todo list compression carries to the next session (when the tool is on).
    pub todo: Option<Arc<Todo>>,
    /// MCP servers left out, one line each (also logged).
    pub problems: Vec<String>,
}

/// Builds every configured tool; MCP servers are connected now. Outputs are redacted with
/// `redactor` (which knows the deployment's own secrets).
pub async fn build(
    loaded: &Loaded,
    store: Arc<dyn SessionStore>,
    redactor: Arc<Redactor>,
) -> Tools {
    let config = &loaded.config.tools;
    let mut registry = ToolRegistry::new().with_redactor(redactor);
    if config.clock {
        registry.register(Arc::new(Clock));
    }
    let todo = config
        .todo
        .then(|| Arc::new(Todo::durable(loaded.home.join("todo"))));
    if let Some(todo) = &todo {
        registry.register(todo.clone());
    }
    let memory = config
        .memory
        .then(|| Arc::new(MemoryStore::new(loaded.home.join("memory"))));
    if let Some(memory) = &memory {
        registry.register(memory.clone());
    }
    let scope = match config.session_search {
        SearchScopeConfig::Lineage => Some(SearchScope::Lineage),
        SearchScopeConfig::Conversation => Some(SearchScope::Conversation),
        SearchScopeConfig::Off => None,
    };
    if let Some(scope) = scope {
        registry.register(Arc::new(SessionSearch::new(store, scope)));
    }
    let mut problems = Vec::new();
    let mut servers = Vec::new();
    for resolved in mcp_servers(loaded) {
        match resolved {
            Ok(server) => servers.push(server),
            Err(e) => problems.push(e.to_string()),
        }
    }
    let (found, errors) = mcp::connect_all(&servers).await;
    for tool in found {
        registry.register(tool);
    }
    problems.extend(errors.iter().map(ToString::to_string));
    Tools {
        registry,
        memory,
        todo,
        problems,
    }
}

/// The enabled MCP servers with their secrets read from the environment. A server whose
/// secret variable is unset is an error (it would otherwise run without its credentials).
pub fn mcp_servers(loaded: &Loaded) -> Vec<Result<McpServerConfig>> {
    loaded
        .config
        .mcp
        .servers
        .iter()
        .filter(|(_, entry)| entry.enabled)
        .map(|(name, entry)| resolve(loaded, name, entry))
        .collect()
}

fn resolve(loaded: &Loaded, name: &str, entry: &McpServerEntry) -> Result<McpServerConfig> {
    let secret = |var: &str| {
        loaded
            .secret(var)
            .ok_or_else(|| anyhow!("mcp.servers.{name}: environment variable {var} is unset"))
    };
    let transport = match (&entry.command, &entry.url) {
        (Some(command), _) => {
            let mut env = entry.env.clone();
            for (child_var, daemon_var) in &entry.env_from {
                env.insert(child_var.clone(), secret(daemon_var)?);
            }
            McpTransport::Stdio {
                command: command.clone(),
                args: entry.args.clone(),
                env,
                cwd: entry.cwd.clone(),
            }
        }
        (None, Some(url)) => McpTransport::Http {
            url: url.clone(),
            bearer_token: entry.bearer_token_env.as_deref().map(secret).transpose()?,
        },
        (None, None) => return Err(anyhow!("mcp.servers.{name} has neither command nor url")),
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
        include: entry.include.clone(),
        connect_timeout: Duration::from_secs(entry.connect_timeout_secs),
    })
}
