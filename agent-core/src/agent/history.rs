//! Stored messages to model messages and back.
//!
//! Assistant tool calls are stored as the JSON array `[{"id", "name", "arguments"}]`, tool
//! results with their `tool_call_id` and `tool_name`; thinking blocks are never stored (they
//! are only valid within the turn that produced them).

use crate::llm::{ChatMessage, ToolCall};
use crate::store::{Message, NewMessage, Role};

/// The model's view of a stored message. System messages are left out (the system prompt is
/// sent separately).
pub fn to_chat(message: &Message) -> Option<ChatMessage> {
    body_to_chat(&message.body)
}

/// [`to_chat`] of a message's body (what a message is before it is stored).
pub fn body_to_chat(body: &NewMessage) -> Option<ChatMessage> {
    if body.role == Role::System {
        return None;
    }
    let tool_calls: Vec<ToolCall> = body
        .tool_calls
        .as_ref()
        .and_then(|calls| serde_json::from_value(calls.clone()).ok())
        .unwrap_or_default();
    Some(ChatMessage {
        role: body.role,
        content: body.content.clone(),
        tool_calls,
        tool_call_id: body.tool_call_id.clone(),
        thinking: Vec::new(),
        images: Vec::new(),
    })
}

/// An assistant answer to store.
pub fn assistant(
    content: &str,
    calls: &[ToolCall],
    finish_reason: Option<String>,
    tokens: Option<u64>,
) -> NewMessage {
    let mut message = NewMessage::text(Role::Assistant, content);
    if content.is_empty() && !calls.is_empty() {
        message.content = None;
    }
    if !calls.is_empty() {
        message.tool_calls = serde_json::to_value(calls).ok();
    }
    message.finish_reason = finish_reason;
    message.token_count = tokens.and_then(|t| i64::try_from(t).ok());
    message
}

/// A tool result to store.
pub fn tool_result(call: &ToolCall, content: &str) -> NewMessage {
    let mut message = NewMessage::text(Role::Tool, content);
    message.tool_call_id = Some(call.id.clone());
    message.tool_name = Some(call.name.clone());
    message
}

/// The model's view back to stored messages (a compressed context becoming a new session's
/// first messages). Tool results get their tool's name from the call they answer.
pub fn to_new(messages: &[ChatMessage]) -> Vec<NewMessage> {
    let names: std::collections::HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    messages
        .iter()
        .map(|m| match m.role {
            Role::Tool => {
                let mut out = NewMessage::text(Role::Tool, m.content.clone().unwrap_or_default());
                out.tool_call_id = m.tool_call_id.clone();
                out.tool_name = m
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| names.get(id))
                    .map(|n| (*n).to_owned());
                out
            }
            Role::Assistant => assistant(
                m.content.as_deref().unwrap_or(""),
                &m.tool_calls,
                None,
                None,
            ),
            role => NewMessage::text(role, m.content.clone().unwrap_or_default()),
        })
        .collect()
}
