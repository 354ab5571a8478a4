//! Phase 1: cheap shrinking without a model call, applied to the part that is about to be
//! summarised (the summariser reads less; the fallback digest stays small):
//!
//! - an older copy of a tool output identical to a more recent one becomes
//!   [`DUPLICATE_OUTPUT`];
//! - a tool result over [`LONG_RESULT_CHARS`] becomes one line:
//!   `[tool] arguments → first line of the outcome (N chars)`;
//! - base64 images become [`IMAGE_REMOVED`];
//! - tool-call arguments over [`LONG_ARGS_CHARS`] are parsed as JSON and their long strings
//!   shortened, so the arguments stay valid JSON (invalid JSON is replaced by a valid note).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde_json::Value;

use crate::llm::ChatMessage;
use crate::store::Role;

pub const DUPLICATE_OUTPUT: &str = "[Duplicate tool output — same content as a more recent call]";
pub const IMAGE_REMOVED: &str = "[image removed to save context]";
pub const LONG_RESULT_CHARS: usize = 200;
pub const LONG_ARGS_CHARS: usize = 500;
/// Long string fields in arguments keep this many characters.
const ARG_STRING_KEEP: usize = 120;

/// Prunes `messages[range]` in place; messages outside `range` are read (to find duplicates
/// and tool names) but never changed.
pub fn prune(messages: &mut [ChatMessage], range: Range<usize>) {
    let calls: HashMap<String, (String, String)> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.clone(), (c.name.clone(), c.arguments.clone())))
        .collect();
    // Outputs seen later in the conversation, walking backwards.
    let mut later: HashSet<String> = messages[range.end..]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.content.clone())
        .collect();
    for message in messages[range].iter_mut().rev() {
        if let Some(content) = &mut message.content
            && content.contains("data:image/")
        {
            *content = strip_images(content);
        }
        match message.role {
            Role::Tool => {
                let Some(content) = message.content.clone() else {
                    continue;
                };
                if !later.insert(content.clone()) {
                    message.content = Some(DUPLICATE_OUTPUT.to_owned());
                } else if content.chars().count() > LONG_RESULT_CHARS {
                    let (name, args) = message
                        .tool_call_id
                        .as_ref()
                        .and_then(|id| calls.get(id))
                        .cloned()
                        .unwrap_or_else(|| ("tool".to_owned(), String::new()));
                    message.content = Some(one_line(&name, &args, &content));
                }
            }
            Role::Assistant => {
                for call in &mut message.tool_calls {
                    if call.arguments.chars().count() > LONG_ARGS_CHARS {
                        call.arguments = shrink_arguments(&call.arguments);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `[name] arguments → outcome (N chars)`.
pub fn one_line(name: &str, arguments: &str, output: &str) -> String {
    let args = clip(
        &arguments.split_whitespace().collect::<Vec<_>>().join(" "),
        80,
    );
    let first = output.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let outcome = clip(first.trim(), 100);
    format!(
        "[{name}] {args} → {outcome} ({} chars)",
        output.chars().count()
    )
}

/// Shortens every long string inside JSON arguments; the result parses as JSON.
pub fn shrink_arguments(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(mut value) => {
            shrink_value(&mut value);
            value.to_string()
        }
        Err(_) => serde_json::json!({
            "_note": format!("unparseable arguments of {} chars removed", arguments.chars().count())
        })
        .to_string(),
    }
}

fn shrink_value(value: &mut Value) {
    match value {
        Value::String(s) if s.chars().count() > ARG_STRING_KEEP => {
            let total = s.chars().count();
            *s = format!(
                "{}… [{} more chars]",
                clip_raw(s, ARG_STRING_KEEP),
                total - ARG_STRING_KEEP
            );
        }
        Value::Array(items) => items.iter_mut().for_each(shrink_value),
        Value::Object(map) => map.values_mut().for_each(shrink_value),
        _ => {}
    }
}

/// Replaces `data:image/...;base64,...` runs with [`IMAGE_REMOVED`].
fn strip_images(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(1024));
    let mut rest = text;
    while let Some(start) = rest.find("data:image/") {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == ')' || c == '\'')
            .unwrap_or(tail.len());
        out.push_str(IMAGE_REMOVED);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", clip_raw(text, max))
    }
}

fn clip_raw(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}
