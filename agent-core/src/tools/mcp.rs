//! Tools from MCP servers (Model Context Protocol), through the official Rust SDK (`rmcp`):
//! stdio servers the daemon launches as child processes, and streamable HTTP servers.
//!
//! Each remote tool becomes a [`Tool`] named `mcp_<server>_<tool>` (so it can never shadow a
//! built-in, and two servers can offer the same tool name). A stdio server gets a clean
//! environment — `PATH`, `HOME`, locale and temp dir, plus what its config names — never the
//! daemon's own secrets; its stderr goes to the log (redacted at the sink). A server that
//! drops its connection is reconnected before the next call; the call that saw the drop is
//! not retried (it may have had effects) and the model is told so.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput};

/// A tool result longer than this is cut (the model is told how much was left out).
pub const MAX_OUTPUT_CHARS: usize = 50_000;
/// Variables a stdio server inherits from the daemon; everything else must be configured.
const INHERITED_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// How to reach one server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Extra variables (secrets already resolved from the daemon's environment).
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        /// Sent as `Authorization: Bearer …`.
        bearer_token: Option<String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// Letters, digits, `_` and `-`; part of every tool name.
    pub name: String,
    pub transport: McpTransport,
    /// Only these remote tools (all when empty).
    pub include: Vec<String>,
    /// For the connection and the handshake.
    pub connect_timeout: Duration,
}

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server}: cannot start {command:?}: {source}")]
    Spawn {
        server: String,
        command: String,
        source: std::io::Error,
    },
    #[error("MCP server {server}: {message}")]
    Protocol { server: String, message: String },
    #[error("MCP server {server}: no answer within {} s", .timeout.as_secs())]
    Timeout { server: String, timeout: Duration },
}

type Client = RunningService<RoleClient, ClientConfig>;

/// A connected server; reconnects when its connection drops.
pub struct McpServer {
    config: McpServerConfig,
    client: RwLock<Arc<Client>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Connects and completes the MCP handshake.
    pub async fn connect(config: McpServerConfig) -> Result<Arc<Self>, McpError> {
        let client = open(&config).await?;
        Ok(Arc::new(Self {
            config,
            client: RwLock::new(Arc::new(client)),
        }))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The server's tools as registry tools (filtered by `include`).
    pub async fn tools(self: &Arc<Self>) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let client = self.client.read().await.clone();
        let listed = tokio::time::timeout(self.config.connect_timeout, client.list_all_tools())
            .await
            .map_err(|_| self.timeout())?
            .map_err(|e| self.protocol(&e))?;
        let include = &self.config.include;
        Ok(listed
            .into_iter()
            .filter(|t| include.is_empty() || include.iter().any(|i| *i == t.name))
            .map(|t| {
                Arc::new(McpTool {
                    server: self.clone(),
                    name: tool_name(&self.config.name, &t.name),
                    remote_name: t.name.to_string(),
                    description: t.description.as_deref().unwrap_or_default().to_owned(),
                    parameters: Value::Object((*t.input_schema).clone()),
                }) as Arc<dyn Tool>
            })
            .collect())
    }

    /// One `tools/call`.
    async fn call(&self, tool: &str, args: Value) -> ToolOutput {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return ToolOutput::error(format!("arguments must be a JSON object, not {other}"));
            }
        };
        let client = self.client.read().await.clone();
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        match client.call_tool(params).await {
            Ok(result) => render(&result),
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                tracing::warn!(server = %self.config.name, error = %e, "MCP server disconnected; reconnecting");
                let reconnected = self.reconnect(&client).await;
                ToolOutput::error(format!(
                    "the MCP server {} disconnected during the call ({e}); {}",
                    self.config.name,
                    if reconnected {
                        "it is connected again — call again if the call is still needed"
                    } else {
                        "it could not be restarted"
                    }
                ))
            }
            Err(e) => ToolOutput::error(format!("MCP server {}: {e}", self.config.name)),
        }
    }

    /// Replaces `broken` with a fresh connection unless another call already did.
    async fn reconnect(&self, broken: &Arc<Client>) -> bool {
        let mut slot = self.client.write().await;
        if !Arc::ptr_eq(&slot, broken) {
            return true;
        }
        match open(&self.config).await {
            Ok(client) => {
                *slot = Arc::new(client);
                true
            }
            Err(error) => {
                tracing::warn!(server = %self.config.name, %error, "MCP reconnect failed");
                false
            }
        }
    }

    fn timeout(&self) -> McpError {
        McpError::Timeout {
            server: self.config.name.clone(),
            timeout: self.config.connect_timeout,
        }
    }

    fn protocol(&self, error: &dyn std::fmt::Display) -> McpError {
        McpError::Protocol {
            server: self.config.name.clone(),
            message: error.to_string(),
        }
    }
}

/// Opens a connection and runs the handshake, within the connect timeout.
async fn open(config: &McpServerConfig) -> Result<Client, McpError> {
    let server = config.name.clone();
    let hello = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("iris", env!("CARGO_PKG_VERSION")),
    );
    let handshake = async {
        match &config.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear().kill_on_drop(true);
                for name in INHERITED_ENV {
                    if let Ok(value) = std::env::var(name) {
                        cmd.env(name, value);
                    }
                }
                cmd.envs(env);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|source| McpError::Spawn {
                        server: server.clone(),
                        command: command.clone(),
                        source,
                    })?;
                if let Some(stderr) = stderr {
                    let name = server.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            tracing::info!(target: "iris::mcp", server = %name, "{line}");
                        }
                    });
                }
                hello
                    .serve(transport)
                    .await
                    .map_err(|e| McpError::Protocol {
                        server: server.clone(),
                        message: e.to_string(),
                    })
            }
            McpTransport::Http { url, bearer_token } => {
                let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = bearer_token {
                    http = http.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::from_config(http);
                hello
                    .serve(transport)
                    .await
                    .map_err(|e| McpError::Protocol {
                        server: server.clone(),
                        message: e.to_string(),
                    })
            }
        }
    };
    tokio::time::timeout(config.connect_timeout, handshake)
        .await
        .map_err(|_| McpError::Timeout {
            server: server.clone(),
            timeout: config.connect_timeout,
        })?
}

/// Connects every server and collects their tools. A server that cannot be reached is logged
/// and left out, so one broken server does not keep the daemon from answering; the error is
/// returned beside the tools for `iris doctor` and the log.
pub async fn connect_all(configs: &[McpServerConfig]) -> (Vec<Arc<dyn Tool>>, Vec<McpError>) {
    let (mut tools, mut errors) = (Vec::new(), Vec::new());
    for config in configs {
        let listed = match McpServer::connect(config.clone()).await {
            Ok(server) => server.tools().await,
            Err(e) => Err(e),
        };
        match listed {
            Ok(found) => {
                tracing::info!(server = %config.name, tools = found.len(), "MCP server connected");
                tools.extend(found);
            }
            Err(error) => {
                tracing::warn!(%error, "MCP server left out");
                errors.push(error);
            }
        }
    }
    (tools, errors)
}

/// `mcp_<server>_<tool>`, limited to the characters and length every provider accepts.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!("mcp_{}_{}", clean(server), clean(tool));
    name.truncate(64);
    name
}

/// A result as the model reads it: text blocks joined, other blocks described, structured
/// content as JSON when there is no text; cut at [`MAX_OUTPUT_CHARS`].
fn render(result: &CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        let Ok(block) = serde_json::to_value(block) else {
            continue;
        };
        let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
        parts.push(match field("type") {
            "text" => field("text").to_owned(),
            "image" | "audio" => format!(
                "[{} {}, {} bytes base64]",
                field("type"),
                field("mimeType"),
                field("data").len()
            ),
            "resource" => {
                let resource = &block["resource"];
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => text.to_owned(),
                    None => format!("[resource {}]", resource["uri"].as_str().unwrap_or("?")),
                }
            }
            "resource_link" => format!("[resource link {}]", field("uri")),
            other => format!("[{other} content]"),
        });
    }
    if let (true, Some(structured)) = (parts.is_empty(), &result.structured_content) {
        parts.push(structured.to_string());
    }
    let mut text = parts.join("\n");
    let total = text.chars().count();
    if total > MAX_OUTPUT_CHARS {
        let cut: String = text.chars().take(MAX_OUTPUT_CHARS).collect();
        text = format!(
            "{cut}\n[output cut: {} of {total} characters left out]",
            total - MAX_OUTPUT_CHARS
        );
    }
    ToolOutput {
        content: text,
        is_error: result.is_error == Some(true),
    }
}

/// One remote tool.
struct McpTool {
    server: Arc<McpServer>,
    name: String,
    remote_name: String,
    description: String,
    parameters: Value,
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn call(
        &self,
        args: Value,
        _ctx: &ToolContext,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        // Dropping the request future on cancel makes rmcp send `notifications/cancelled`.
        tokio::select! {
            () = cancel.cancelled() => ToolOutput::error("cancelled"),
            out = self.server.call(&self.remote_name, args) => out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_prefixed_and_provider_safe() {
        assert_eq!(tool_name("files", "read"), "mcp_files_read");
        assert_eq!(
            tool_name("my server", "get.item/1"),
            "mcp_my_server_get_item_1"
        );
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }
}
