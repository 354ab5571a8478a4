//! The rough size of a request when the provider has not told us the real one: about four
//! characters per token over the system prompt, the messages and the tool schemas, plus a flat
//! amount per image.
//!
//! Only ever a stand-in: the last response's `prompt_tokens` is the authoritative context
//! size, and replaces this as soon as it arrives.

use crate::llm::{ChatMessage, ChatRequest, ToolSchema};

/// Characters per token in the estimate.
pub const CHARS_PER_TOKEN: usize = 4;
/// Tokens counted per image, whatever its size.
pub const TOKENS_PER_IMAGE: u64 = 1_500;
/// Per message: role and framing tokens every provider adds.
const TOKENS_PER_MESSAGE: u64 = 4;

/// Estimated prompt tokens of a whole request.
pub fn request(request: &ChatRequest) -> u64 {
    parts(request.system.as_deref(), &request.messages, &request.tools)
}

/// Estimated prompt tokens of a request made of these parts (no request needs building).
pub fn parts(system: Option<&str>, history: &[ChatMessage], schemas: &[ToolSchema]) -> u64 {
    tokens(system.map_or(0, str::len)) + messages(history) + tools(schemas)
}

/// Estimated tokens of some messages.
pub fn messages(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(message).sum()
}

/// Estimated tokens of one message.
pub fn message(message: &ChatMessage) -> u64 {
    let content = message.content.as_deref().unwrap_or("");
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
        .sum();
    let images = (content.matches("data:image/").count() + message.images.len()) as u64;
    TOKENS_PER_MESSAGE + tokens(content.len() + calls) + images * TOKENS_PER_IMAGE
}

/// Estimated tokens of the tool schemas as sent.
pub fn tools(tools: &[ToolSchema]) -> u64 {
    let chars: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    tokens(chars)
}

fn tokens(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;
    use crate::store::Role;

    #[test]
    fn counts_system_messages_calls_and_schemas() {
        let mut call = ChatMessage::text(Role::Assistant, "");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "clock".into(),
            arguments: "{}".into(),
        });
        let req = ChatRequest {
            system: Some("x".repeat(400)),
            messages: vec![ChatMessage::text(Role::User, "y".repeat(40)), call],
            tools: vec![ToolSchema {
                name: "clock".into(),
                description: "d".repeat(95),
                parameters: serde_json::json!({}),
            }],
            max_tokens: 10,
            temperature: None,
        };
        // 100 (system) + 4 + 10 (user) + 4 + 3 (c1 clock {}: 9 chars) + 25 (5 + 95 + 2 = 102 chars… /4 up)
        assert_eq!(request(&req), 100 + 14 + 7 + 26);
    }

    #[test]
    fn images_count_a_flat_amount() {
        let m = ChatMessage::text(Role::User, "see data:image/png;base64,AAAA");
        assert!(message(&m) >= TOKENS_PER_IMAGE);
        assert!(message(&ChatMessage::text(Role::User, "an image of a cat")) < 10);
    }
}
