//! `[tools]` (the built-in tools) and `[mcp.servers.<name>]` (MCP servers whose tools the
//! agent may call). No MCP server runs unless configured here: external tools are never on by
//! default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// MEMORY.md / USER.md per conversation under `$IRIS_HOME/memory`.
    pub memory: bool,
    pub todo: bool,
    pub clock: bool,
    /// `lineage` (this session and the ones it was compressed from), `conversation` (every
    /// session of this chat), or `off`. Never wider than the conversation.
    pub session_search: SearchScopeConfig,
    /// Per tool call.
    pub timeout_secs: u64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            memory: true,
            todo: true,
            clock: true,
            session_search: SearchScopeConfig::Lineage,
            timeout_secs: 120,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchScopeConfig {
    Lineage,
    Conversation,
    Off,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// By name; the name prefixes the server's tools (`mcp_<name>_<tool>`).
    pub servers: BTreeMap<String, McpServerEntry>,
}

/// One MCP server: `command` (stdio, launched by the daemon) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerEntry {
    pub enabled: bool,
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Plain variables for the child (it inherits only PATH, HOME, locale, TZ, TMPDIR).
    pub env: BTreeMap<String, String>,
    /// Secret variables for the child: child name → the daemon variable holding the value.
    pub env_from: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub url: Option<String>,
    /// Names the variable holding the bearer token sent to `url`.
    pub bearer_token_env: Option<String>,
    /// Only these of the server's tools (all when empty).
    pub include: Vec<String>,
    pub connect_timeout_secs: u64,
}

impl Default for McpServerEntry {
    fn default() -> Self {
        Self {
            enabled: true,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_from: BTreeMap::new(),
            cwd: None,
            url: None,
            bearer_token_env: None,
            include: Vec::new(),
            connect_timeout_secs: 30,
        }
    }
}

impl McpServerEntry {
    /// The daemon variables this server reads secrets from.
    pub fn secret_env_names(&self) -> impl Iterator<Item = &str> {
        self.env_from
            .values()
            .map(String::as_str)
            .chain(self.bearer_token_env.as_deref())
    }
}

pub(super) fn validate(tools: &ToolsConfig, mcp: &McpConfig) -> Result<()> {
    if tools.timeout_secs == 0 {
        bail!("tools.timeout_secs must be at least 1");
    }
    for (name, server) in &mcp.servers {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            bail!("mcp.servers.{name}: names use letters, digits, '_' and '-' only");
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) | (None, None) => {
                bail!("mcp.servers.{name} needs exactly one of command (stdio) or url (HTTP)")
            }
            (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                bail!("mcp.servers.{name}.url must start with http:// or https://, not {url:?}")
            }
            _ => {}
        }
        if server.connect_timeout_secs == 0 {
            bail!("mcp.servers.{name}.connect_timeout_secs must be at least 1");
        }
    }
    Ok(())
}
