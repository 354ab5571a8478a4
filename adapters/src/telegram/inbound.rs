//! Telegram updates as the messages Iris runs: who, where, what, and whether the bot was
//! addressed (groups are answered only when it was).

use teloxide_core::types::{Update, UpdateKind};

/// A text message from Telegram, normalised.
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
    /// The text (or caption), with the quoted message in front when it is a reply.
    pub text: String,
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
/// service messages, messages without text, other bots).
pub fn normalize(update: &Update, bot: &BotIdentity) -> Option<Incoming> {
    let UpdateKind::Message(message) = &update.kind else {
        return None;
    };
    let from = message.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let own = message.text().or_else(|| message.caption())?;
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
        addressed,
    })
}

/// A message at least this long (UTF-16 units) may be the first part of one the Telegram
/// client split at its 4,096 limit.
pub const SPLIT_PART_UNITS: usize = 4000;

/// Whether more parts of `message` may follow.
pub fn may_continue(message: &Incoming) -> bool {
    crate::split::utf16_units(&message.text) >= SPLIT_PART_UNITS
}

/// Joins the parts of messages the Telegram client split: a message from the same user in the
/// same chat and topic right after one of [`SPLIT_PART_UNITS`] or more is its continuation.
/// The joined message keeps the first part's ids (so a redelivered batch joins the same way
/// and runs once).
pub fn merge_split(messages: Vec<Incoming>) -> Vec<Incoming> {
    let mut merged: Vec<Incoming> = Vec::with_capacity(messages.len());
    // Whether the last part taken (not the joined text so far) was long enough to continue.
    let mut open = false;
    for message in messages {
        let continues = may_continue(&message);
        if let Some(last) = merged.last_mut()
            && open
            && last.chat_id == message.chat_id
            && last.user_id == message.user_id
            && last.topic_id == message.topic_id
        {
            last.text.push('\n');
            last.text.push_str(&message.text);
            last.addressed |= message.addressed;
            open = continues;
            continue;
        }
        open = continues;
        merged.push(message);
    }
    merged
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
            addressed: true,
        }
    }

    #[test]
    fn parts_after_a_long_message_join_it() {
        let long = "a".repeat(4096);
        let merged = merge_split(vec![
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
        let merged = merge_split(vec![
            msg(1, 7, "short"),
            msg(2, 7, "next"),
            msg(3, 7, &long),
            msg(4, 8, "other user"),
        ]);
        assert_eq!(merged.len(), 4);
    }
}
