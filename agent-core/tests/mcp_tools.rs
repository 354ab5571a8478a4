//! MCP client tools against a real MCP server built on the official SDK (testkit's fixture):
//! over stdio as a child process (clean environment, reconnect after a crash) and over
//! streamable HTTP (bearer token), results rendered for the model, a server that cannot start
//! left out, and a whole turn calling a remote tool.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::agent::retry::RetryPolicy;
use agent_core::agent::{Agent, ConversationState, PromptBuilder, TurnConfig};
use agent_core::llm::ChatProvider;
use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::store::Role;
use agent_core::tools::mcp::{McpError, McpServer, McpServerConfig, McpTransport, connect_all};
use agent_core::tools::{ToolContext, ToolRegistry};
use serde_json::json;
use testkit::Reply;
use testkit::mcp::{McpHttp, fixture_binary};
use testkit::openai::FakeOpenAi;
use tokio_util::sync::CancellationToken;

fn stdio(name: &str, env: &[(&str, &str)]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: fixture_binary()
                .expect("mcp-fixture binary")
                .display()
                .to_string(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            cwd: None,
        },
        include: Vec::new(),
        connect_timeout: Duration::from_secs(20),
    }
}

fn http(url: &str, token: Option<&str>) -> McpServerConfig {
    McpServerConfig {
        name: "web".into(),
        transport: McpTransport::Http {
            url: url.into(),
            bearer_token: token.map(str::to_owned),
        },
        include: Vec::new(),
        connect_timeout: Duration::from_secs(10),
    }
}

fn ctx() -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        conversation_id: 1,
    }
}

async fn registry(server: &Arc<McpServer>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in server.tools().await.expect("tools") {
        registry.register(tool);
    }
    registry
}

async fn call(registry: &ToolRegistry, name: &str, args: serde_json::Value) -> (String, bool) {
    let out = registry
        .call(
            name,
            &args.to_string(),
            &ctx(),
            Duration::from_secs(10),
            &CancellationToken::new(),
        )
        .await;
    (out.content, out.is_error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_tools_are_listed_called_and_rendered() {
    let server = McpServer::connect(stdio("fix", &[("FIXTURE_GREETING", "hello")]))
        .await
        .expect("connect");
    let registry = registry(&server).await;
    let names: Vec<String> = registry.schemas().into_iter().map(|s| s.name).collect();
    for expected in [
        "mcp_fix_add",
        "mcp_fix_env",
        "mcp_fix_fail",
        "mcp_fix_picture",
    ] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let add = registry
        .schemas()
        .into_iter()
        .find(|s| s.name == "mcp_fix_add")
        .expect("add");
    assert_eq!(add.description, "Adds two integers.");
    assert!(
        add.parameters["properties"]["a"].is_object(),
        "{}",
        add.parameters
    );

    assert_eq!(
        call(&registry, "mcp_fix_add", json!({"a": 2, "b": 3})).await,
        ("5".to_owned(), false)
    );
    assert_eq!(
        call(&registry, "mcp_fix_fail", json!({})).await,
        ("the fixture failed on purpose".to_owned(), true)
    );
    assert_eq!(
        call(&registry, "mcp_fix_picture", json!({})).await,
        (
            "a red dot\n[image image/png, 12 bytes base64]".to_owned(),
            false
        )
    );
    let (bad, is_error) = call(&registry, "mcp_fix_add", json!({"a": "two"})).await;
    assert!(is_error, "a schema violation is an error result: {bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_a_clean_environment() {
    // Set by cargo and nextest for every test process: stands in for the daemon's secrets.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let server = McpServer::connect(stdio("fix", &[("FIXTURE_GREETING", "hello")]))
        .await
        .expect("connect");
    let registry = registry(&server).await;
    let env = |name: &str| call(&registry, "mcp_fix_env", json!({ "name": name }));
    assert_eq!(env("FIXTURE_GREETING").await.0, "hello");
    assert_eq!(env("CARGO_MANIFEST_DIR").await.0, "(unset)");
    assert_eq!(
        env("PATH").await.0,
        std::env::var("PATH").unwrap_or_else(|_| "(unset)".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_stdio_server_is_restarted_for_the_next_call() {
    let server = McpServer::connect(stdio("fix", &[]))
        .await
        .expect("connect");
    let registry = registry(&server).await;
    let (said, is_error) = call(&registry, "mcp_fix_exit", json!({})).await;
    assert!(is_error, "{said}");
    assert!(
        said.contains("disconnected") && said.contains("connected again"),
        "{said}"
    );
    assert_eq!(
        call(&registry, "mcp_fix_add", json!({"a": 1, "b": 1})).await,
        ("2".to_owned(), false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_calls_are_bounded_by_the_tool_timeout_and_cancel() {
    let server = McpServer::connect(stdio("fix", &[]))
        .await
        .expect("connect");
    let registry = registry(&server).await;
    let out = registry
        .call(
            "mcp_fix_sleep",
            r#"{"ms": 10000}"#,
            &ctx(),
            Duration::from_millis(300),
            &CancellationToken::new(),
        )
        .await;
    assert!(
        out.is_error && out.content.contains("did not finish"),
        "{out:?}"
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let out = registry
        .call(
            "mcp_fix_sleep",
            r#"{"ms": 10000}"#,
            &ctx(),
            Duration::from_secs(30),
            &cancel,
        )
        .await;
    assert_eq!(out.content, "cancelled");
    // The server is still usable afterwards.
    assert_eq!(
        call(&registry, "mcp_fix_add", json!({"a": 20, "b": 22})).await,
        ("42".to_owned(), false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_servers_need_their_bearer_token() {
    let web = McpHttp::start(Some("s3cret-token")).await.expect("server");
    let server = McpServer::connect(http(&web.url, Some("s3cret-token")))
        .await
        .expect("connect with the token");
    let registry = registry(&server).await;
    assert_eq!(
        call(&registry, "mcp_web_add", json!({"a": 40, "b": 2})).await,
        ("42".to_owned(), false)
    );
    let refused = McpServer::connect(http(&web.url, None)).await;
    assert!(
        matches!(refused, Err(McpError::Protocol { .. })),
        "{refused:?}"
    );
    let mut only_add = http(&web.url, Some("s3cret-token"));
    only_add.include = vec!["add".into()];
    let server = McpServer::connect(only_add).await.expect("connect");
    let names: Vec<String> = server
        .tools()
        .await
        .expect("tools")
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    assert_eq!(names, ["mcp_web_add"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_left_out_with_its_error() {
    let mut broken = stdio("broken", &[]);
    broken.transport = McpTransport::Stdio {
        command: "/nonexistent/mcp-server".into(),
        args: Vec::new(),
        env: BTreeMap::new(),
        cwd: None,
    };
    let (tools, errors) = connect_all(&[broken, stdio("fix", &[])]).await;
    assert!(tools.iter().any(|t| t.name() == "mcp_fix_add"));
    assert!(tools.iter().all(|t| !t.name().starts_with("mcp_broken")));
    assert_eq!(errors.len(), 1);
    let text = errors[0].to_string();
    assert!(
        text.contains("broken") && text.contains("/nonexistent/mcp-server"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_calls_a_remote_tool_and_answers_from_its_result() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("mcp_fix_add", r#"{"a": 19, "b": 23}"#)]),
        Reply::text("19 + 23 = 42"),
    ])
    .await
    .expect("fake");
    let fresh = common::fresh_session("api:mcp").await;
    let store = fresh.store.clone();
    let (tools, errors) = connect_all(&[stdio("fix", &[])]).await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool);
    }
    let mut config = OpenAiConfig::new(&fake.base_url, "main");
    config.first_byte_timeout = Duration::from_secs(10);
    let provider: Arc<dyn ChatProvider> = Arc::new(OpenAiProvider::new(config).expect("client"));
    let agent = Agent {
        providers: vec![provider],
        tools: registry,
        store: store.clone(),
        prompt: PromptBuilder::new("You add numbers."),
        compressor: None,
        todo: None,
        config: TurnConfig {
            retry: RetryPolicy {
                backoff_base: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
            ..TurnConfig::default()
        },
    };
    let mut state = ConversationState::new(fresh.conversation_id, fresh.session_id.clone());
    let outcome = agent
        .run_turn(
            &mut state,
            "What is 19 + 23?",
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    assert_eq!(outcome.text, "19 + 23 = 42");
    let stored = store.messages(&fresh.session_id).await.expect("messages");
    let result = stored
        .iter()
        .find(|m| m.body.role == Role::Tool)
        .expect("tool result");
    assert_eq!(result.body.tool_name.as_deref(), Some("mcp_fix_add"));
    assert_eq!(result.body.content.as_deref(), Some("42"));
    let offered = fake.requests()[0].body["tools"].clone();
    assert!(
        offered
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "mcp_fix_add")),
        "{offered}"
    );
}
