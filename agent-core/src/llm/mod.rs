//! Talking to language models: the request and response shapes the loop uses, whatever the
//! provider, and the providers themselves.
//!
//! # Layout
//! - [`sse`]: incremental Server-Sent Events parsing.
//! - [`openai`]: OpenAI-compatible chat completions (OpenAI, OpenRouter, DeepSeek, vLLM,
//!   llama.cpp, Ollama), streaming and not.
//! - [`anthropic`]: the Anthropic Messages API, streaming.
//! - [`error`]: what went wrong, classified so the loop knows what to do about it.
//! - [`spec`]: a model's context length, output limit and prices.
//! - [`limit`]: the global limit on concurrent model calls.

pub mod anthropic;
pub mod error;
mod http;
pub mod limit;
pub mod openai;
pub mod spec;
pub mod sse;

use serde::{Deserialize, Serialize};

pub use error::{ErrorClass, LlmError};
pub use spec::{ModelSpec, Prices};

/// A model endpoint the loop can call, whatever its wire format. The loop holds an ordered
/// list of these: the main provider, then its fallbacks.
#[async_trait::async_trait]
pub trait ChatProvider: Send + Sync {
    /// `openai` or `anthropic`, for logs and metrics.
    fn kind(&self) -> &'static str;
    /// The model name sent.
    fn model(&self) -> &str;
    /// Its limits and prices.
    fn spec(&self) -> &ModelSpec;
    /// The same endpoint and key asking for another model (`/model`), when the provider
    /// supports that.
    fn with_model(&self, _model: &str) -> Option<std::sync::Arc<dyn ChatProvider>> {
        None
    }
    /// Makes one call. `on_event` sees text deltas and tool starts as they stream; every
    /// wait ends when `cancel` fires.
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<ChatResponse, LlmError>;
}

/// One message of a model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: crate::store::Role,
    pub content: Option<String>,
    /// Assistant messages: the tools it called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Assistant messages of the running turn: the thinking blocks to send back unchanged
    /// (Anthropic requires them, signed, while a tool loop continues). Never stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<Thinking>,
    /// User messages of the running turn: images for a model that sees them (a provider whose
    /// model does not drops them and says so in the text). Never stored: the stored text
    /// carries a note of each image instead (DESIGN.md §4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
}

/// An image sent to the model inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// The image bytes, base64 (standard alphabet, padded).
    pub data: String,
}

impl ImagePart {
    /// The `data:` URL OpenAI-compatible servers take.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

/// `text` as a model that cannot see images gets it: with a note in their place.
pub fn with_image_note(text: Option<&str>, images: usize) -> String {
    let what = if images == 1 { "image" } else { "images" };
    let note = format!("[{images} {what} attached, not shown: this model does not take images]");
    match text.filter(|t| !t.is_empty()) {
        Some(text) => format!("{text}\n{note}"),
        None => note,
    }
}

/// A signed thinking block (Anthropic extended thinking).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinking {
    pub text: String,
    pub signature: String,
}

impl ChatMessage {
    pub fn text(role: crate::store::Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking: Vec::new(),
            images: Vec::new(),
        }
    }
}

/// A tool call as the model made it. `arguments` is the JSON text the model wrote, unparsed:
/// it may be invalid, and the loop decides what to do about that.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// What the loop asks of a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub system: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSchema>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

/// Token counts of one call, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The size of the context sent: the authoritative context size.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, written to the provider's prompt cache (Anthropic).
    pub cache_write_tokens: u64,
    /// Of `completion_tokens`, spent reasoning.
    pub reasoning_tokens: u64,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    Stop,
    /// Cut off by `max_tokens`.
    Length,
    ToolCalls,
    /// Withheld by the provider's moderation.
    ContentFilter,
    Other(String),
}

impl FinishReason {
    /// The stored form (OpenAI's words; a provider's own word is kept as it came).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(text) => text,
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "stop" | "end_turn" | "stop_sequence" => Self::Stop,
            "length" | "max_tokens" => Self::Length,
            "tool_calls" | "tool_use" | "function_call" => Self::ToolCalls,
            "content_filter" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A finished model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
    /// Absent when the provider sent none (then the loop estimates).
    pub usage: Option<Usage>,
    /// Thinking blocks, to resend within the turn.
    pub thinking: Vec<Thinking>,
}

/// What a streaming call reports as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    /// A tool call's name became known (its arguments may still be streaming).
    ToolCallStarted {
        index: usize,
        name: String,
    },
}
