//! Phase 3's texts: the summary budget, the sectioned template, the request that updates a
//! previous summary instead of rewriting it, and the deterministic fallback digest used when
//! no model can summarise (which says that it is one).

use std::collections::{BTreeMap, HashMap};

use super::{END_MARKER, SUMMARY_PREFIX};
use crate::llm::{ChatMessage, ChatRequest};
use crate::redact::Redactor;
use crate::store::Role;

/// The sections of every summary, in order.
pub const SECTIONS: [&str; 13] = [
    "Active Task",
    "Goal",
    "Constraints & Preferences",
    "Completed Actions",
    "Active State",
    "In Progress",
    "Blocked",
    "Key Decisions",
    "Resolved Questions",
    "Pending User Asks",
    "Relevant Files",
    "Remaining Work",
    "Critical Context",
];

/// Opens the fallback digest.
pub const FALLBACK_NOTE: &str = "[Fallback digest — no model could write a summary, so this is a mechanical excerpt of the earlier messages, not a summary.]";

/// `max(2000, min(middle × 0.20, min(context × 0.05, 12000)))` tokens.
pub fn budget(middle_tokens: u64, context_length: u64) -> u64 {
    let by_context = (context_length as f64 * 0.05).min(12_000.0);
    let by_middle = middle_tokens as f64 * 0.20;
    by_middle.min(by_context).max(2_000.0) as u64
}

/// Splits a message's text into (summary, the rest) when it carries a summary.
pub fn split_summary(content: &str) -> Option<(String, String)> {
    let start = content.find(SUMMARY_PREFIX)?;
    let body_start = start + SUMMARY_PREFIX.len();
    let (body, rest) = match content[body_start..].find(END_MARKER) {
        Some(end) => (
            &content[body_start..body_start + end],
            &content[body_start + end + END_MARKER.len()..],
        ),
        None => (&content[body_start..], ""),
    };
    let before = &content[..start];
    Some((
        body.trim().to_owned(),
        format!("{}{}", before.trim(), rest.trim())
            .trim()
            .to_owned(),
    ))
}

/// The middle as plain text for the summariser: one block per message, tool calls with
/// their arguments, tool results under their tool's name.
pub fn transcript(messages: &[ChatMessage]) -> String {
    let names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    let mut out = String::new();
    for m in messages {
        let text = m.content.as_deref().unwrap_or("").trim();
        match m.role {
            Role::Tool => {
                let name = m
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| names.get(id))
                    .unwrap_or(&"tool");
                out.push_str(&format!("[tool result: {name}]\n{text}\n\n"));
            }
            role => {
                if !text.is_empty() {
                    out.push_str(&format!("[{}]\n{text}\n\n", role.as_str()));
                }
                for call in &m.tool_calls {
                    out.push_str(&format!(
                        "[assistant called {}] {}\n\n",
                        call.name, call.arguments
                    ));
                }
            }
        }
    }
    out.trim_end().to_owned()
}

/// The summariser's request. Secrets are redacted from everything it is shown.
pub fn request(
    middle: &[ChatMessage],
    previous: Option<&str>,
    focus: Option<&str>,
    budget: u64,
    redactor: &Redactor,
) -> ChatRequest {
    let headings: String = SECTIONS.iter().map(|s| format!("## {s}\n")).collect();
    let mut system = format!(
        "You write hand-over summaries of a conversation between a user and an AI assistant, \
         so that the assistant can continue without the original messages. Write in the \
         conversation's language. Use exactly these Markdown headings, in this order, and \
         write \"None\" under a heading with nothing to say:\n\n{headings}\n\
         Be concrete: names, numbers, ids, paths, decisions, and the user's own words for \
         anything still open. Under Completed Actions number the items (N. action — outcome). \
         Never invent anything. Stay within about {budget} tokens."
    );
    if let Some(focus) = focus.filter(|f| !f.trim().is_empty()) {
        system.push_str(&format!(
            "\n\nFocus topic: {}. Spend about two thirds of the budget on what concerns it; \
             keep everything else brief.",
            focus.trim()
        ));
    }
    let new_turns = redactor.redact(&transcript(middle)).into_owned();
    let user = match previous {
        Some(previous) => {
            system.push_str(
                "\n\nAn earlier summary exists. UPDATE it rather than rewriting it: PRESERVE \
                 every fact in it that is still true, ADD what the new turns add, MOVE items \
                 from In Progress to Completed Actions when the new turns finished them, and \
                 keep the user's requests until they are resolved.",
            );
            format!(
                "EARLIER SUMMARY:\n{}\n\nNEW TURNS SINCE THEN:\n{new_turns}\n\nWrite the updated summary.",
                redactor.redact(previous)
            )
        }
        None => format!("CONVERSATION TO SUMMARISE:\n{new_turns}\n\nWrite the summary."),
    };
    ChatRequest {
        system: Some(system),
        messages: vec![ChatMessage::text(Role::User, user)],
        tools: Vec::new(),
        max_tokens: u32::try_from(budget).unwrap_or(u32::MAX),
        temperature: Some(0.2),
    }
}

/// The summary when no model could write one: the earlier summary kept whole, then the user's
/// messages, the tools used and the last answer, clipped. Always says what it is.
pub fn fallback_digest(middle: &[ChatMessage], previous: Option<&str>) -> String {
    let mut out = format!("{FALLBACK_NOTE}\n");
    if let Some(previous) = previous {
        out.push_str(&format!("\n## Earlier summary\n{previous}\n"));
    }
    let users: Vec<&str> = middle
        .iter()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content.as_deref())
        .collect();
    if !users.is_empty() {
        out.push_str("\n## User messages (oldest first)\n");
        let skip = users.len().saturating_sub(20);
        if skip > 0 {
            out.push_str(&format!("- ({skip} earlier messages left out)\n"));
        }
        for text in &users[skip..] {
            out.push_str(&format!("- {}\n", clip(text, 300)));
        }
    }
    let mut tools: BTreeMap<&str, usize> = BTreeMap::new();
    for call in middle.iter().flat_map(|m| &m.tool_calls) {
        *tools.entry(call.name.as_str()).or_default() += 1;
    }
    if !tools.is_empty() {
        let used: Vec<String> = tools.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
        out.push_str(&format!("\n## Tools used\n{}\n", used.join(", ")));
    }
    if let Some(last) = middle
        .iter()
        .rev()
        .find(|m| {
            m.role == Role::Assistant && m.content.as_deref().is_some_and(|c| !c.trim().is_empty())
        })
        .and_then(|m| m.content.as_deref())
    {
        out.push_str(&format!("\n## Last assistant reply\n{}\n", clip(last, 600)));
    }
    out
}

fn clip(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}
