//! The Telegram adapter at run time, in long-polling or webhook mode.
//!
//! Polling: one loop calls `getUpdates`; every update of a batch is normalised, authorised,
//! gated and written to the inbox before the next call's `offset` confirms the batch to
//! Telegram, so a crash between the two only makes Telegram send the batch again — and the
//! inbox runs each message once. Messages that are parts of one — a long message the Telegram
//! client split (parts of ~4,096), an album's photos — are joined into one turn: a batch
//! ending in a possible part waits up to a second for the rest. Webhook: `setWebhook` with a
//! secret token on start, and `POST /telegram/webhook` (see [`webhook`]). Files are downloaded
//! before the message is stored (see [`files`]). Replies are written to the outbox by the
//! conversation actors and sent by one deliverer (see [`delivery`]). While a turn runs the
//! chat shows "typing…".
//!
//! Access fails closed: only `telegram.allowed_users` (ids or @usernames) and users the
//! operator paired are answered; others are refused and logged — in a DM they get a pairing
//! code (see [`crate::pairing`]), elsewhere nothing. Groups are answered only when the bot is
//! addressed, except `telegram.open_groups`, where every message from anyone is answered.

use std::sync::Arc;
use std::time::Duration;

use adapters::telegram::Bot;
use adapters::telegram::inbound::{BotIdentity, Incoming, may_continue, merge_parts, normalize};
use adapters::telegram::send::{Destination, keep_typing, send_reply};
use agent_core::store::{InboxState, NewInboxItem, NewOutboxItem, SessionStore};
use anyhow::{Context, Result};
use serde_json::json;
use teloxide_core::prelude::*;
use teloxide_core::types::BotCommand;
use teloxide_core::{ApiError, RequestError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::delivery::Delivery;
use self::files::Files;
use crate::config::TelegramConfig;
use crate::conversation::key::{Place, conversation_key};
use crate::conversation::{Gateway, Inbound, Submission, SubmitError};

mod delivery;
mod files;
mod webhook;

const SOURCE: &str = "telegram";
const TARGET_PREFIX: &str = "telegram:";
/// Seconds a `getUpdates` call waits for updates.
const POLL_TIMEOUT: u32 = 25;
/// How often pending replies are looked for besides the ones handed over.
const SWEEP: Duration = Duration::from_secs(3);
/// Delivery attempts per reply before it is marked failed.
const MAX_ATTEMPTS: i64 = 8;
const GREETING: &str = "Hi! I'm Iris. Send me a message and I'll answer. /help lists the commands.";

/// The path Telegram posts updates to in webhook mode.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";

/// How updates arrive.
pub enum Intake {
    Polling,
    /// Webhook mode: the public URL to register and the secret Telegram must send back.
    Webhook {
        url: String,
        secret: String,
    },
}

/// Starts the adapter once the bot is known (`getMe`): polling and delivery tasks, and in
/// webhook mode the route to serve. Files users send are saved under `home`.
pub async fn start(
    config: &TelegramConfig,
    token: &str,
    home: &std::path::Path,
    intake: Intake,
    gateway: Arc<Gateway>,
    store: Arc<dyn SessionStore>,
    stop: CancellationToken,
) -> Result<Option<axum::Router>> {
    let url = config
        .api_url
        .parse()
        .with_context(|| format!("telegram.api_url {:?} is not a URL", config.api_url))?;
    let bot = Bot::new(token).set_api_url(url);
    let me = bot
        .get_me()
        .await
        .context("telegram: getMe failed (is the token right and the API reachable?)")?;
    let identity = BotIdentity {
        id: me.user.id.0,
        username: me.user.username.clone().unwrap_or_default(),
    };
    match &intake {
        Intake::Polling => {
            tracing::info!(bot = %identity.username, "telegram connected (long polling)");
            // Polling and a webhook exclude each other; pending updates are kept.
            if let Err(error) = bot.delete_webhook().await {
                tracing::warn!(%error, "telegram: deleteWebhook failed");
            }
        }
        Intake::Webhook { url, secret } => {
            let parsed = url
                .parse()
                .with_context(|| format!("telegram.webhook_url {url:?} is not a URL"))?;
            bot.set_webhook(parsed)
                .secret_token(secret.clone())
                .await
                .context("telegram: setWebhook failed")?;
            tracing::info!(bot = %identity.username, %url, "telegram connected (webhook)");
        }
    }
    if let Err(error) = bot.set_my_commands(commands()).await {
        tracing::warn!(%error, "telegram: setMyCommands failed");
    }
    let (deliveries, queue) = mpsc::unbounded_channel();
    let adapter = Arc::new(Adapter {
        bot,
        identity,
        allowed: config.allowed_users.clone(),
        open_groups: config.open_groups.clone(),
        files: Files {
            home: home.to_owned(),
            max_bytes: config.max_file_mb.saturating_mul(1024 * 1024),
        },
        gateway,
        store,
        deliveries,
    });
    tokio::spawn(adapter.clone().deliver(queue, stop.clone()));
    tokio::spawn(adapter.clone().relay_notices(stop.clone()));
    match intake {
        Intake::Polling => {
            tokio::spawn(adapter.poll(stop));
            Ok(None)
        }
        Intake::Webhook { secret, .. } => Ok(Some(
            axum::Router::new()
                .route(WEBHOOK_PATH, axum::routing::post(webhook::receive))
                .with_state(Arc::new(webhook::Receiver {
                    adapter,
                    secret,
                    gatherer: Arc::default(),
                })),
        )),
    }
}

/// The commands shown in Telegram's menu (DESIGN.md §9).
fn commands() -> Vec<BotCommand> {
    [
        ("new", "Start a new session"),
        ("status", "Session, model, context and cost"),
        ("stop", "Stop the running turn"),
        ("retry", "Run the last message again"),
        ("undo", "Forget the last exchange"),
        ("compress", "Compress the context now"),
        ("resume", "List or resume earlier sessions"),
        ("branch", "Branch this session"),
        ("title", "Name this session"),
        ("search", "Search past conversations"),
        ("model", "Show or switch the model"),
        ("help", "What I can do"),
    ]
    .into_iter()
    .map(|(name, about)| BotCommand::new(name, about))
    .collect()
}

pub(super) struct Adapter {
    bot: Bot,
    identity: BotIdentity,
    allowed: Vec<String>,
    open_groups: Vec<i64>,
    files: Files,
    gateway: Arc<Gateway>,
    store: Arc<dyn SessionStore>,
    deliveries: mpsc::UnboundedSender<Delivery>,
}

impl Adapter {
    /// Polls until `stop`; the offset moves past a batch only once all of it is in the inbox.
    async fn poll(self: Arc<Self>, stop: CancellationToken) {
        let mut offset: i32 = 0;
        let mut backoff = Duration::from_secs(1);
        loop {
            let call = self.bot.get_updates().offset(offset).timeout(POLL_TIMEOUT);
            let result = tokio::select! {
                () = stop.cancelled() => return,
                result = call.send() => result,
            };
            let wait = match result {
                Ok(mut updates) => {
                    backoff = Duration::from_secs(1);
                    self.await_split_parts(offset, &mut updates).await;
                    let next = updates
                        .last()
                        .and_then(|u| i32::try_from(u.id.0).ok())
                        .map_or(offset, |id| id.saturating_add(1));
                    match self.accept_batch(&updates).await {
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

    /// When a batch ends with a message that may have more parts (long enough to be the first
    /// part of one the Telegram client split, or in an album), looks again for up to a second
    /// (with the same `offset`: nothing is confirmed before it is stored) for the parts that
    /// follow.
    async fn await_split_parts(
        &self,
        offset: i32,
        updates: &mut Vec<teloxide_core::types::Update>,
    ) {
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

    /// A batch of updates, parts joined; `Err` when one could not be stored.
    async fn accept_batch(
        &self,
        updates: &[teloxide_core::types::Update],
    ) -> Result<(), SubmitError> {
        let messages = updates
            .iter()
            .filter_map(|u| normalize(u, &self.identity))
            .collect();
        for message in merge_parts(messages) {
            self.accept_message(message).await?;
        }
        Ok(())
    }

    /// One message: into the inbox and to its conversation, or refused.
    pub(super) async fn accept_message(&self, message: Incoming) -> Result<(), SubmitError> {
        let open_group = !message.private && self.open_groups.contains(&message.chat_id);
        if !open_group
            && !self.is_allowed(&message)
            && !self
                .store
                .is_paired(SOURCE, &message.user_id.to_string())
                .await?
        {
            tracing::info!(
                user = message.user_id,
                username = message.username.as_deref().unwrap_or(""),
                chat = message.chat_id,
                "telegram: refused a message from a user not in telegram.allowed_users and not paired"
            );
            if message.private {
                self.offer_pairing(&message).await?;
            }
            return Ok(());
        }
        if !message.addressed && !open_group {
            tracing::debug!(
                chat = message.chat_id,
                "telegram: group message not addressed to the bot"
            );
            return Ok(());
        }
        let destination = Destination {
            chat_id: message.chat_id,
            topic_id: message.topic_id,
            reply_to: (!message.private).then_some(message.message_id),
        };
        if is_start(&message.text) {
            return self.greet(&message, destination).await;
        }
        let place = if message.private {
            Place::TelegramDm {
                chat_id: message.chat_id,
            }
        } else {
            Place::TelegramGroup {
                chat_id: message.chat_id,
                topic_id: message.topic_id,
                user_id: message.user_id,
            }
        };
        let fetched = self.files.fetch(&self.bot, &message).await;
        let inbound = Inbound {
            source: SOURCE.into(),
            platform_message_id: platform_id(&message),
            conversation_key: conversation_key(place, true),
            text: fetched.text,
            images: fetched.images,
            target: format!("{TARGET_PREFIX}{}", message.chat_id),
            meta: meta(&message, destination),
            stream: None,
        };
        match self.gateway.submit(inbound).await {
            Ok(Submission::Accepted { reply, .. }) => {
                let typing = CancellationToken::new();
                tokio::spawn(keep_typing(self.bot.clone(), destination, typing.clone()));
                let deliveries = self.deliveries.clone();
                tokio::spawn(async move {
                    let answered = reply.await;
                    typing.cancel();
                    // The reply's text is the stored row's (a retried turn keeps its first
                    // answer), so it can be sent without reading the row back.
                    if let Ok(reply) = answered {
                        let _ = deliveries.send(Delivery {
                            id: reply.outbox_id,
                            to: destination,
                            text: reply.text,
                        });
                    }
                });
                Ok(())
            }
            Ok(Submission::Duplicate { .. }) => {
                tracing::debug!(
                    update = message.update_id,
                    "telegram: duplicate update ignored"
                );
                Ok(())
            }
            Err(SubmitError::Busy) => {
                let text =
                    "I'm still working through your earlier messages; send this again in a moment.";
                if let Err(error) = send_reply(&self.bot, destination, text).await {
                    tracing::warn!(%error, "telegram: could not say the queue is full");
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// A DM from an unknown user: a pairing code for the operator to approve, within the
    /// limits of [`crate::pairing::LIMITS`] (beyond them the user is not answered).
    async fn offer_pairing(&self, message: &Incoming) -> Result<(), SubmitError> {
        let code = match crate::pairing::new_code() {
            Ok(code) => code,
            Err(error) => {
                tracing::error!(%error, "telegram: cannot make a pairing code");
                return Ok(());
            }
        };
        let outcome = self
            .store
            .pairing_request(
                &agent_core::store::NewPairing {
                    platform: SOURCE.into(),
                    user_id: message.user_id.to_string(),
                    username: message.username.clone(),
                    code_hash: crate::pairing::hash(&code),
                },
                crate::pairing::LIMITS,
            )
            .await?;
        if outcome != agent_core::store::PairingOutcome::Created {
            tracing::info!(
                user = message.user_id,
                ?outcome,
                "telegram: no pairing code given"
            );
            return Ok(());
        }
        tracing::info!(
            user = message.user_id,
            username = message.username.as_deref().unwrap_or(""),
            "telegram: pairing code given; approve with `iris pairing approve telegram <CODE>`"
        );
        let text = format!(
            "I don't know you yet. To get access, ask the operator of this bot to run:\n\n\
             `iris pairing approve telegram {code}`\n\nThe code is valid for one hour."
        );
        let to = Destination {
            chat_id: message.chat_id,
            topic_id: None,
            reply_to: None,
        };
        if let Err(error) = send_reply(&self.bot, to, &text).await {
            tracing::warn!(%error, "telegram: could not send the pairing code");
        }
        Ok(())
    }

    fn is_allowed(&self, message: &Incoming) -> bool {
        let id = message.user_id.to_string();
        let name = message
            .username
            .as_deref()
            .map(|u| format!("@{}", u.to_ascii_lowercase()));
        self.allowed.iter().any(|entry| {
            let entry = entry.trim();
            entry == id || name.as_deref() == Some(entry.to_ascii_lowercase().as_str())
        })
    }

    /// `/start`: a greeting without a model call (once per message, through the inbox).
    async fn greet(&self, message: &Incoming, to: Destination) -> Result<(), SubmitError> {
        let accepted = self
            .store
            .inbox_accept(&NewInboxItem {
                source: SOURCE.into(),
                platform_message_id: platform_id(message),
                conversation_key: format!("telegram:start:{}", message.chat_id),
                payload: json!({"text": message.text, "meta": meta(message, to)}),
            })
            .await?;
        if !accepted.fresh {
            return Ok(());
        }
        let row = self
            .store
            .answer_inbox(
                &NewOutboxItem {
                    inbox_id: Some(accepted.item.id),
                    target: format!("{TARGET_PREFIX}{}", message.chat_id),
                    payload: json!({"reply": GREETING, "meta": meta(message, to)}),
                },
                false,
                InboxState::Done,
            )
            .await?;
        if let Some(delivery) = Delivery::from_row(&row) {
            let _ = self.deliveries.send(delivery);
        }
        Ok(())
    }
}

/// `/start` or `/start@bot`, with or without a payload.
fn is_start(text: &str) -> bool {
    text.split_whitespace()
        .next()
        .is_some_and(|w| w == "/start" || w.starts_with("/start@"))
}

/// The inbox id of a message: unique per chat, the same when Telegram sends an update again.
fn platform_id(message: &Incoming) -> String {
    format!("{}:{}", message.chat_id, message.message_id)
}

fn meta(message: &Incoming, to: Destination) -> serde_json::Value {
    json!({
        "chat_id": to.chat_id,
        "topic_id": to.topic_id,
        "reply_to": to.reply_to,
        "user_id": message.user_id,
        "username": message.username,
        "update_id": message.update_id,
    })
}
