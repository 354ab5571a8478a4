//! The Anthropic provider against a fake speaking the Messages API's streaming events: text,
//! tool use from `input_json_delta` fragments, signed thinking blocks, usage with the cache,
//! the request's block structure and `cache_control`, and Anthropic's error shapes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::llm::anthropic::{AnthropicConfig, AnthropicProvider};
use agent_core::llm::{
    ChatMessage, ChatRequest, ErrorClass, FinishReason, ImagePart, StreamEvent, Thinking, ToolCall,
    ToolSchema,
};
use agent_core::store::Role;
use serde_json::json;
use testkit::Reply;
use testkit::anthropic::FakeAnthropic;
use tokio_util::sync::CancellationToken;

fn provider(fake: &FakeAnthropic) -> AnthropicProvider {
    let mut config = AnthropicConfig::new(&fake.base_url, "claude-test");
    config.api_key = Some("sk-ant-test".into());
    config.first_byte_timeout = Duration::from_secs(5);
    config.idle_timeout = Duration::from_secs(5);
    AnthropicProvider::new(config).expect("client")
}

fn request() -> ChatRequest {
    ChatRequest {
        system: Some("be brief".into()),
        messages: vec![ChatMessage::text(Role::User, "hello")],
        tools: vec![ToolSchema {
            name: "clock".into(),
            description: "the time".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }],
        max_tokens: 64,
        temperature: None,
    }
}

fn ignore(_: StreamEvent) {}

#[tokio::test]
async fn streamed_text_usage_and_the_request_shape() {
    let fake = FakeAnthropic::start([Reply::text("Hi there!").chunks(3).usage(120, 7)])
        .await
        .expect("fake");
    let deltas = Arc::new(Mutex::new(String::new()));
    let sink = deltas.clone();
    let on_event = move |e: StreamEvent| {
        if let StreamEvent::TextDelta(t) = e {
            sink.lock().expect("lock").push_str(&t);
        }
    };
    let answer = provider(&fake)
        .complete(&request(), &on_event, &CancellationToken::new())
        .await
        .expect("answer");
    assert_eq!(answer.content, "Hi there!");
    assert_eq!(*deltas.lock().expect("lock"), "Hi there!");
    assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
    let usage = answer.usage.expect("usage");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (120, 7));

    let sent = &fake.requests()[0];
    assert_eq!(sent.authorization.as_deref(), Some("sk-ant-test"));
    let body = &sent.body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["system"][0]["text"], "be brief");
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(body["messages"][0]["content"][0]["text"], "hello");
    assert_eq!(
        body["messages"][0]["content"][0]["cache_control"]["type"], "ephemeral",
        "newest message cached"
    );
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn tool_use_thinking_and_the_loop_history() {
    let fake = FakeAnthropic::start([
        Reply::tool_calls([("clock", r#"{"zone":"UTC"}"#), ("todo", "")])
            .thinking("Let me check the time.", "sig-abc"),
        Reply::text("It is noon."),
    ])
    .await
    .expect("fake");
    let p = provider(&fake);
    let cancel = CancellationToken::new();
    let first = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect("answer");
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.tool_calls,
        vec![
            ToolCall {
                id: "toolu_0".into(),
                name: "clock".into(),
                arguments: r#"{"zone":"UTC"}"#.into()
            },
            ToolCall {
                id: "toolu_1".into(),
                name: "todo".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert_eq!(
        first.thinking,
        vec![Thinking {
            text: "Let me check the time.".into(),
            signature: "sig-abc".into()
        }]
    );

    // The next request carries the thinking block, the tool uses and both results, which
    // travel together in one user message.
    let mut req = request();
    req.messages.push(ChatMessage {
        content: None,
        tool_calls: first.tool_calls.clone(),
        thinking: first.thinking.clone(),
        ..ChatMessage::text(Role::Assistant, "")
    });
    for (id, out) in [("toolu_0", "12:00"), ("toolu_1", "[]")] {
        req.messages.push(ChatMessage {
            tool_call_id: Some(id.into()),
            ..ChatMessage::text(Role::Tool, out)
        });
    }
    let second = p.complete(&req, &ignore, &cancel).await.expect("answer");
    assert_eq!(second.content, "It is noon.");
    let messages = &fake.requests()[1].body["messages"];
    assert_eq!(messages.as_array().map(Vec::len), Some(3), "{messages}");
    let assistant = &messages[1]["content"];
    assert_eq!(
        assistant[0],
        json!({"type": "thinking", "thinking": "Let me check the time.", "signature": "sig-abc"})
    );
    assert_eq!(assistant[1]["type"], "tool_use");
    assert_eq!(assistant[1]["input"], json!({"zone": "UTC"}));
    let results = &messages[2];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["tool_use_id"], "toolu_0");
    assert_eq!(results["content"][1]["tool_use_id"], "toolu_1");
    assert_eq!(results["content"][1]["cache_control"]["type"], "ephemeral");
}

#[tokio::test]
async fn anthropic_errors_are_classified() {
    let fake = FakeAnthropic::start([
        Reply::error(400, r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210123 tokens > 200000 maximum"}}"#),
        Reply::error(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        Reply::error(429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#).retry_after("12"),
        Reply::error(400, r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#),
        Reply::dropped("half"),
    ])
    .await
    .expect("fake");
    let p = provider(&fake);
    let cancel = CancellationToken::new();
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("overflow");
    assert_eq!(
        (err.class, err.context_limit),
        (ErrorClass::ContextOverflow, Some(200_000))
    );
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("overloaded");
    assert_eq!(err.class, ErrorClass::Overloaded);
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("rate");
    assert_eq!(
        (err.class, err.retry_after),
        (ErrorClass::RateLimit, Some(Duration::from_secs(12)))
    );
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("signature");
    assert_eq!(err.class, ErrorClass::ThinkingSignature);
    let err = p
        .complete(&request(), &ignore, &cancel)
        .await
        .expect_err("dropped");
    assert_eq!(err.class, ErrorClass::Transport);
}

#[tokio::test]
async fn both_providers_serve_behind_one_trait() {
    use agent_core::llm::ChatProvider;
    use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
    let anthropic = FakeAnthropic::start([Reply::text("from claude")])
        .await
        .expect("fake");
    let openai = testkit::openai::FakeOpenAi::start([Reply::text("from gpt")])
        .await
        .expect("fake");
    let providers: Vec<Box<dyn ChatProvider>> = vec![
        Box::new(
            OpenAiProvider::new(OpenAiConfig::new(&openai.base_url, "gpt-test")).expect("client"),
        ),
        Box::new(provider(&anthropic)),
    ];
    let cancel = CancellationToken::new();
    let mut answers = Vec::new();
    for p in &providers {
        let answer = p
            .complete(&request(), &ignore, &cancel)
            .await
            .expect("answer");
        answers.push((p.kind(), p.model().to_owned(), answer.content));
    }
    assert_eq!(
        answers,
        vec![
            ("openai", "gpt-test".to_owned(), "from gpt".to_owned()),
            (
                "anthropic",
                "claude-test".to_owned(),
                "from claude".to_owned()
            ),
        ]
    );
}

#[test]
fn images_go_as_base64_blocks_only_to_a_model_that_sees_them() {
    let mut req = request();
    req.messages = vec![ChatMessage {
        images: vec![ImagePart {
            media_type: "image/jpeg".into(),
            data: "/9j/4AAQ".into(),
        }],
        ..ChatMessage::text(Role::User, "what is this?")
    }];
    let mut config = AnthropicConfig::new("http://127.0.0.1:9", "claude-test");
    config.spec.vision = true;
    let body = AnthropicProvider::new(config.clone())
        .expect("client")
        .body(&req);
    let blocks = &body["messages"][0]["content"];
    assert_eq!(
        blocks[0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}})
    );
    assert_eq!(blocks[1]["text"], "what is this?");
    config.spec.vision = false;
    let body = AnthropicProvider::new(config).expect("client").body(&req);
    let blocks = &body["messages"][0]["content"];
    assert_eq!(blocks.as_array().map(Vec::len), Some(1), "{blocks}");
    let text = blocks[0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("[1 image attached, not shown"), "{text}");
    assert!(!body.to_string().contains("/9j/4AAQ"), "no image data");
}
