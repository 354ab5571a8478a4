//! Chat platforms at run time, the same for every [`Platform`]: what arrives is authorised,
//! gated, its files fetched, and written to the inbox before the platform is told it is
//! stored; while its turn runs the chat shows "typing…"; the reply is written to the outbox by
//! the conversation actor and sent by one deliverer (see [`delivery`]).
//!
//! Access fails closed: only the platform's `allowed_users` (ids or @usernames) and users the
//! operator paired are answered; others are refused and logged — in a DM they get a pairing
//! code (see [`crate::pairing`]), elsewhere nothing. Outside DMs the bot answers only when
//! addressed, except in the open chats the operator listed, where every message from anyone
//! is answered.

pub mod delivery;
pub mod files;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adapters::platform::{Address, Arrival, Capabilities, InboundMessage, Origin, Platform};
use agent_core::store::{InboxState, NewInboxItem, NewOutboxItem, SessionStore};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::delivery::Delivery;
use self::files::Files;
use crate::conversation::key::{Place, conversation_key};
use crate::conversation::{Gateway, Inbound, Submission, SubmitError};

const GREETING: &str = "Hi! I'm Iris. Send me a message and I'll answer. /help lists the commands.";
const QUEUE_FULL: &str =
    "I'm still working through your earlier messages; send this again in a moment.";
/// Conversations whose reply address is remembered for notices; past it the memory restarts.
const ADDRESSES_KEPT: usize = 10_000;

/// The commands shown in a platform's menu (DESIGN.md §9).
pub const COMMANDS: &[(&str, &str)] = &[
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
];

/// Who may talk to the bot on one platform, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// User ids or @usernames.
    pub allowed_users: Vec<String>,
    /// Role ids whose members may talk to the bot (platforms with roles).
    pub allowed_roles: Vec<String>,
    /// Chats where every message is answered, from anyone.
    pub open_chats: Vec<String>,
    /// When not empty, the only group chats (channels) the bot answers in; DMs are not
    /// affected. A thread counts as its channel too.
    pub allowed_chats: Vec<String>,
    /// Group chats (channels) the bot never answers in.
    pub ignored_chats: Vec<String>,
}

impl Access {
    /// Whether `message`'s place is one the bot answers in at all.
    fn place_allowed(&self, message: &InboundMessage) -> bool {
        if message.origin == Origin::Private {
            return true;
        }
        let places = [Some(&message.chat), message.parent_chat.as_ref()];
        let listed = |list: &[String]| places.iter().flatten().any(|p| list.contains(p));
        !listed(&self.ignored_chats)
            && (self.allowed_chats.is_empty() || listed(&self.allowed_chats))
    }
}

/// Each running platform's access rules, by platform name, for a config reload to replace.
#[derive(Clone, Default)]
pub struct AccessBook(Arc<std::sync::Mutex<HashMap<&'static str, SharedAccess>>>);

/// One platform's access rules, read by its runner, replaced by a reload.
type SharedAccess = Arc<std::sync::RwLock<Access>>;

impl AccessBook {
    /// Replaces `platform`'s rules; `false` when it is not running.
    pub fn replace(&self, platform: &str, access: Access) -> bool {
        let entry = self
            .0
            .lock()
            .ok()
            .and_then(|book| book.get(platform).cloned());
        match entry.and_then(|rules| rules.write().ok().map(|mut r| *r = access)) {
            Some(()) => true,
            None => false,
        }
    }

    fn add(&self, platform: &'static str, rules: SharedAccess) {
        if let Ok(mut book) = self.0.lock() {
            book.insert(platform, rules);
        }
    }
}

/// What every platform runs with: the data directory (files users send go under it), the
/// conversation runtime, the store, the readiness checks, and two signals: `intake` stops
/// taking messages (shutdown begins), `stop` ends everything (after the drain).
#[derive(Clone)]
pub struct Runtime {
    pub home: std::path::PathBuf,
    pub gateway: Arc<Gateway>,
    pub store: Arc<dyn SessionStore>,
    pub readiness: crate::readiness::Readiness,
    /// Where each platform's access rules are kept for a reload.
    pub access: AccessBook,
    pub intake: CancellationToken,
    pub stop: CancellationToken,
}

/// Starts `platform`: its intake, the runner that stores what arrives, and the deliverer; its
/// connection becomes one of `/readyz`'s checks.
pub fn start(platform: Arc<dyn Platform>, access: Access, runtime: &Runtime) {
    let Runtime {
        home,
        gateway,
        store,
        readiness,
        access: book,
        intake,
        stop,
    } = runtime.clone();
    let caps = platform.capabilities();
    let access = Arc::new(std::sync::RwLock::new(access));
    book.add(caps.name, access.clone());
    readiness.add(caps.name, {
        let platform = platform.clone();
        Arc::new(move || platform.ready())
    });
    let (deliveries, queue) = mpsc::unbounded_channel();
    let runner = Arc::new(Runner {
        caps,
        files: Files::new(&home, caps.name),
        platform: platform.clone(),
        access,
        gateway,
        store,
        deliveries,
        addresses: Mutex::default(),
    });
    let (arrivals, arrived) = mpsc::channel(64);
    tokio::spawn({
        let platform = platform.clone();
        async move {
            if let Err(error) = platform.publish_commands(COMMANDS).await {
                tracing::warn!(platform = caps.name, %error, "could not publish the commands");
            }
        }
    });
    tokio::spawn(async move { platform.run(arrivals, intake).await });
    tokio::spawn(runner.clone().take(arrived, stop.clone()));
    tokio::spawn(runner.clone().deliver(queue, stop.clone()));
    tokio::spawn(runner.relay_notices(stop));
}

/// One platform's runner.
pub(crate) struct Runner {
    caps: Capabilities,
    platform: Arc<dyn Platform>,
    /// Replaced as a whole by a config reload.
    access: SharedAccess,
    files: Files,
    gateway: Arc<Gateway>,
    store: Arc<dyn SessionStore>,
    deliveries: mpsc::UnboundedSender<Delivery>,
    /// Where each conversation's messages came from, for notices (which answer no message).
    addresses: Mutex<HashMap<String, Address>>,
}

impl Runner {
    /// Stores what arrives, one message at a time (in the order the platform gave them), and
    /// tells the platform each is stored.
    async fn take(self: Arc<Self>, mut arrived: mpsc::Receiver<Arrival>, stop: CancellationToken) {
        loop {
            let arrival = tokio::select! {
                () = stop.cancelled() => return,
                next = arrived.recv() => match next { Some(a) => a, None => return },
            };
            let outcome = self
                .accept(arrival.message)
                .await
                .map_err(|e| e.to_string());
            let _ = arrival.stored.send(outcome);
        }
    }

    /// One message: into the inbox and to its conversation, or refused (`Ok` too). `Err` only
    /// when it could not be stored.
    async fn accept(&self, message: InboundMessage) -> Result<(), SubmitError> {
        let name = self.caps.name;
        let private = message.origin == Origin::Private;
        let access = self.access.read().map(|a| a.clone()).unwrap_or_default();
        if !access.place_allowed(&message) {
            tracing::debug!(platform = name, chat = %message.chat, "message in a chat the bot does not answer in");
            return Ok(());
        }
        let open_chat = !private && access.open_chats.contains(&message.chat);
        if !open_chat
            && !is_allowed(&access, &message)
            && !self.store.is_paired(name, &message.user_id).await?
        {
            tracing::info!(
                platform = name,
                user = %message.user_id,
                username = message.username.as_deref().unwrap_or(""),
                chat = %message.chat,
                "refused a message from a user not in {name}.allowed_users (or allowed_roles) and not paired"
            );
            if private {
                self.offer_pairing(&message).await?;
            }
            return Ok(());
        }
        if !message.addressed && !open_chat {
            tracing::debug!(platform = name, chat = %message.chat, "message not addressed to the bot");
            return Ok(());
        }
        let to = message.reply_address();
        if is_start(&message.text) {
            return self.greet(&message, &to).await;
        }
        let place = match message.origin {
            Origin::Private => Place::Dm {
                platform: name,
                chat: &message.chat,
            },
            Origin::Group => Place::Group {
                platform: name,
                chat: &message.chat,
                thread: message.thread.as_deref(),
                user: &message.user_id,
            },
            Origin::SharedThread => Place::SharedThread {
                platform: name,
                thread: message.thread.as_deref().unwrap_or(&message.chat),
            },
        };
        let key = conversation_key(place, true);
        let fetched = self.files.fetch(self.platform.as_ref(), &message).await;
        let inbound = Inbound {
            source: name.into(),
            platform_message_id: message.inbox_id(),
            conversation_key: key.clone(),
            text: fetched.text,
            images: fetched.images,
            target: format!("{name}:{}", message.chat),
            meta: meta(&message, &to),
            stream: None,
        };
        match self.gateway.submit(inbound).await {
            Ok(Submission::Accepted { reply, .. }) => {
                self.remember(key, &to);
                let typing = CancellationToken::new();
                tokio::spawn(keep_typing(
                    self.platform.clone(),
                    to.clone(),
                    typing.clone(),
                ));
                let deliveries = self.deliveries.clone();
                tokio::spawn(async move {
                    let answered = reply.await;
                    typing.cancel();
                    // The reply's text is the stored row's (a retried turn keeps its first
                    // answer), so it can be sent without reading the row back.
                    if let Ok(reply) = answered {
                        let _ = deliveries.send(Delivery {
                            id: reply.outbox_id,
                            to,
                            text: reply.text,
                        });
                    }
                });
                Ok(())
            }
            Ok(Submission::Duplicate { .. }) => {
                tracing::debug!(platform = name, message = %message.inbox_id(), "duplicate message ignored");
                Ok(())
            }
            Err(SubmitError::Busy) => {
                if let Err(error) = self.platform.send(&to, QUEUE_FULL).await {
                    tracing::warn!(platform = name, %error, "could not say the queue is full");
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    fn remember(&self, key: String, to: &Address) {
        if let Ok(mut addresses) = self.addresses.lock() {
            if addresses.len() >= ADDRESSES_KEPT {
                addresses.clear();
            }
            addresses.insert(
                key,
                Address {
                    reply_to: None,
                    ..to.clone()
                },
            );
        }
    }

    /// A DM from an unknown user: a pairing code for the operator to approve, within the
    /// limits of [`crate::pairing::LIMITS`] (beyond them the user is not answered).
    async fn offer_pairing(&self, message: &InboundMessage) -> Result<(), SubmitError> {
        let name = self.caps.name;
        let code = match crate::pairing::new_code() {
            Ok(code) => code,
            Err(error) => {
                tracing::error!(platform = name, %error, "cannot make a pairing code");
                return Ok(());
            }
        };
        let outcome = self
            .store
            .pairing_request(
                &agent_core::store::NewPairing {
                    platform: name.into(),
                    user_id: message.user_id.clone(),
                    username: message.username.clone(),
                    code_hash: crate::pairing::hash(&code),
                },
                crate::pairing::LIMITS,
            )
            .await?;
        if outcome != agent_core::store::PairingOutcome::Created {
            tracing::info!(platform = name, user = %message.user_id, ?outcome, "no pairing code given");
            return Ok(());
        }
        tracing::info!(
            platform = name,
            user = %message.user_id,
            username = message.username.as_deref().unwrap_or(""),
            "pairing code given; approve with `iris pairing approve {name} <CODE>`"
        );
        let text = format!(
            "I don't know you yet. To get access, ask the operator of this bot to run:\n\n\
             `iris pairing approve {name} {code}`\n\nThe code is valid for one hour."
        );
        let to = Address {
            reply_to: None,
            ..message.reply_address()
        };
        if let Err(error) = self.platform.send(&to, &text).await {
            tracing::warn!(platform = name, %error, "could not send the pairing code");
        }
        Ok(())
    }

    /// `/start`: a greeting without a model call (once per message, through the inbox).
    async fn greet(&self, message: &InboundMessage, to: &Address) -> Result<(), SubmitError> {
        let name = self.caps.name;
        let accepted = self
            .store
            .inbox_accept(&NewInboxItem {
                source: name.into(),
                platform_message_id: message.inbox_id(),
                conversation_key: format!("{name}:start:{}", message.chat),
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
                    target: format!("{name}:{}", message.chat),
                    payload: json!({"reply": GREETING, "meta": meta(message, to)}),
                },
                false,
                InboxState::Done,
            )
            .await?;
        if let Some(delivery) = Delivery::from_row(name, &row) {
            let _ = self.deliveries.send(delivery);
        }
        Ok(())
    }
}

/// Whether `message`'s sender is allowed by id, @username or role.
fn is_allowed(access: &Access, message: &InboundMessage) -> bool {
    let name = message
        .username
        .as_deref()
        .map(|u| format!("@{}", u.to_ascii_lowercase()));
    let by_user = access.allowed_users.iter().any(|entry| {
        let entry = entry.trim();
        entry == message.user_id || name.as_deref() == Some(entry.to_ascii_lowercase().as_str())
    });
    by_user
        || message
            .roles
            .iter()
            .any(|role| access.allowed_roles.contains(role))
}

/// Shows "typing…" in `to` until `done` is cancelled, refreshed a second before it would lapse.
async fn keep_typing(platform: Arc<dyn Platform>, to: Address, done: CancellationToken) {
    let every = platform
        .capabilities()
        .typing_lasts
        .saturating_sub(Duration::from_secs(1))
        .max(Duration::from_secs(1));
    loop {
        if let Err(error) = platform.typing(&to).await {
            tracing::debug!(%error, "typing indicator failed");
        }
        tokio::select! {
            () = done.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// `/start` or `/start@bot`, with or without a payload.
fn is_start(text: &str) -> bool {
    text.split_whitespace()
        .next()
        .is_some_and(|w| w == "/start" || w.starts_with("/start@"))
}

/// What is kept with a message and its reply: where the reply goes, and who wrote.
fn meta(message: &InboundMessage, to: &Address) -> serde_json::Value {
    json!({
        "chat": to.chat,
        "thread": to.thread,
        "reply_to": to.reply_to,
        "user_id": message.user_id,
        "username": message.username,
    })
}
