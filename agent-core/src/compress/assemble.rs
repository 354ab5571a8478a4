//! Phase 4: head + one summary message + tail, then the tool pairs made whole.
//!
//! The summary's role keeps user/assistant alternation with both neighbours (a tool result
//! counts as the user side, as Anthropic sends it); when both neighbours block it, the summary
//! is merged into the first tail message. Afterwards a tool result whose call is gone is
//! dropped, and a call whose result is gone gets [`STUB_RESULT`].

use std::collections::HashSet;

use super::{END_MARKER, SUMMARY_PREFIX};
use crate::llm::ChatMessage;
use crate::store::Role;

pub const STUB_RESULT: &str = "[Result from earlier conversation — see context summary above]";

/// The side of the user/assistant alternation a message sits on.
fn side(role: Role) -> Role {
    match role {
        Role::Assistant => Role::Assistant,
        _ => Role::User,
    }
}

/// The summary message's full text.
pub fn summary_text(summary: &str) -> String {
    format!("{SUMMARY_PREFIX}\n\n{}\n\n{END_MARKER}", summary.trim())
}

/// Joins `head`, the summary and `tail`; see the module docs.
pub fn assemble(head: &[ChatMessage], summary: &str, tail: &[ChatMessage]) -> Vec<ChatMessage> {
    let text = summary_text(summary);
    // The list must open on the user side, as if an assistant came before it.
    let before = Some(head.last().map_or(Role::Assistant, |m| side(m.role)));
    let after = tail.first().map(|m| side(m.role));
    let role = [Role::User, Role::Assistant]
        .into_iter()
        .find(|r| Some(*r) != before && Some(*r) != after);
    let mut out = Vec::with_capacity(head.len() + tail.len() + 1);
    out.extend_from_slice(head);
    match role {
        Some(role) => {
            out.push(ChatMessage::text(role, text));
            out.extend_from_slice(tail);
        }
        None => {
            // Both neighbours block: the first tail message carries the summary.
            let mut rest = tail.iter();
            if let Some(first) = rest.next() {
                let mut merged = first.clone();
                let original = merged.content.take().unwrap_or_default();
                merged.content = Some(if original.is_empty() {
                    text
                } else {
                    format!("{text}\n\n{original}")
                });
                out.push(merged);
            }
            out.extend(rest.cloned());
        }
    }
    sanitize_tool_pairs(out)
}

/// Drops results without a call before them and stubs calls without a result, so every
/// provider accepts the list.
pub fn sanitize_tool_pairs(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut iter = messages.into_iter().peekable();
    while let Some(message) = iter.next() {
        if message.role == Role::Tool {
            // Results are only valid right after their call (handled below).
            continue;
        }
        let calls: Vec<String> = message.tool_calls.iter().map(|c| c.id.clone()).collect();
        out.push(message);
        if calls.is_empty() {
            continue;
        }
        let wanted: HashSet<&str> = calls.iter().map(String::as_str).collect();
        let mut answered = HashSet::new();
        while let Some(next) = iter.peek() {
            if next.role != Role::Tool {
                break;
            }
            let Some(result) = iter.next() else { break };
            let id = result.tool_call_id.clone().unwrap_or_default();
            if wanted.contains(id.as_str()) && answered.insert(id) {
                out.push(result);
            }
        }
        for id in calls {
            if !answered.contains(&id) {
                out.push(ChatMessage {
                    tool_call_id: Some(id),
                    ..ChatMessage::text(Role::Tool, STUB_RESULT)
                });
            }
        }
    }
    out
}
