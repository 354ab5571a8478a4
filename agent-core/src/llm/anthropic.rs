//! The Anthropic Messages API, streamed.
//!
//! Differences from the OpenAI shape that matter: the system prompt is a separate field;
//! content is a list of blocks (`text`, `tool_use` with parsed JSON `input`, `tool_result`
//! inside a *user* message, `thinking` with a signature); roles must alternate, so consecutive
//! tool results travel in one user message. `cache_control` marks the system prompt and the
//! newest message, so a byte-stable prefix is read from the provider's prompt cache. The
//! context size is `input_tokens` plus the cached tokens read and written.
//!
//! Stream events: `message_start` (input usage), `content_block_start` / `_delta` / `_stop`
//! (`text_delta`, `input_json_delta`, `thinking_delta`, `signature_delta`), `message_delta`
//! (stop reason, output tokens), `message_stop`, `ping`, and `error`.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{bounded, send};
use super::sse::SseParser;
use super::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmError, StreamEvent, Thinking,
    ToolCall, Usage,
};
use crate::store::Role;

/// The API version this client speaks.
const API_VERSION: &str = "2023-06-01";

/// Where and how to reach the Anthropic API.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// e.g. `https://api.anthropic.com`; requests go to `<base_url>/v1/messages`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    /// Context length, output limit, prices.
    pub spec: super::ModelSpec,
}

impl AnthropicConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(60),
            spec: super::ModelSpec::default(),
        }
    }
}

/// A client for the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    client: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig) -> Result<Self, LlmError> {
        let client = super::http::client(config.connect_timeout)?;
        Ok(Self { config, client })
    }

    /// The request body, in the Messages API wire format.
    pub fn body(&self, request: &ChatRequest) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        let vision = self.config.spec.vision;
        for m in &request.messages {
            let (role, blocks) = wire_blocks(m, vision);
            // Tool results are user turns; consecutive ones share one message.
            match messages.last_mut() {
                Some(last) if last["role"] == role && m.role == Role::Tool => {
                    if let Some(content) = last["content"].as_array_mut() {
                        content.extend(blocks);
                    }
                }
                _ => messages.push(json!({"role": role, "content": blocks})),
            }
        }
        if let Some(block) = messages
            .last_mut()
            .and_then(|m| m["content"].as_array_mut())
            .and_then(|blocks| blocks.last_mut())
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": request.max_tokens.min(self.config.spec.max_output_tokens),
            "messages": messages,
            "stream": true,
        });
        if let Some(system) = &request.system {
            body["system"] =
                json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]);
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
        }
        body
    }

    /// Makes one streamed call. `on_event` sees text deltas and tool starts as they arrive.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let url = format!("{}/v1/messages", self.config.base_url.trim_end_matches('/'));
        let mut call = self
            .client
            .post(&url)
            .header("anthropic-version", API_VERSION)
            .json(&self.body(request));
        if let Some(key) = &self.config.api_key {
            call = call.header("x-api-key", key);
        }
        let response = send(
            call,
            cancel,
            self.config.first_byte_timeout,
            self.config.idle_timeout,
        )
        .await?;
        let mut stream = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut answer = Assembler::default();
        loop {
            let (events, closed) =
                match bounded(cancel, self.config.idle_timeout, stream.next()).await? {
                    Some(Ok(bytes)) => (parser.push(&bytes), false),
                    Some(Err(e)) => {
                        return Err(LlmError::transport(format!("stream broke: {e}"), false));
                    }
                    None => (parser.finish().into_iter().collect(), true),
                };
            for data in events {
                if answer.apply(&data, on_event)? {
                    return Ok(answer.finish());
                }
            }
            if closed {
                return Err(LlmError::transport(
                    "the stream ended before message_stop",
                    false,
                ));
            }
        }
    }
}

/// A message as (role, content blocks).
fn wire_blocks(m: &ChatMessage, vision: bool) -> (&'static str, Vec<Value>) {
    match m.role {
        Role::Tool => (
            "user",
            vec![json!({
                "type": "tool_result",
                "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                "content": m.content.clone().unwrap_or_default(),
            })],
        ),
        Role::Assistant => {
            let mut blocks: Vec<Value> = m
                .thinking
                .iter()
                .map(|t| json!({"type": "thinking", "thinking": t.text, "signature": t.signature}))
                .collect();
            if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for call in &m.tool_calls {
                // The model's arguments may be invalid JSON; the API needs an object.
                let input: Value = serde_json::from_str(&call.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}));
                blocks.push(
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
                );
            }
            ("assistant", blocks)
        }
        Role::User | Role::System if m.images.is_empty() => (
            "user",
            vec![json!({"type": "text", "text": m.content.clone().unwrap_or_default()})],
        ),
        Role::User | Role::System if !vision => (
            "user",
            vec![
                json!({"type": "text", "text": super::with_image_note(m.content.as_deref(), m.images.len())}),
            ],
        ),
        Role::User | Role::System => {
            // Images before the text, as Anthropic recommends.
            let mut blocks: Vec<Value> = m
                .images
                .iter()
                .map(|i| json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}}))
                .collect();
            blocks.push(json!({"type": "text", "text": m.content.clone().unwrap_or_default()}));
            ("user", blocks)
        }
    }
}

#[derive(Debug)]
enum Block {
    Text,
    Tool(usize),
    Thinking(usize),
    Other,
}

/// Builds a response from stream events.
#[derive(Debug, Default)]
struct Assembler {
    content: String,
    calls: Vec<ToolCall>,
    thinking: Vec<Thinking>,
    /// By the event's `index`.
    blocks: Vec<Block>,
    finish_reason: Option<FinishReason>,
    usage: Usage,
    saw_usage: bool,
}

impl Assembler {
    /// Applies one event; true at `message_stop`.
    fn apply(
        &mut self,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<bool, LlmError> {
        let event: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::transport(format!("invalid stream event: {e}"), false))?;
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let u = &event["message"]["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                let cache_read = n("cache_read_input_tokens");
                let cache_write = n("cache_creation_input_tokens");
                self.usage.prompt_tokens = n("input_tokens") + cache_read + cache_write;
                self.usage.cache_read_tokens = cache_read;
                self.usage.cache_write_tokens = cache_write;
                self.usage.completion_tokens = n("output_tokens");
                self.saw_usage = u.is_object();
            }
            "content_block_start" => {
                let index = block_index(&event)?;
                let block = &event["content_block"];
                let kind = match block["type"].as_str().unwrap_or_default() {
                    "text" => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            self.content.push_str(text);
                            on_event(StreamEvent::TextDelta(text.to_owned()));
                        }
                        Block::Text
                    }
                    "tool_use" => {
                        let name = block["name"].as_str().unwrap_or_default().to_owned();
                        on_event(StreamEvent::ToolCallStarted {
                            index: self.calls.len(),
                            name: name.clone(),
                        });
                        self.calls.push(ToolCall {
                            id: block["id"].as_str().unwrap_or_default().to_owned(),
                            name,
                            arguments: String::new(),
                        });
                        Block::Tool(self.calls.len() - 1)
                    }
                    "thinking" => {
                        self.thinking.push(Thinking {
                            text: block["thinking"].as_str().unwrap_or_default().to_owned(),
                            signature: block["signature"].as_str().unwrap_or_default().to_owned(),
                        });
                        Block::Thinking(self.thinking.len() - 1)
                    }
                    _ => Block::Other,
                };
                while self.blocks.len() < index {
                    self.blocks.push(Block::Other);
                }
                if self.blocks.len() == index {
                    self.blocks.push(kind);
                } else {
                    self.blocks[index] = kind;
                }
            }
            "content_block_delta" => {
                let index = block_index(&event)?;
                let delta = &event["delta"];
                match (
                    self.blocks.get(index),
                    delta["type"].as_str().unwrap_or_default(),
                ) {
                    (Some(Block::Text), "text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        self.content.push_str(text);
                        on_event(StreamEvent::TextDelta(text.to_owned()));
                    }
                    (Some(Block::Tool(i)), "input_json_delta") => {
                        let i = *i;
                        self.calls[i]
                            .arguments
                            .push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    (Some(Block::Thinking(i)), "thinking_delta") => {
                        let i = *i;
                        self.thinking[i]
                            .text
                            .push_str(delta["thinking"].as_str().unwrap_or_default());
                    }
                    (Some(Block::Thinking(i)), "signature_delta") => {
                        let i = *i;
                        self.thinking[i]
                            .signature
                            .push_str(delta["signature"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.finish_reason = Some(FinishReason::parse(reason));
                }
                if let Some(out) = event["usage"]["output_tokens"].as_u64() {
                    self.usage.completion_tokens = out;
                    self.saw_usage = true;
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let kind = event["error"]["type"].as_str().unwrap_or_default();
                let status = match kind {
                    "overloaded_error" => 529,
                    "rate_limit_error" => 429,
                    "api_error" => 500,
                    "invalid_request_error" => 400,
                    "authentication_error" => 401,
                    "permission_error" => 403,
                    "not_found_error" => 404,
                    "request_too_large" => 413,
                    _ => 500,
                };
                return Err(LlmError::from_http(status, None, data));
            }
            _ => {} // ping and future event types
        }
        Ok(false)
    }

    fn finish(&mut self) -> ChatResponse {
        // A tool call with no input streamed has an empty object as input.
        for call in &mut self.calls {
            if call.arguments.is_empty() {
                call.arguments.push_str("{}");
            }
        }
        ChatResponse {
            content: std::mem::take(&mut self.content),
            tool_calls: std::mem::take(&mut self.calls),
            finish_reason: self.finish_reason.take(),
            usage: self.saw_usage.then_some(self.usage),
            thinking: std::mem::take(&mut self.thinking),
        }
    }
}

fn block_index(event: &Value) -> Result<usize, LlmError> {
    event["index"]
        .as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < 256)
        .ok_or_else(|| LlmError::transport("stream event without a valid block index", false))
}

#[async_trait::async_trait]
impl super::ChatProvider for AnthropicProvider {
    fn kind(&self) -> &'static str {
        "anthropic"
    }

    fn spec(&self) -> &super::ModelSpec {
        &self.config.spec
    }

    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn super::ChatProvider>> {
        let mut config = self.config.clone();
        config.model = model.to_owned();
        Some(std::sync::Arc::new(Self {
            config,
            client: self.client.clone(),
        }))
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        AnthropicProvider::complete(self, request, on_event, cancel).await
    }
}
