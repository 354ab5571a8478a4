//! Telegram through teloxide's Bot API client.
//!
//! - [`platform`]: the adapter as a [`crate::platform::Platform`]: polling or webhook intake,
//!   file downloads, sending.
//! - [`inbound`]: updates as normalised messages, with the group mention gate; parts joined.
//! - [`gather`]: webhook mode's joining of parts that arrive as separate requests.
//! - [`html`]: the model's Markdown as Telegram HTML.
//! - [`reply_parts`]: a reply as the messages to send (split first, then formatted, so no
//!   entity is cut); [`send`] sends them, with the plain-text and rate-limit fallbacks.

pub mod gather;
pub mod html;
pub mod inbound;
pub mod platform;
pub mod send;

pub use platform::{ConnectError, Intake, TelegramPlatform};
pub use teloxide_core::Bot;
pub use teloxide_core::types::Update;

use crate::split;

/// Telegram's limit on a message's text: 4,096 UTF-16 code units (after entity parsing; the
/// Markdown source is at least as long as the visible text, so splitting the source is safe).
pub const MAX_MESSAGE_UNITS: usize = 4096;

/// One message to send: the HTML to try first and the plain text to send if Telegram rejects
/// the HTML's entities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub html: String,
    pub plain: String,
}

/// `markdown` as the messages to send, in order.
pub fn reply_parts(markdown: &str) -> Vec<Part> {
    split::split(markdown, MAX_MESSAGE_UNITS, split::utf16_units)
        .into_iter()
        .map(|plain| Part {
            html: html::to_html(&plain),
            plain,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reply_with_code_becomes_parts_that_each_render_whole() {
        let mut text = String::new();
        for i in 0..14 {
            text.push_str(&format!(
                "## Step {i}\n\n{}\n\n",
                "Some prose here. ".repeat(30)
            ));
            text.push_str("```rust\n");
            for j in 0..10 {
                text.push_str(&format!("let value_{j} = compute({i}, {j}) < limit;\n"));
            }
            text.push_str("```\n\n");
        }
        assert!(text.chars().count() > 10_000);
        let parts = reply_parts(&text);
        assert!(parts.len() >= 3, "{} parts", parts.len());
        for (i, part) in parts.iter().enumerate() {
            assert!(split::utf16_units(&part.plain) <= MAX_MESSAGE_UNITS);
            let marker = format!("({}/{})", i + 1, parts.len());
            assert!(part.plain.ends_with(&marker), "{marker} ends part {i}");
            assert_eq!(
                part.html.matches("<pre").count(),
                part.html.matches("</pre>").count(),
                "every code block in part {i} is closed"
            );
            assert!(!part.html.contains("```"), "no raw fence in part {i}");
        }
    }
}
