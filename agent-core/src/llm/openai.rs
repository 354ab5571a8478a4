//! OpenAI-compatible chat completions: OpenAI, OpenRouter, DeepSeek, vLLM, llama.cpp, Ollama.
//!
//! Streaming by default (`stream_options.include_usage` so the context size is known), parsed
//! incrementally: text deltas are reported as they arrive, tool-call deltas are assembled by
//! their `index` (the first fragment carries id and name, later ones only argument pieces), and
//! the usage chunk (`"choices": []`) is read at the end. Every wait — the first byte, each
//! chunk — is bounded by a timeout and abandoned at once when the turn is cancelled.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{bounded, send};
use super::sse::SseParser;
use super::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmError, StreamEvent, ToolCall, Usage,
};
use crate::store::Role;

/// Where and how to reach one OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1`; requests go to `<base_url>/chat/completions`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set (local servers need none).
    pub api_key: Option<String>,
    /// Stream the answer (default) or wait for it whole.
    pub stream: bool,
    pub connect_timeout: Duration,
    /// Until the response headers arrive.
    pub first_byte_timeout: Duration,
    /// Between two chunks of a streamed answer.
    pub idle_timeout: Duration,
    /// Context length, output limit, prices.
    pub spec: super::ModelSpec,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            stream: true,
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(60),
            spec: super::ModelSpec::default(),
        }
    }
}

/// A client for one OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: reqwest::Client,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        let client = super::http::client(config.connect_timeout)?;
        Ok(Self { config, client })
    }

    /// The request body, in the OpenAI wire format.
    pub fn body(&self, request: &ChatRequest) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if let Some(system) = &request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        let vision = self.config.spec.vision;
        messages.extend(request.messages.iter().map(|m| wire_message(m, vision)));
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "max_tokens": request.max_tokens.min(self.config.spec.max_output_tokens),
            "stream": self.config.stream,
        });
        if self.config.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
        }
        body
    }

    /// Makes one call. `on_event` sees text deltas and tool starts as they stream.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut call = self.client.post(&url).json(&self.body(request));
        if let Some(key) = &self.config.api_key {
            call = call.bearer_auth(key);
        }
        let response = send(
            call,
            cancel,
            self.config.first_byte_timeout,
            self.config.idle_timeout,
        )
        .await?;
        if !self.config.stream {
            let body = bounded(cancel, self.config.idle_timeout, response.text())
                .await?
                .map_err(|e| LlmError::transport(e.to_string(), e.is_timeout()))?;
            return parse_whole(&body);
        }
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
                if data.trim() == "[DONE]" {
                    return answer.finish();
                }
                answer.apply(&data, on_event)?;
            }
            if closed {
                // Some servers close without `[DONE]`; an answer without a finish reason,
                // though, was cut off.
                if answer.finish_reason.is_none() {
                    return Err(LlmError::transport(
                        "the stream ended before the answer did",
                        false,
                    ));
                }
                return answer.finish();
            }
        }
    }
}

/// One message in the wire format; a user message's images become `image_url` parts when the
/// model sees images, and a note in the text when it does not.
fn wire_message(m: &ChatMessage, vision: bool) -> Value {
    let content = match (&m.content, m.images.is_empty(), vision) {
        (content, true, _) => json!(content),
        (content, false, true) => {
            let mut parts = vec![json!({"type": "text", "text": content.as_deref().unwrap_or("")})];
            parts.extend(
                m.images
                    .iter()
                    .map(|i| json!({"type": "image_url", "image_url": {"url": i.data_url()}})),
            );
            Value::Array(parts)
        }
        (content, false, false) => {
            json!(super::with_image_note(content.as_deref(), m.images.len()))
        }
    };
    let mut out = json!({"role": m.role.as_str(), "content": content});
    if m.role == Role::Assistant && !m.tool_calls.is_empty() {
        out["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    out
}

fn usage_from(value: &Value) -> Option<Usage> {
    let u = value.get("usage").filter(|u| u.is_object())?;
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        prompt_tokens: n("/prompt_tokens"),
        completion_tokens: n("/completion_tokens"),
        cache_read_tokens: n("/prompt_tokens_details/cached_tokens"),
        cache_write_tokens: 0,
        reasoning_tokens: n("/completion_tokens_details/reasoning_tokens"),
    })
}

/// An error object inside a 200 response (some servers report failures mid-stream).
fn embedded_error(value: &Value) -> Option<LlmError> {
    let error = value.get("error")?;
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(500);
    Some(LlmError::from_http(status, None, &value.to_string()))
}

fn parse_whole(body: &str) -> Result<ChatResponse, LlmError> {
    let value: Value = serde_json::from_str(body).map_err(|e| {
        LlmError::transport(format!("invalid JSON from the model server: {e}"), false)
    })?;
    if let Some(err) = embedded_error(&value) {
        return Err(err);
    }
    let choice = value.pointer("/choices/0").cloned().unwrap_or(Value::Null);
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_owned(),
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: c
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatResponse {
        content: message["content"].as_str().unwrap_or_default().to_owned(),
        tool_calls,
        finish_reason: choice["finish_reason"].as_str().map(FinishReason::parse),
        usage: usage_from(&value),
        thinking: Vec::new(),
    })
}

/// Builds a response from stream chunks.
#[derive(Debug, Default)]
struct Assembler {
    content: String,
    /// By the delta's `index`.
    calls: Vec<ToolCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
}

impl Assembler {
    fn apply(
        &mut self,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<(), LlmError> {
        let value: Value = serde_json::from_str(data)
            .map_err(|e| LlmError::transport(format!("invalid stream chunk: {e}"), false))?;
        if let Some(err) = embedded_error(&value) {
            return Err(err);
        }
        if let Some(usage) = usage_from(&value) {
            self.usage = Some(usage);
        }
        let Some(choice) = value.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(FinishReason::parse(reason));
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.content.push_str(text);
            on_event(StreamEvent::TextDelta(text.to_owned()));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"]
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.calls.len());
            if index >= 64 {
                return Err(LlmError::transport(
                    format!("tool call index {index} out of range"),
                    false,
                ));
            }
            while self.calls.len() <= index {
                self.calls.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call["id"].as_str() {
                slot.id = id.to_owned();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                let started = slot.name.is_empty();
                slot.name.push_str(name);
                if started {
                    on_event(StreamEvent::ToolCallStarted {
                        index,
                        name: slot.name.clone(),
                    });
                }
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(args);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ChatResponse, LlmError> {
        let calls: Vec<ToolCall> = std::mem::take(&mut self.calls)
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .collect();
        if self.finish_reason.is_none() && self.content.is_empty() && calls.is_empty() {
            return Err(LlmError::transport(
                "the stream ended before any answer",
                false,
            ));
        }
        Ok(ChatResponse {
            content: std::mem::take(&mut self.content),
            tool_calls: calls,
            finish_reason: self.finish_reason.take(),
            usage: self.usage,
            thinking: Vec::new(),
        })
    }
}

#[async_trait::async_trait]
impl super::ChatProvider for OpenAiProvider {
    fn kind(&self) -> &'static str {
        "openai"
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
        OpenAiProvider::complete(self, request, on_event, cancel).await
    }
}
