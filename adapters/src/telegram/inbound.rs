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
