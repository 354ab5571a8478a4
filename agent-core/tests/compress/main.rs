//! Context compression's rules, one transcript shape at a time (exact structure expected),
//! properties over random transcripts (proptest), and the summariser chain: fallback to the
//! main model, cooldown, the honest fallback digest, redaction before and after.
//!
//! - [`shapes`]: the table of transcripts.
//! - [`lineage`]: five compressions through the loop.
//! - [`properties`]: random transcripts.
//! - [`summariser`]: the summary calls.

#[path = "../common/mod.rs"]
mod common;
mod lineage;
mod properties;
mod shapes;
mod summariser;

use std::sync::{Arc, Mutex};

use agent_core::compress::{CompressionSettings, Compressor};
use agent_core::llm::{
    ChatMessage, ChatProvider, ChatRequest, ChatResponse, ErrorClass, FinishReason, LlmError,
    ModelSpec, StreamEvent, ToolCall,
};
use agent_core::redact::Redactor;
use agent_core::store::Role;
use tokio_util::sync::CancellationToken;

/// How a [`Model`] answers a request.
pub(crate) type Answer = Box<dyn Fn(&ChatRequest) -> Result<String, LlmError> + Send + Sync>;

/// An in-process model: answers every request with `reply` (or fails with `error`), and
/// records what it was asked.
pub(crate) struct Model {
    pub name: &'static str,
    pub reply: Answer,
    pub requests: Mutex<Vec<ChatRequest>>,
    pub spec: ModelSpec,
}

impl Model {
    pub(crate) fn answering(name: &'static str, text: &str) -> Arc<Self> {
        let text = text.to_owned();
        Self::with(name, move |_| Ok(text.clone()))
    }

    pub(crate) fn failing(name: &'static str, class: ErrorClass) -> Arc<Self> {
        Self::with(name, move |_| {
            let mut e = LlmError::transport(format!("{name} is down"), false);
            e.class = class;
            Err(e)
        })
    }

    pub(crate) fn with(
        name: &'static str,
        reply: impl Fn(&ChatRequest) -> Result<String, LlmError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            reply: Box::new(reply),
            requests: Mutex::new(Vec::new()),
            spec: ModelSpec::default(),
        })
    }

    pub(crate) fn asked(&self) -> Vec<ChatRequest> {
        self.requests.lock().expect("lock").clone()
    }
}

#[async_trait::async_trait]
impl ChatProvider for Model {
    fn kind(&self) -> &'static str {
        "openai"
    }
    fn model(&self) -> &str {
        self.name
    }
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
    async fn complete(
        &self,
        request: &ChatRequest,
        _on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        self.requests.lock().expect("lock").push(request.clone());
        (self.reply)(request).map(|content| ChatResponse {
            content,
            tool_calls: Vec::new(),
            finish_reason: Some(FinishReason::Stop),
            usage: None,
            thinking: Vec::new(),
        })
    }
}

/// Settings where the tail budget is `tail` tokens (context 10 000, threshold 5 000).
pub(crate) fn settings(protect_first_n: usize, tail: u64) -> CompressionSettings {
    CompressionSettings {
        enabled: true,
        threshold_percent: 0.5,
        min_threshold_tokens: 0,
        protect_first_n,
        summary_target_ratio: tail as f64 / 5_000.0,
    }
}

pub(crate) const CONTEXT: u64 = 10_000;

pub(crate) fn compressor(settings: CompressionSettings, main: Arc<Model>) -> Compressor {
    Compressor::new(settings, None, main, Arc::new(Redactor::default()))
}

pub(crate) fn u(text: &str) -> ChatMessage {
    ChatMessage::text(Role::User, text)
}

pub(crate) fn a(text: &str) -> ChatMessage {
    ChatMessage::text(Role::Assistant, text)
}

/// An assistant message calling `calls` (id, name, arguments).
pub(crate) fn calls(list: &[(&str, &str, &str)]) -> ChatMessage {
    ChatMessage {
        content: None,
        tool_calls: list
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*args).into(),
            })
            .collect(),
        ..a("")
    }
}

pub(crate) fn tool(id: &str, content: &str) -> ChatMessage {
    ChatMessage {
        tool_call_id: Some(id.into()),
        ..ChatMessage::text(Role::Tool, content)
    }
}

/// Roles of a list, summary messages shown as `S`.
pub(crate) fn shape(messages: &[ChatMessage]) -> String {
    messages
        .iter()
        .map(|m| {
            let summary = m
                .content
                .as_deref()
                .is_some_and(|c| c.contains("[CONTEXT SUMMARY]"));
            match (m.role, summary) {
                (Role::User, true) => "uS",
                (Role::Assistant, true) if !m.tool_calls.is_empty() => "cS",
                (Role::Assistant, true) => "aS",
                (Role::User, false) => "u",
                (Role::Assistant, false) if !m.tool_calls.is_empty() => "c",
                (Role::Assistant, false) => "a",
                (Role::Tool, _) => "t",
                (Role::System, _) => "s",
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn long(n: usize) -> String {
    "lorem ipsum ".repeat(n / 12 + 1)[..n].to_owned()
}
