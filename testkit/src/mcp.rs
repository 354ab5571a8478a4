//! A small MCP server for the client tests, built on the official Rust SDK (`rmcp`): the same
//! tools over streamable HTTP (in-process, optionally behind a bearer token) and over stdio
//! (the `mcp-fixture` binary, which the daemon launches as a child process).
//!
//! Tools: `add` (a + b), `env` (the value of an environment variable, to show what the child
//! was given), `fail` (an error result), `sleep` (waits, to test timeouts and cancellation),
//! `picture` (an image block), and over stdio only `exit` (the process ends mid-call, to test
//! reconnection).

use std::path::PathBuf;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use tokio_util::sync::CancellationToken;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EnvArgs {
    /// The variable to read.
    name: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    ms: u64,
}

/// The fixture's tools.
#[derive(Debug, Clone)]
pub struct Fixture {
    #[allow(dead_code)] // read by the `tool_handler` expansion
    tool_router: ToolRouter<Self>,
    /// `exit` may end the process (stdio only: in-process it would end the test).
    may_exit: bool,
}

impl Default for Fixture {
    fn default() -> Self {
        Self {
            tool_router: Self::tool_router(),
            may_exit: false,
        }
    }
}

#[tool_router]
impl Fixture {
    #[tool(description = "Adds two integers.")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Reads an environment variable of the server process.")]
    fn env(&self, Parameters(EnvArgs { name }): Parameters<EnvArgs>) -> String {
        std::env::var(&name).unwrap_or_else(|_| "(unset)".into())
    }

    #[tool(description = "Always fails.")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the fixture failed on purpose",
        )]))
    }

    #[tool(description = "Waits this many milliseconds, then says so.")]
    async fn sleep(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        format!("slept {ms} ms")
    }

    #[tool(description = "Ends the server process (stdio only).")]
    fn exit(&self) -> String {
        if self.may_exit {
            std::process::exit(0);
        }
        "exit is only available over stdio".into()
    }

    #[tool(description = "Returns a caption and a tiny PNG.")]
    fn picture(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![
            ContentBlock::text("a red dot"),
            ContentBlock::image("iVBORw0KGgo=", "image/png"),
        ]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// Serves the fixture on stdin/stdout until the client goes away (the binary's main).
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let fixture = Fixture {
        may_exit: true,
        ..Fixture::default()
    };
    let service = fixture
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| e.to_string())?;
    service.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// The fixture over streamable HTTP at `url`; stops when dropped.
pub struct McpHttp {
    pub url: String,
    stop: CancellationToken,
}

impl Drop for McpHttp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl McpHttp {
    /// Starts on a free port; with `token`, every request must carry `Authorization: Bearer
    /// <token>` (401 otherwise).
    pub async fn start(token: Option<&str>) -> std::io::Result<Self> {
        let stop = CancellationToken::new();
        let service: StreamableHttpService<Fixture, LocalSessionManager> =
            StreamableHttpService::new(
                || Ok(Fixture::default()),
                Default::default(),
                StreamableHttpServerConfig::default()
                    .with_sse_keep_alive(None)
                    .with_cancellation_token(stop.child_token()),
            );
        let mut app = axum::Router::new().nest_service("/mcp", service);
        if let Some(token) = token {
            let expected = format!("Bearer {token}");
            app = app.layer(axum::middleware::from_fn(
                move |req: Request, next: Next| {
                    let ok = req
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        == Some(expected.as_str());
                    async move {
                        if ok {
                            next.run(req).await
                        } else {
                            unauthorized()
                        }
                    }
                },
            ));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
                .await;
        });
        Ok(Self {
            url: format!("http://{addr}/mcp"),
            stop,
        })
    }
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response()
}

/// The path of the `mcp-fixture` binary, built on first use when the workspace build did not
/// already produce it (e.g. `cargo test -p agent-core`).
pub fn fixture_binary() -> std::io::Result<PathBuf> {
    // Test executables live in target/<profile>/deps; binaries one level up.
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or_else(|| std::io::Error::other("no target directory above the test binary"))?;
    let path = profile_dir.join(format!("mcp-fixture{}", std::env::consts::EXE_SUFFIX));
    if path.exists() {
        return Ok(path);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "--quiet", "-p", "testkit", "--bin", "mcp-fixture"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    if let Some(target) = profile_dir.parent() {
        build.env("CARGO_TARGET_DIR", target);
    }
    let status = build.status()?;
    if !status.success() || !path.exists() {
        return Err(std::io::Error::other(format!(
            "could not build mcp-fixture ({status}); expected {}",
            path.display()
        )));
    }
    Ok(path)
}
