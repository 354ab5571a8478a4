//! The OpenAI-compatible provider against a fake server speaking the real wire format:
//! streamed text and usage, tool calls assembled from deltas, non-streaming mode, error
//! classes with their provider wording, dropped streams, timeouts and cancellation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{
    ChatMessage, ChatRequest, ErrorClass, FinishReason, ImagePart, StreamEvent, ToolCall,
    ToolSchema,
};
use agent_core::store::Role;
use testkit::openai::{FakeOpenAi, Reply};
use tokio_util::sync::CancellationToken;

fn request() -> ChatRequest {
    ChatRequest {
        system: Some("be brief".into()),
        messages: vec![ChatMessage::text(Role::User, "hello")],
        tools: vec![ToolSchema {
            name: "clock".into(),
            description: "the time".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }],
        max_tokens: 64,
        temperature: Some(0.0),
    }
}

fn provider(fake: &FakeOpenAi, stream: bool) -> OpenAiProvider {
    let mut config = OpenAiConfig::new(&fake.base_url, "fake-model");
    config.api_key = Some("sk-test-key".into());
    config.stream = stream;
    config.first_byte_timeout = Duration::from_secs(5);
    config.idle_timeout = Duration::from_secs(5);
    OpenAiProvider::new(config).expect("client")
}

fn ignore(_: StreamEvent) {}

#[tokio::test]
async fn streamed_text_arrives_in_deltas_with_usage() {
    let fake = FakeOpenAi::start([Reply::text("Hello there, friend").chunks(4).usage(42, 5)])
        .await
        .expect("fake");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let on_event = move |e: StreamEvent| sink.lock().expect("lock").push(e);
    let answer = provider(&fake, true)
        .complete(&request(), &on_event, &CancellationToken::new())
        .await
        .expect("answer");
    assert_eq!(answer.content, "Hello there, friend");
    assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
    let usage = answer.usage.expect("usage");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (42, 5));
    let deltas: Vec<String> = seen
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.clone()),
            StreamEvent::ToolCallStarted { .. } => None,
        })
        .collect();
    assert_eq!(deltas.len(), 4, "{deltas:?}");
    assert_eq!(deltas.concat(), "Hello there, friend");

    let sent = &fake.requests()[0];
    assert_eq!(sent.authorization.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(sent.body["model"], "fake-model");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"]["include_usage"], true);
    assert_eq!(
        sent.body["messages"][0],
        serde_json::json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(sent.body["messages"][1]["content"], "hello");
    assert_eq!(sent.body["tools"][0]["function"]["name"], "clock");
}

#[tokio::test]
async fn tool_calls_are_assembled_from_fragments() {
    let fake = FakeOpenAi::start([Reply::tool_calls([
        ("clock", r#"{"zone":"UTC"}"#),
        ("memory", r#"{"op":"read","file":"MEMORY.md"}"#),
    ])])
    .await
    .expect("fake");
    let started = Arc::new(Mutex::new(Vec::new()));
    let sink = started.clone();
    let on_event = move |e: StreamEvent| {
        if let StreamEvent::ToolCallStarted { name, .. } = e {
            sink.lock().expect("lock").push(name);
        }
    };
    let answer = provider(&fake, true)
        .complete(&request(), &on_event, &CancellationToken::new())
        .await
        .expect("answer");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        answer.tool_calls,
        vec![
            ToolCall {
                id: "call_0".into(),
                name: "clock".into(),
                arguments: r#"{"zone":"UTC"}"#.into()
            },
            ToolCall {
                id: "call_1".into(),
                name: "memory".into(),
                arguments: r#"{"op":"read","file":"MEMORY.md"}"#.into()
            },
        ]
    );
    assert_eq!(*started.lock().expect("lock"), ["clock", "memory"]);
    assert!(answer.usage.is_none(), "no usage sent, none invented");
}

#[tokio::test]
async fn history_with_tool_results_goes_out_in_the_wire_format() {
    let fake = FakeOpenAi::start([Reply::text("It is noon.")])
        .await
        .expect("fake");
    let mut req = request();
    req.messages.push(ChatMessage {
        content: None,
        tool_calls: vec![ToolCall {
            id: "c1".into(),
            name: "clock".into(),
            arguments: "{}".into(),
        }],
        ..ChatMessage::text(Role::Assistant, "")
    });
    req.messages.push(ChatMessage {
        tool_call_id: Some("c1".into()),
        ..ChatMessage::text(Role::Tool, "12:00")
    });
    provider(&fake, true)
        .complete(&req, &ignore, &CancellationToken::new())
        .await
        .expect("answer");
    let messages = &fake.requests()[0].body["messages"];
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "clock");
    assert_eq!(messages[2]["content"], serde_json::Value::Null);
    assert_eq!(
        messages[3],
        serde_json::json!({"role": "tool", "content": "12:00", "tool_call_id": "c1"})
    );
}

#[tokio::test]
async fn non_streaming_mode_reads_the_whole_answer() {
    let fake = FakeOpenAi::start([
        Reply::text("whole answer")
            .usage(10, 2)
            .finish_reason("length"),
        Reply::tool_calls([("clock", "{}")]),
    ])
    .await
    .expect("fake");
    let p = provider(&fake, false);
    let cancel = CancellationToken::new();
    let answer = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect("answer");
    assert_eq!(answer.content, "whole answer");
    assert_eq!(answer.finish_reason, Some(FinishReason::Length));
    assert_eq!(answer.usage.map(|u| u.prompt_tokens), Some(10));
    let calls = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect("answer");
    assert_eq!(calls.tool_calls[0].name, "clock");
    assert_eq!(fake.requests()[0].body["stream"], false);
    assert!(fake.requests()[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn http_errors_are_classified_with_retry_after_and_limits() {
    let llama = r#"{"error":{"code":400,"message":"request (5021 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5021,"n_ctx":4096}}"#;
    let fake = FakeOpenAi::start([
        Reply::error(429, r#"{"error":{"message":"Rate limit reached"}}"#).retry_after("3"),
        Reply::error(400, llama),
        Reply::error(401, r#"{"error":{"message":"Incorrect API key provided"}}"#),
        Reply::error(503, "overloaded"),
    ])
    .await
    .expect("fake");
    let p = provider(&fake, true);
    let cancel = CancellationToken::new();
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("429");
    assert_eq!(
        (err.class, err.status, err.retry_after),
        (
            ErrorClass::RateLimit,
            Some(429),
            Some(Duration::from_secs(3))
        )
    );
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("overflow");
    assert_eq!(
        (err.class, err.context_limit),
        (ErrorClass::ContextOverflow, Some(4096))
    );
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("auth");
    assert_eq!(err.class, ErrorClass::Auth);
    assert_eq!(err.message, "Incorrect API key provided");
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("overloaded");
    assert_eq!(err.class, ErrorClass::Overloaded);
}

#[tokio::test]
async fn a_dropped_stream_is_a_transport_error_not_an_answer() {
    let fake = FakeOpenAi::start([Reply::dropped("half an ans")])
        .await
        .expect("fake");
    let err = provider(&fake, true)
        .complete(&request(), &ignore, &CancellationToken::new())
        .await
        .expect_err("dropped");
    assert_eq!(err.class, ErrorClass::Transport, "{err}");
}

#[tokio::test]
async fn a_hung_call_is_abandoned_on_cancel_and_bounded_by_its_timeout() {
    let fake = FakeOpenAi::start([Reply::hang(), Reply::hang()])
        .await
        .expect("fake");
    let p = provider(&fake, true);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("cancelled");
    assert_eq!(err.class, ErrorClass::Cancelled);
    // Functional bound, not a benchmark: the hang would otherwise last the 5 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "cancel was not honoured promptly"
    );

    let mut config = OpenAiConfig::new(&fake.base_url, "m");
    config.first_byte_timeout = Duration::from_millis(200);
    let err = OpenAiProvider::new(config)
        .expect("client")
        .complete(&request(), &ignore, &CancellationToken::new())
        .await
        .expect_err("timeout");
    assert_eq!(err.class, ErrorClass::Timeout);
}

#[tokio::test]
async fn an_unreachable_server_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    let err = OpenAiProvider::new(config)
        .expect("client")
        .complete(&request(), &ignore, &CancellationToken::new())
        .await
        .expect_err("refused");
    assert_eq!(err.class, ErrorClass::Transport);
}

#[test]
fn images_go_as_image_url_parts_only_to_a_model_that_sees_them() {
    let mut req = request();
    req.messages = vec![ChatMessage {
        images: vec![ImagePart {
            media_type: "image/png".into(),
            data: "iVBORw0K".into(),
        }],
        ..ChatMessage::text(Role::User, "what is this?")
    }];
    let mut config = OpenAiConfig::new("http://127.0.0.1:9", "m");
    config.spec.vision = true;
    let body = OpenAiProvider::new(config.clone())
        .expect("client")
        .body(&req);
    assert_eq!(
        body["messages"][1]["content"],
        serde_json::json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
        ])
    );
    config.spec.vision = false;
    let body = OpenAiProvider::new(config).expect("client").body(&req);
    let text = body["messages"][1]["content"].as_str().expect("plain text");
    assert!(
        text.starts_with("what is this?\n[1 image attached, not shown"),
        "{text}"
    );
    assert!(!body.to_string().contains("iVBORw0K"), "no image data");
}
