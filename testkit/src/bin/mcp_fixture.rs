//! The test MCP server over stdio (see `testkit::mcp`), launched by the MCP client tests as a
//! child process, as the daemon launches configured stdio servers.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(error) = testkit::mcp::serve_stdio().await {
        eprintln!("mcp-fixture: {error}");
        std::process::exit(1);
    }
}
