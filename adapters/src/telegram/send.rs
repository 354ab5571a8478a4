//! Sending a reply: split, formatted as HTML, resent as plain text when Telegram rejects the
//! entities, 429 `retry_after` honoured, and a send retried only when it cannot have been
//! delivered (Telegram said so, or the connection never opened).

use std::time::Duration;

use teloxide_core::prelude::*;
use teloxide_core::types::{MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide_core::{ApiError, RequestError};

use super::reply_parts;

/// Where a reply goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    pub chat_id: i64,
    pub topic_id: Option<i64>,
    /// Thread the reply to this message (groups).
    pub reply_to: Option<i64>,
}

/// Attempts per part before giving up on a send that could not have been delivered.
const MAX_TRIES: u32 = 5;
/// The longest `retry_after` honoured in place; longer ones fail the send (the outbox retries).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// Sends `markdown` as one or more messages; returns their message ids.
pub async fn send_reply(
    bot: &Bot,
    to: Destination,
    markdown: &str,
) -> Result<Vec<String>, RequestError> {
    let mut ids = Vec::new();
    for part in reply_parts(markdown) {
        let sent = send_part(bot, to, &part.html, &part.plain).await?;
        ids.push(sent.to_string());
    }
    Ok(ids)
}

async fn send_part(
    bot: &Bot,
    to: Destination,
    html: &str,
    plain: &str,
) -> Result<i32, RequestError> {
    let mut as_html = true;
    let mut tries = 0;
    loop {
        tries += 1;
        let text = if as_html { html } else { plain };
        let mut request = bot.send_message(ChatId(to.chat_id), text);
        if as_html {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(topic) = to.topic_id.and_then(|t| i32::try_from(t).ok()) {
            request = request.message_thread_id(ThreadId(MessageId(topic)));
        }
        if let Some(reply) = to.reply_to.and_then(|r| i32::try_from(r).ok()) {
            request = request.reply_parameters(ReplyParameters {
                allow_sending_without_reply: Some(true),
                ..ReplyParameters::new(MessageId(reply))
            });
        }
        match request.await {
            Ok(message) => return Ok(message.id.0),
            Err(RequestError::Api(ApiError::CantParseEntities(reason))) if as_html => {
                tracing::debug!(%reason, "telegram rejected the formatting; sending plain text");
                as_html = false;
            }
            Err(RequestError::RetryAfter(after))
                if tries < MAX_TRIES && after.duration() <= MAX_RETRY_AFTER =>
            {
                tracing::info!(seconds = after.seconds(), "telegram rate limit; waiting");
                tokio::time::sleep(after.duration()).await;
            }
            Err(RequestError::Network(err)) if tries < MAX_TRIES && err.is_connect() => {
                tracing::debug!(error = %err, "telegram unreachable; retrying the send");
                tokio::time::sleep(Duration::from_millis(250 * u64::from(tries))).await;
            }
            Err(err) => return Err(err),
        }
    }
}
