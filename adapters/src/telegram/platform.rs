//! Telegram as a [`Platform`]: long polling or webhook intake, `getFile` downloads, and
//! sending through [`super::send`].
//!
//! Polling: one loop calls `getUpdates`; every update of a batch is normalised and handed over,
//! and the next call's `offset` confirms the batch only once all of it is stored, so a crash
//! between the two only makes Telegram send the batch again (and the inbox runs each message
//! once). A batch that ends with a message that may have more parts (an album, a long text the
//! client split) is looked at again for up to a second, with the same offset, so the parts are
//! joined. A 409 Conflict (another process polling the token) is reported and backed off.
//! Webhook: [`TelegramPlatform::receive`] takes what the gateway's route was posted; parts are
//! joined by the [`Gatherer`].

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use teloxide_core::net::Download;
use teloxide_core::prelude::*;
use teloxide_core::types::{
    BotCommand, ChatAction, FileId, MessageId, ParseMode, ThreadId, Update,
};
use teloxide_core::{ApiError, RequestError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::gather::Gatherer;
use super::inbound::{BotIdentity, may_continue, merge_parts, normalize};
use super::send::{Destination, send_reply};
use crate::platform::{
    Address, Arrival, Capabilities, Connection, Dialect, FileRef, Platform, SendError,
};

/// Seconds a `getUpdates` call waits for updates.
const POLL_TIMEOUT: u32 = 25;
/// Attempts at fetching one file when the network fails.
const FETCH_ATTEMPTS: u32 = 3;

/// How updates arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intake {
    Polling,
    /// Webhook mode: the public URL to register and the secret Telegram must send back.
    Webhook {
        url: String,
        secret: String,
    },
}

/// The Telegram adapter.
pub struct TelegramPlatform {
    bot: Bot,
    identity: BotIdentity,
    intake: Intake,
    max_file_bytes: u64,
    gatherer: Arc<Gatherer>,
    /// Webhook mode: where [`Self::receive`] hands messages over, once [`Platform::run`] began.
    arrivals: OnceLock<mpsc::Sender<Arrival>>,
    /// How the last `getUpdates` went (`Ok` in webhook mode once registered).
    status: Connection,
}

/// Why the adapter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("telegram: {what} {value:?} is not a URL")]
    Url { what: &'static str, value: String },
    #[error("telegram: getMe failed (is the token right and the API reachable?): {0}")]
    GetMe(RequestError),
    #[error("telegram: setWebhook failed: {0}")]
    SetWebhook(RequestError),
}

impl TelegramPlatform {
    /// Connects (`getMe`), and registers the webhook or removes one for polling (pending
    /// updates are kept either way).
    pub async fn connect(
        token: &str,
        api_url: &str,
        intake: Intake,
        max_file_bytes: u64,
    ) -> Result<Self, ConnectError> {
        let url = api_url.parse().map_err(|_| ConnectError::Url {
            what: "api_url",
            value: api_url.to_owned(),
        })?;
        let bot = Bot::new(token).set_api_url(url);
        let me = bot.get_me().await.map_err(ConnectError::GetMe)?;
        let identity = BotIdentity {
            id: me.user.id.0,
            username: me.user.username.clone().unwrap_or_default(),
        };
        match &intake {
            Intake::Polling => {
                tracing::info!(bot = %identity.username, "telegram connected (long polling)");
                if let Err(error) = bot.delete_webhook().await {
                    tracing::warn!(%error, "telegram: deleteWebhook failed");
                }
            }
            Intake::Webhook { url, secret } => {
                let parsed = url.parse().map_err(|_| ConnectError::Url {
                    what: "webhook_url",
                    value: url.clone(),
                })?;
                bot.set_webhook(parsed)
                    .secret_token(secret.clone())
                    .await
                    .map_err(ConnectError::SetWebhook)?;
                tracing::info!(bot = %identity.username, %url, "telegram connected (webhook)");
            }
        }
        Ok(Self {
            bot,
            identity,
            intake,
            max_file_bytes,
            gatherer: Arc::default(),
            arrivals: OnceLock::new(),
            status: Connection::new(Ok(())),
        })
    }

    /// The bot's @username.
    pub fn username(&self) -> &str {
        &self.identity.username
    }

    /// Webhook mode: an update Telegram posted. `Ok` once it is stored (or is nothing Iris
    /// answers); `Err` when it could not be, and Telegram should send it again.
    pub async fn receive(&self, update: &Update) -> Result<(), String> {
        let Some(message) = normalize(update, &self.identity) else {
            return Ok(());
        };
        let arrivals = self
            .arrivals
            .get()
            .ok_or_else(|| "the adapter is not running yet".to_owned())?;
        self.gatherer.hand_over(arrivals, message).await
    }

    async fn poll(&self, arrivals: &mpsc::Sender<Arrival>, stop: &CancellationToken) {
        let mut offset: i32 = 0;
        let mut backoff = Duration::from_secs(1);
        loop {
            // After a failure a short poll first, so recovery shows (in `/readyz`) at once
            // rather than when a long poll ends.
            let failing = self.ready().is_err();
            let timeout = if failing { 0 } else { POLL_TIMEOUT };
            let call = self.bot.get_updates().offset(offset).timeout(timeout);
            let result = tokio::select! {
                () = stop.cancelled() => return,
                result = call.send() => result,
            };
            let status = match &result {
                Ok(_) => Ok(()),
                Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates)) => {
                    Err("another process is polling this bot token (409 Conflict)".to_owned())
                }
                Err(error) => Err(format!("getUpdates failed: {error}")),
            };
            self.status.set(status);
            let wait = match result {
                Ok(mut updates) => {
                    backoff = Duration::from_secs(1);
                    self.await_parts(offset, &mut updates).await;
                    let next = updates
                        .last()
                        .and_then(|u| i32::try_from(u.id.0).ok())
                        .map_or(offset, |id| id.saturating_add(1));
                    match self.hand_over_batch(arrivals, &updates).await {
                        Ok(()) => {
                            offset = next;
                            continue;
                        }
                        Err(error) => {
                            tracing::error!(%error, "telegram: could not store an update; the batch will be fetched again");
                            Duration::from_secs(2)
                        }
                    }
                }
                Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates)) => {
                    tracing::error!(
                        retry_in_secs = backoff.as_secs(),
                        "telegram: another process is polling this bot token (409 Conflict); only one may. Stop the other one"
                    );
                    backoff
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in_secs = backoff.as_secs(), "telegram: getUpdates failed");
                    backoff
                }
            };
            backoff = (backoff * 2).min(Duration::from_secs(60));
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// When a batch ends with a message that may have more parts, looks again for up to a
    /// second (with the same `offset`: nothing is confirmed before it is stored) for them.
    async fn await_parts(&self, offset: i32, updates: &mut Vec<Update>) {
        for _ in 0..4 {
            let waiting = updates
                .last()
                .and_then(|u| normalize(u, &self.identity))
                .is_some_and(|m| m.album.is_some() || may_continue(&m));
            if !waiting {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            if let Ok(again) = self.bot.get_updates().offset(offset).timeout(0).await
                && again.len() > updates.len()
            {
                *updates = again;
            }
        }
    }

    /// A batch, parts joined, handed over in order; `Err` when one could not be stored.
    async fn hand_over_batch(
        &self,
        arrivals: &mpsc::Sender<Arrival>,
        updates: &[Update],
    ) -> Result<(), String> {
        let messages = updates
            .iter()
            .filter_map(|u| normalize(u, &self.identity))
            .collect();
        for message in merge_parts(messages) {
            Arrival::hand_over(arrivals, message.into_inbound()).await?;
        }
        Ok(())
    }

    fn too_large(&self) -> String {
        format!(
            "larger than the {} limit",
            crate::media::human_bytes(self.max_file_bytes)
        )
    }
}

/// `to` as a Telegram destination.
fn destination(to: &Address) -> Result<Destination, SendError> {
    let number = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| SendError::Failed(format!("{s:?} is not a Telegram id")))
    };
    Ok(Destination {
        chat_id: number(&to.chat)?,
        topic_id: to.thread.as_deref().map(number).transpose()?,
        reply_to: to.reply_to.as_deref().map(number).transpose()?,
    })
}

fn failed(error: RequestError) -> SendError {
    SendError::Failed(error.to_string())
}

#[async_trait::async_trait]
impl Platform for TelegramPlatform {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "telegram",
            max_message: super::MAX_MESSAGE_UNITS,
            measure: crate::split::utf16_units,
            dialect: Dialect::TelegramHtml,
            threads: true,
            typing_lasts: Duration::from_secs(5),
        }
    }

    fn ready(&self) -> Result<(), String> {
        self.status.get()
    }

    async fn run(&self, arrivals: mpsc::Sender<Arrival>, stop: CancellationToken) {
        match self.intake {
            Intake::Polling => self.poll(&arrivals, &stop).await,
            Intake::Webhook { .. } => {
                let _ = self.arrivals.set(arrivals);
                stop.cancelled().await;
            }
        }
    }

    async fn fetch(&self, file: &FileRef, path: &Path) -> Result<(), String> {
        if file.info.bytes > self.max_file_bytes {
            return Err(self.too_large());
        }
        let partial = path.with_extension("part");
        let mut last = String::new();
        for attempt in 0..FETCH_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
            }
            let found = match self.bot.get_file(FileId(file.fetch_id.clone())).await {
                Ok(found) => found,
                Err(RequestError::Api(error)) => {
                    return Err(format!("Telegram refused it: {error}"));
                }
                Err(error) => {
                    last = error.to_string();
                    continue;
                }
            };
            if u64::from(found.meta.size) > self.max_file_bytes {
                return Err(self.too_large());
            }
            let mut out = tokio::fs::File::create(&partial)
                .await
                .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
            match self.bot.download_file(&found.path, &mut out).await {
                Ok(()) => {
                    // tokio writes in the background: flushed and synced before the rename,
                    // the file is whole on disk before the message can be acknowledged.
                    use tokio::io::AsyncWriteExt as _;
                    let written = match out.flush().await {
                        Ok(()) => out.sync_all().await,
                        Err(error) => Err(error),
                    };
                    drop(out);
                    return match written {
                        Ok(()) => tokio::fs::rename(&partial, path)
                            .await
                            .map_err(|e| format!("cannot write {}: {e}", path.display())),
                        Err(e) => {
                            let _ = tokio::fs::remove_file(&partial).await;
                            Err(format!("cannot write {}: {e}", partial.display()))
                        }
                    };
                }
                Err(error) => last = error.to_string(),
            }
        }
        let _ = tokio::fs::remove_file(&partial).await;
        Err(format!("download failed: {last}"))
    }

    async fn send(&self, to: &Address, markdown: &str) -> Result<Vec<String>, SendError> {
        send_reply(&self.bot, destination(to)?, markdown)
            .await
            .map_err(failed)
    }

    async fn edit(&self, to: &Address, message_id: &str, markdown: &str) -> Result<(), SendError> {
        let to = destination(to)?;
        let id = message_id
            .parse()
            .map_err(|_| SendError::Failed(format!("{message_id:?} is not a message id")))?;
        let parts = super::reply_parts(markdown);
        let [part] = parts.as_slice() else {
            return Err(SendError::Failed(
                "the new text is longer than one Telegram message".into(),
            ));
        };
        let html = self
            .bot
            .edit_message_text(ChatId(to.chat_id), MessageId(id), &part.html)
            .parse_mode(ParseMode::Html)
            .await;
        match html {
            Ok(_) => Ok(()),
            Err(RequestError::Api(ApiError::CantParseEntities(_))) => self
                .bot
                .edit_message_text(ChatId(to.chat_id), MessageId(id), &part.plain)
                .await
                .map(|_| ())
                .map_err(failed),
            Err(error) => Err(failed(error)),
        }
    }

    async fn typing(&self, to: &Address) -> Result<(), SendError> {
        let to = destination(to)?;
        let mut action = self
            .bot
            .send_chat_action(ChatId(to.chat_id), ChatAction::Typing);
        if let Some(topic) = to.topic_id.and_then(|t| i32::try_from(t).ok()) {
            action = action.message_thread_id(ThreadId(MessageId(topic)));
        }
        action.await.map(|_| ()).map_err(failed)
    }

    async fn publish_commands(&self, commands: &[(&str, &str)]) -> Result<(), SendError> {
        let commands: Vec<BotCommand> = commands
            .iter()
            .map(|(name, about)| BotCommand::new(*name, *about))
            .collect();
        self.bot
            .set_my_commands(commands)
            .await
            .map(|_| ())
            .map_err(failed)
    }
}
