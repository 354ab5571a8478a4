//! The OpenAI-compatible provider against a real llama.cpp server running the tiny SmolLM2
//! model: real SSE framing, real usage, and llama.cpp's real context-overflow error.
//!
//! The server and model come from `IRIS_LLAMA_SERVER` / `IRIS_LLAMA_MODEL`
//! (scripts/llm-install.sh; scripts/test.sh sets them when installed). Without them the tests
//! say they are skipped, unless `IRIS_TEST_REQUIRE_LLAMA=true` (CI), where that fails.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{ChatMessage, ChatRequest, ErrorClass, FinishReason, StreamEvent};
use agent_core::store::Role;
use tokio_util::sync::CancellationToken;

/// A llama-server child process, killed on drop.
struct Llama {
    child: Child,
    base_url: String,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn llama(context: u32) -> Option<Llama> {
    llama_with(context, &[]).await
}

/// The tools-aware ChatML template (llama.cpp's `--jinja` mode then parses tool calls).
fn tools_template() -> String {
    format!(
        "{}/../testkit/templates/chatml-tools.jinja",
        env!("CARGO_MANIFEST_DIR")
    )
}

async fn llama_with(context: u32, extra: &[&str]) -> Option<Llama> {
    let (Ok(server), Ok(model)) = (
        std::env::var("IRIS_LLAMA_SERVER"),
        std::env::var("IRIS_LLAMA_MODEL"),
    ) else {
        let required = std::env::var("IRIS_TEST_REQUIRE_LLAMA").is_ok_and(|v| v == "true");
        assert!(
            !required,
            "IRIS_LLAMA_SERVER/IRIS_LLAMA_MODEL unset but the real model server is required (CI)"
        );
        eprintln!("SKIPPED: llama.cpp tests (run scripts/llm-install.sh, then scripts/test.sh)");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new(server)
        .args([
            "-m",
            &model,
            "--alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-c",
            &context.to_string(),
            "-np",
            "1",
            "-n",
            "64",
            "-t",
            "2",
            "--no-ui",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llama-server");
    let llama = Llama {
        child,
        base_url: format!("http://127.0.0.1:{port}/v1"),
    };
    let health = format!("http://127.0.0.1:{port}/health");
    for _ in 0..120 {
        if let Ok(r) = reqwest::get(&health).await
            && r.status().is_success()
        {
            return Some(llama);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("llama-server did not become healthy in 30 s");
}

fn provider(llama: &Llama) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig::new(&llama.base_url, "smollm2")).expect("client")
}

fn ask(text: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        system: Some("You are a helpful assistant.".into()),
        messages: vec![ChatMessage::text(Role::User, text)],
        tools: Vec::new(),
        max_tokens,
        temperature: Some(0.0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_with_usage() {
    let Some(llama) = llama(2048).await else {
        return;
    };
    let deltas = std::sync::atomic::AtomicUsize::new(0);
    let on_event = |e: StreamEvent| {
        if let StreamEvent::TextDelta(_) = e {
            deltas.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let answer = provider(&llama)
        .complete(
            &ask("Name three colours.", 24),
            &on_event,
            &CancellationToken::new(),
        )
        .await
        .expect("answer");
    assert!(!answer.content.trim().is_empty(), "empty answer");
    assert!(
        matches!(
            answer.finish_reason,
            Some(FinishReason::Stop | FinishReason::Length)
        ),
        "{answer:?}"
    );
    let usage = answer.usage.expect("llama.cpp reports usage when asked");
    assert!(
        usage.prompt_tokens > 5 && usage.completion_tokens > 0,
        "{usage:?}"
    );
    assert!(
        deltas.load(std::sync::atomic::Ordering::Relaxed) > 1,
        "the answer streamed in pieces"
    );

    // The same server, not streamed, at temperature 0, says the same thing.
    let mut config = OpenAiConfig::new(&llama.base_url, "smollm2");
    config.stream = false;
    let whole = OpenAiProvider::new(config)
        .expect("client")
        .complete(
            &ask("Name three colours.", 24),
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("answer");
    assert_eq!(whole.content, answer.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_context_is_a_context_overflow_with_the_real_limit() {
    let Some(llama) = llama(512).await else {
        return;
    };
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(120);
    let err = provider(&llama)
        .complete(&ask(&long, 16), &|_| {}, &CancellationToken::new())
        .await
        .expect_err("must overflow");
    assert_eq!(err.class, ErrorClass::ContextOverflow, "{err}");
    assert_eq!(err.status, Some(400));
    assert_eq!(err.context_limit, Some(512));
}

/// A tool that always answers the same, so the model's last words can be checked.
struct FixedClock;

#[async_trait::async_trait]
impl agent_core::tools::Tool for FixedClock {
    fn name(&self) -> &str {
        "clock"
    }
    fn description(&self) -> &str {
        "Get the current time"
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &agent_core::tools::ToolContext,
        _cancel: &CancellationToken,
    ) -> agent_core::tools::ToolOutput {
        agent_core::tools::ToolOutput::ok("11:30")
    }
}

/// A whole turn through the loop against the real server: the model calls the tool (parsed
/// from its `<tool_call>` text by llama.cpp, streamed as tool-call deltas), the loop runs it,
/// and the model answers from the result. The 135M model calls tools reliably only after one
/// example exchange, which the session is seeded with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_round_trip_through_the_loop() {
    use std::sync::Arc;

    use agent_core::agent::{Agent, ConversationState, PromptBuilder, TurnConfig};
    use agent_core::store::NewMessage;
    use agent_core::tools::ToolRegistry;

    let template = tools_template();
    let Some(llama) = llama_with(2048, &["--jinja", "--chat-template-file", &template]).await
    else {
        return;
    };
    let fresh = common::fresh_session("api:llama").await;
    let (store, session_id) = (fresh.store.clone(), fresh.session_id.clone());
    let mut call = NewMessage::text(Role::Assistant, "");
    call.content = None;
    call.tool_calls = Some(serde_json::json!([{"id": "a1", "name": "clock", "arguments": "{}"}]));
    let mut result = NewMessage::text(Role::Tool, "09:15");
    result.tool_call_id = Some("a1".into());
    result.tool_name = Some("clock".into());
    store
        .append_messages(
            &session_id,
            &[
                NewMessage::text(Role::User, "Use the clock tool."),
                call,
                result,
                NewMessage::text(Role::Assistant, "It is 09:15."),
            ],
        )
        .await
        .expect("seed");
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(FixedClock));
    let agent = Agent {
        providers: vec![Arc::new(provider(&llama))],
        tools,
        store: store.clone(),
        prompt: PromptBuilder::new("You are a helpful assistant."),
        compressor: None,
        todo: None,
        config: TurnConfig {
            max_iterations: 3,
            max_tokens: 64,
            temperature: Some(0.0),
            ..TurnConfig::default()
        },
    };
    let mut state = ConversationState::new(fresh.conversation_id, session_id.clone());
    let outcome = agent
        .run_turn(
            &mut state,
            "Use the clock tool.",
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("turn");
    let stored = store.messages(&session_id).await.expect("messages");
    let new: Vec<_> = stored[4..]
        .iter()
        .map(|m| {
            (
                m.body.role,
                m.body.tool_name.clone(),
                m.body.content.clone(),
            )
        })
        .collect();
    assert!(new.len() >= 4, "user, tool call, result, answer: {new:?}");
    assert_eq!(
        new[2],
        (
            Role::Tool,
            Some("clock".to_owned()),
            Some("11:30".to_owned())
        ),
        "{new:?}"
    );
    assert!(
        stored[5].body.tool_calls.is_some(),
        "the model's call was parsed into tool_calls"
    );
    assert!(
        outcome.text.contains("11:30"),
        "the answer uses the tool's result: {:?}",
        outcome.text
    );
}

/// Context-overflow recovery through the loop against the real server: the session no longer
/// fits llama.cpp's 512-token window, the server refuses with its own error, and the loop
/// lowers the window to the parsed `n_ctx`, compresses (the summary request itself does not
/// fit, so the honest fallback digest stands in), moves to the new session and retries; the
/// model then answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_is_compressed_and_retried_through_the_loop() {
    use std::sync::{Arc, Mutex};

    use agent_core::agent::{Agent, ConversationState, PromptBuilder, TurnConfig, TurnEvent};
    use agent_core::compress::{CompressionSettings, Compressor};
    use agent_core::llm::ChatProvider;
    use agent_core::redact::Redactor;
    use agent_core::store::NewMessage;
    use agent_core::tools::ToolRegistry;

    let Some(llama) = llama(512).await else {
        return;
    };
    let fresh = common::fresh_session("api:llama-overflow").await;
    let (store, session_id) = (fresh.store.clone(), fresh.session_id.clone());
    let story =
        "The lighthouse keeper counted the ships every night and wrote their names in a book. "
            .repeat(18);
    store
        .append_messages(
            &session_id,
            &[
                NewMessage::text(Role::User, "Hi."),
                NewMessage::text(Role::Assistant, "Hello."),
                NewMessage::text(Role::User, "Tell me a story."),
                NewMessage::text(Role::Assistant, story.clone()),
                NewMessage::text(Role::User, "Another one."),
                NewMessage::text(Role::Assistant, story),
                NewMessage::text(Role::User, "Thanks."),
                NewMessage::text(Role::Assistant, "You are welcome."),
            ],
        )
        .await
        .expect("seed");
    let main: Arc<dyn ChatProvider> = Arc::new(provider(&llama));
    let agent = Agent {
        providers: vec![main.clone()],
        tools: ToolRegistry::new(),
        store: store.clone(),
        prompt: PromptBuilder::new("You are a helpful assistant."),
        compressor: Some(Arc::new(Compressor::new(
            CompressionSettings::default(),
            None,
            main,
            Arc::new(Redactor::default()),
        ))),
        todo: None,
        config: TurnConfig {
            max_tokens: 32,
            temperature: Some(0.0),
            memory_flush: false,
            ..TurnConfig::default()
        },
    };
    let mut state = ConversationState::new(fresh.conversation_id, session_id.clone());
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let on_event = move |e: TurnEvent| {
        if let TurnEvent::Compressed(r) = e {
            sink.lock().expect("lock").push(r);
        }
    };
    let outcome = agent
        .run_turn(
            &mut state,
            "Say hello.",
            &on_event,
            &CancellationToken::new(),
        )
        .await
        .expect("the turn recovers");
    assert!(!outcome.text.trim().is_empty(), "{outcome:?}");
    assert!(outcome.compressions >= 1);
    assert_eq!(
        state.context.context_length,
        Some(512),
        "lowered to llama.cpp's n_ctx"
    );
    let first = reports.lock().expect("lock")[0].clone();
    assert!(first.fallback, "the summary did not fit either: {first:?}");
    assert_ne!(state.session_id, session_id);
    let new = store
        .session(&state.session_id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(new.parent_session_id.as_deref(), Some(session_id.as_str()));
    assert!(
        !outcome.context_estimated && outcome.context_tokens < 512,
        "the real prompt now fits: {outcome:?}"
    );
}
