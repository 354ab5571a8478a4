//! Telegram updates as the messages Iris runs: who, where, what, and whether the bot was
//! addressed (groups are answered only when it was).

use std::collections::HashMap;

use teloxide_core::types::{Message, Update, UpdateKind};

use crate::media::{FileInfo, MediaKind};
use crate::platform::{FileRef, InboundMessage, Origin};

/// A message from Telegram, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub update_id: i64,
    pub chat_id: i64,
    /// A private chat (DM) rather than a group.
    pub private: bool,
    /// The forum topic, in forum supergroups.
    pub topic_id: Option<i64>,
    pub message_id: i64,
    pub user_id: i64,
    pub username: Option<String>,
    /// The text (or caption), with the quoted message in front when it is a reply. May be
    /// empty when the message is only a file.
    pub text: String,
    /// Files attached: a photo (its largest size), a document, voice, audio or video; several
    /// once an album is merged.
    pub media: Vec<FileRef>,
    /// The album (`media_group_id`) this message belongs to: its parts arrive as separate
    /// messages and are merged into one turn.
    pub album: Option<String>,
    /// DMs always; in groups: the bot is @mentioned, replied to, or sent `/cmd@bot`.
    pub addressed: bool,
}

/// The bot, as `getMe` describes it.
#[derive(Debug, Clone)]
pub struct BotIdentity {
    pub id: u64,
    pub username: String,
}

/// `update` as an [`Incoming`] message, or `None` for what Iris does not answer (edits,
/// service messages, messages with neither text nor a file, other bots).
pub fn normalize(update: &Update, bot: &BotIdentity) -> Option<Incoming> {
    let UpdateKind::Message(message) = &update.kind else {
        return None;
    };
    let from = message.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let media = attached(message);
    let own = match message.text().or_else(|| message.caption()) {
        Some(text) => text,
        None if !media.is_empty() => "",
        None => return None,
    };
    let private = message.chat.is_private();
    let mention = format!("@{}", bot.username.to_ascii_lowercase());
    let lower = own.to_ascii_lowercase();
    let command_for_bot = lower
        .split_whitespace()
        .next()
        .is_some_and(|first| first.starts_with('/') && first.ends_with(&mention));
    let reply_to = message.reply_to_message();
    let replied_to_bot = reply_to
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id.0 == bot.id);
    let addressed = private || lower.contains(&mention) || replied_to_bot || command_for_bot;
    let quoted = reply_to
        .and_then(|r| r.text().or_else(|| r.caption()))
        .filter(|q| !q.trim().is_empty());
    let text = match quoted {
        Some(q) => format!("[Replying to: \"{}\"]\n{own}", q.trim()),
        None => own.to_owned(),
    };
    Some(Incoming {
        update_id: i64::from(update.id.0),
        chat_id: message.chat.id.0,
        private,
        topic_id: message
            .thread_id
            .filter(|_| message.is_topic_message)
            .map(|t| i64::from(t.0.0)),
        message_id: i64::from(message.id.0),
        user_id: i64::try_from(from.id.0).unwrap_or(i64::MAX),
        username: from.username.clone(),
        text,
        media,
        album: message.media_group_id().map(|id| id.0.clone()),
        addressed,
    })
}

/// A MIME type without its parameters, or `default`.
fn mime(given: Option<&impl std::fmt::Display>, default: &str) -> String {
    given.map_or_else(
        || default.to_owned(),
        |m| {
            let full = m.to_string();
            full.split(';').next().unwrap_or_default().trim().to_owned()
        },
    )
}

/// The file a message carries, if any.
fn attached(message: &Message) -> Vec<FileRef> {
    let media = |meta: &teloxide_core::types::FileMeta, info: FileInfo| FileRef {
        fetch_id: meta.id.0.clone(),
        unique_id: meta.unique_id.0.clone(),
        info: FileInfo {
            bytes: u64::from(meta.size),
            ..info
        },
    };
    let base = |kind, media_type: String| FileInfo {
        kind,
        media_type,
        bytes: 0,
        name: None,
        duration_secs: None,
        dimensions: None,
    };
    // Sizes of a photo come smallest first; the largest is the photo as sent.
    let photo = || {
        message
            .photo()?
            .iter()
            .max_by_key(|p| p.width * p.height)
            .map(|p| {
                media(
                    &p.file,
                    FileInfo {
                        dimensions: Some((p.width, p.height)),
                        ..base(MediaKind::Photo, "image/jpeg".into())
                    },
                )
            })
    };
    let document = || {
        message.document().map(|d| {
            media(
                &d.file,
                FileInfo {
                    name: d.file_name.clone(),
                    ..base(
                        MediaKind::Document,
                        mime(d.mime_type.as_ref(), "application/octet-stream"),
                    )
                },
            )
        })
    };
    let voice = || {
        message.voice().map(|v| {
            media(
                &v.file,
                FileInfo {
                    duration_secs: Some(v.duration.seconds()),
                    ..base(MediaKind::Voice, mime(v.mime_type.as_ref(), "audio/ogg"))
                },
            )
        })
    };
    let audio = || {
        message.audio().map(|a| {
            media(
                &a.file,
                FileInfo {
                    name: a.file_name.clone(),
                    duration_secs: Some(a.duration.seconds()),
                    ..base(MediaKind::Audio, mime(a.mime_type.as_ref(), "audio/mpeg"))
                },
            )
        })
    };
    let video = || {
        message.video().map(|v| {
            media(
                &v.file,
                FileInfo {
                    name: v.file_name.clone(),
                    duration_secs: Some(v.duration.seconds()),
                    dimensions: Some((v.width, v.height)),
                    ..base(MediaKind::Video, mime(v.mime_type.as_ref(), "video/mp4"))
                },
            )
        })
    };
    let found = photo()
        .or_else(document)
        .or_else(voice)
        .or_else(audio)
        .or_else(video);
    found.into_iter().collect()
}

impl Incoming {
    /// The message as the gateway takes it from any platform.
    pub fn into_inbound(self) -> InboundMessage {
        InboundMessage {
            id: self.message_id.to_string(),
            chat: self.chat_id.to_string(),
            thread: self.topic_id.map(|t| t.to_string()),
            origin: if self.private {
                Origin::Private
            } else {
                Origin::Group
            },
            user_id: self.user_id.to_string(),
            username: self.username,
            roles: Vec::new(),
            parent_chat: None,
            text: self.text,
            files: self.media,
            addressed: self.addressed,
        }
    }
}

/// A message at least this long (UTF-16 units) may be the first part of one the Telegram
/// client split at its 4,096 limit.
pub const SPLIT_PART_UNITS: usize = 4000;

/// Whether more parts of `message` may follow.
pub fn may_continue(message: &Incoming) -> bool {
    crate::split::utf16_units(&message.text) >= SPLIT_PART_UNITS
}

/// Joins messages that are parts of one: the parts of a message the Telegram client split (a
/// message from the same user in the same chat and topic right after one of
/// [`SPLIT_PART_UNITS`] or more is its continuation), and the messages of an album (same
/// chat and `media_group_id`, wherever they fall in the batch). A joined message keeps its
/// first part's ids, so a redelivered batch joins the same way and runs once.
pub fn merge_parts(mut messages: Vec<Incoming>) -> Vec<Incoming> {
    // Update ids grow in the order Telegram received the messages: sorting by them makes
    // "first" and "right after" independent of the order the updates were delivered in.
    messages.sort_by_key(|m| m.update_id);
    let mut merged: Vec<Incoming> = Vec::with_capacity(messages.len());
    let mut albums: HashMap<(i64, String), usize> = HashMap::new();
    // Per sender and place: the merged message a continuation would join.
    let mut open: HashMap<(i64, i64, Option<i64>), usize> = HashMap::new();
    for message in messages {
        let sender = (message.chat_id, message.user_id, message.topic_id);
        if let Some(album) = &message.album {
            let key = (message.chat_id, album.clone());
            open.remove(&sender);
            match albums.get(&key) {
                Some(&at) => absorb(&mut merged[at], message),
                None => {
                    albums.insert(key, merged.len());
                    merged.push(message);
                }
            }
            continue;
        }
        let continues = may_continue(&message);
        match open.get(&sender) {
            Some(&at) => absorb(&mut merged[at], message),
            None => merged.push(message),
        }
        if continues {
            let at = open.get(&sender).copied().unwrap_or(merged.len() - 1);
            open.insert(sender, at);
        } else {
            open.remove(&sender);
        }
    }
    merged
}

/// `part` added to `into`: its text on a new line, its files after the others.
fn absorb(into: &mut Incoming, part: Incoming) {
    if !part.text.is_empty() {
        if !into.text.is_empty() {
            into.text.push('\n');
        }
        into.text.push_str(&part.text);
    }
    into.media.extend(part.media);
    into.addressed |= part.addressed;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: i64, user: i64, text: &str) -> Incoming {
        Incoming {
            update_id: id,
            chat_id: 1,
            private: true,
            topic_id: None,
            message_id: id,
            user_id: user,
            username: None,
            text: text.to_owned(),
            media: Vec::new(),
            album: None,
            addressed: true,
        }
    }

    fn photo(id: i64, album: &str, caption: &str) -> Incoming {
        Incoming {
            media: vec![FileRef {
                fetch_id: format!("f{id}"),
                unique_id: format!("u{id}"),
                info: FileInfo {
                    kind: MediaKind::Photo,
                    media_type: "image/jpeg".into(),
                    bytes: 10,
                    name: None,
                    duration_secs: None,
                    dimensions: Some((2, 2)),
                },
            }],
            album: Some(album.into()),
            ..msg(id, 7, caption)
        }
    }

    #[test]
    fn an_album_is_one_message_wherever_its_parts_fall() {
        let merged = merge_parts(vec![
            photo(3, "a1", ""),
            msg(2, 8, "someone else"),
            photo(1, "a1", "what are these?"),
            photo(4, "a2", "another album"),
        ]);
        let summary: Vec<(i64, &str, usize)> = merged
            .iter()
            .map(|m| (m.message_id, m.text.as_str(), m.media.len()))
            .collect();
        assert_eq!(
            summary,
            [
                (1, "what are these?", 2),
                (2, "someone else", 0),
                (4, "another album", 1)
            ]
        );
        assert_eq!(merged[0].media[1].fetch_id, "f3");
    }

    #[test]
    fn parts_after_a_long_message_join_it() {
        let long = "a".repeat(4096);
        let merged = merge_parts(vec![
            msg(1, 7, &long),
            msg(2, 7, &"b".repeat(4096)),
            msg(3, 7, "tail"),
            msg(4, 7, "separate"),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].message_id, 1);
        assert!(merged[0].text.ends_with("\ntail"));
        assert_eq!(merged[0].text.len(), 4096 * 2 + 2 + 4);
        assert_eq!(merged[1].text, "separate");
    }

    #[test]
    fn short_messages_and_other_users_stay_apart() {
        let long = "a".repeat(4096);
        let merged = merge_parts(vec![
            msg(1, 7, "short"),
            msg(2, 7, "next"),
            msg(3, 7, &long),
            msg(4, 8, "other user"),
        ]);
        assert_eq!(merged.len(), 4);
    }
}
