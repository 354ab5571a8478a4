//! Discord messages as the messages Iris runs: who, where, what, and whether the bot was
//! addressed (guild channels are answered only when it was).

use serenity::model::channel::Message;

use crate::media::{FileInfo, MediaKind};
use crate::platform::{FileRef, InboundMessage, Origin};

/// `message` as an [`InboundMessage`], or `None` for what Iris does not answer: its own
/// messages, other bots' (unless `allow_bots`), and messages with neither text nor files.
pub fn normalize(message: &Message, bot_id: u64, allow_bots: bool) -> Option<InboundMessage> {
    let author = &message.author;
    if author.id.get() == bot_id || (author.bot && !allow_bots) {
        return None;
    }
    let private = message.guild_id.is_none();
    let mentioned = message.mentions.iter().any(|u| u.id.get() == bot_id);
    let replied_to_bot = message
        .referenced_message
        .as_ref()
        .is_some_and(|r| r.author.id.get() == bot_id);
    let own = strip_mention(&message.content, bot_id);
    let quoted = message
        .referenced_message
        .as_ref()
        .map(|r| r.content.trim())
        .filter(|q| !q.is_empty());
    let text = match quoted {
        Some(q) => format!("[Replying to: \"{q}\"]\n{own}"),
        None => own,
    };
    let files: Vec<FileRef> = message
        .attachments
        .iter()
        .map(|a| {
            let media_type = a
                .content_type
                .as_deref()
                .and_then(|t| t.split(';').next())
                .unwrap_or("application/octet-stream")
                .trim()
                .to_owned();
            let kind = if media_type.starts_with("image/") {
                MediaKind::Photo
            } else if media_type.starts_with("audio/") {
                MediaKind::Audio
            } else if media_type.starts_with("video/") {
                MediaKind::Video
            } else {
                MediaKind::Document
            };
            FileRef {
                fetch_id: a.url.clone(),
                unique_id: a.id.get().to_string(),
                info: FileInfo {
                    kind,
                    media_type,
                    bytes: u64::from(a.size),
                    name: Some(a.filename.clone()),
                    duration_secs: None,
                    dimensions: a.width.zip(a.height),
                },
            }
        })
        .collect();
    if text.trim().is_empty() && files.is_empty() {
        return None;
    }
    Some(InboundMessage {
        id: message.id.get().to_string(),
        chat: message.channel_id.get().to_string(),
        thread: None,
        origin: if private {
            Origin::Private
        } else {
            Origin::Group
        },
        user_id: author.id.get().to_string(),
        username: Some(author.name.clone()),
        roles: message
            .member
            .as_ref()
            .map(|m| m.roles.iter().map(|r| r.get().to_string()).collect())
            .unwrap_or_default(),
        parent_chat: None,
        text,
        files,
        addressed: private || mentioned || replied_to_bot,
    })
}

/// The text without the bot's own mention (`<@id>` or `<@!id>`), which only addressed it.
fn strip_mention(content: &str, bot_id: u64) -> String {
    content
        .replace(&format!("<@{bot_id}>"), "")
        .replace(&format!("<@!{bot_id}>"), "")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(guild: bool, content: &str, mentions_bot: bool, bot_author: bool) -> Message {
        let mut value = serde_json::json!({
            "id": "10", "channel_id": "20",
            "author": {"id": if bot_author { "1" } else { "30" }, "username": "ann", "bot": bot_author},
            "content": content, "timestamp": "2026-11-30T12:00:00.000000+00:00",
            "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": if mentions_bot { serde_json::json!([{"id": "1", "username": "iris", "bot": true}]) } else { serde_json::json!([]) },
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if guild {
            value["guild_id"] = serde_json::json!("99");
        }
        serde_json::from_value(value).expect("message")
    }

    #[test]
    fn guild_messages_are_addressed_only_by_a_mention_and_the_mention_is_dropped() {
        let dm = normalize(&message(false, "hi", false, false), 1, false).expect("dm");
        assert!(dm.addressed && dm.origin == Origin::Private);
        let guild = normalize(&message(true, "hi all", false, false), 1, false).expect("guild");
        assert!(!guild.addressed);
        let mentioned =
            normalize(&message(true, "<@1> what's up", true, false), 1, false).expect("mention");
        assert!(mentioned.addressed);
        assert_eq!(mentioned.text, "what's up");
        assert_eq!(
            (mentioned.chat.as_str(), mentioned.user_id.as_str()),
            ("20", "30")
        );
        assert!(
            normalize(&message(true, "beep", true, true), 2, false).is_none(),
            "bots ignored"
        );
        assert!(
            normalize(&message(true, "beep", true, true), 2, true).is_some(),
            "unless allowed"
        );
        assert!(
            normalize(&message(false, "mine", false, true), 1, true).is_none(),
            "never itself"
        );
    }
}
