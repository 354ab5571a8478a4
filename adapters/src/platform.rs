//! The `Platform` trait (DESIGN.md §8): what the gateway needs of a chat platform, whatever it
//! is. An adapter normalises its updates into [`InboundMessage`]s (with the mention gate
//! already applied as [`InboundMessage::addressed`]), and sends, edits and shows typing in the
//! platform's own format and limits. Everything above that — access, pairing, the inbox, the
//! typing keep-alive, delivery from the outbox — is the gateway's, once for every platform.
//!
//! Receipt is explicit: every message comes as an [`Arrival`] whose `stored` the gateway
//! answers once the message is in the inbox (or was refused). An adapter confirms a message to
//! its platform (Telegram's `getUpdates` offset, a webhook's 200) only after that answer, so a
//! crash can make a platform send a message again but never lose one.

use std::path::Path;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::media::FileInfo;
use crate::split::Measure;

/// How a platform formats text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Telegram's HTML subset (`<b>`, `<i>`, `<code>`, `<pre>`, `<a>`…).
    TelegramHtml,
    /// Discord's Markdown, sent as written.
    DiscordMarkdown,
}

/// What a platform can do, and its limits.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// `telegram`, `discord`: the inbox source and the first part of conversation keys.
    pub name: &'static str,
    /// The longest message, as [`Capabilities::measure`] counts.
    pub max_message: usize,
    pub measure: Measure,
    pub dialect: Dialect,
    /// Messages can belong to threads (forum topics, Discord threads).
    pub threads: bool,
    /// How long a typing indicator lasts; it is refreshed a little sooner.
    pub typing_lasts: std::time::Duration,
}

/// Where a message was written, as far as conversations are concerned (DESIGN.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A direct message: answered always (subject to access), one conversation per chat.
    Private,
    /// A group or guild channel (with `thread` for a forum topic): one conversation per user.
    Group,
    /// A thread shared by everyone in it (Discord threads).
    SharedThread,
}

/// A file attached to a message, fetched later with [`Platform::fetch`] (only once the sender
/// is known to be allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// What the platform needs to fetch it.
    pub fetch_id: String,
    /// Stable and unique: names the saved file.
    pub unique_id: String,
    pub info: FileInfo,
}

/// A message from a platform, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    /// The platform's id of the message, unique within its chat.
    pub id: String,
    pub chat: String,
    /// The forum topic or thread, if any.
    pub thread: Option<String>,
    pub origin: Origin,
    pub user_id: String,
    pub username: Option<String>,
    /// The sender's roles where the platform has them (Discord guilds), for access by role.
    pub roles: Vec<String>,
    /// For a thread, the channel it belongs to (channel allow and ignore lists apply to both).
    pub parent_chat: Option<String>,
    /// The text (quoted context first when it is a reply); may be empty when only files came.
    pub text: String,
    pub files: Vec<FileRef>,
    /// Private chats always; elsewhere the bot was mentioned, replied to, or commanded.
    pub addressed: bool,
}

impl InboundMessage {
    /// Where the answer goes: the same chat and thread, as a reply to this message outside
    /// private chats.
    pub fn reply_address(&self) -> Address {
        Address {
            chat: self.chat.clone(),
            thread: self.thread.clone(),
            reply_to: (self.origin != Origin::Private).then(|| self.id.clone()),
        }
    }

    /// The inbox's id of the message: unique per platform, the same when it comes again.
    pub fn inbox_id(&self) -> String {
        format!("{}:{}", self.chat, self.id)
    }
}

/// Where a message is sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub chat: String,
    pub thread: Option<String>,
    /// Answer this message (threaded reply).
    pub reply_to: Option<String>,
}

/// A message handed to the gateway, and the channel on which it says the message is stored
/// (`Ok`) or could not be (`Err`: the platform should send it again).
#[derive(Debug)]
pub struct Arrival {
    pub message: InboundMessage,
    pub stored: oneshot::Sender<Result<(), String>>,
}

impl Arrival {
    /// Hands `message` over on `to` and waits until the gateway has stored it.
    pub async fn hand_over(
        to: &mpsc::Sender<Arrival>,
        message: InboundMessage,
    ) -> Result<(), String> {
        let (stored, answer) = oneshot::channel();
        to.send(Arrival { message, stored })
            .await
            .map_err(|_| "the gateway stopped taking messages".to_owned())?;
        answer
            .await
            .map_err(|_| "the gateway dropped the message".to_owned())?
    }
}

/// Whether a platform is connected, or why not: set by its intake, read by
/// [`Platform::ready`]. Cheap to clone; clones share the state.
#[derive(Debug, Clone)]
pub struct Connection(std::sync::Arc<std::sync::Mutex<Result<(), String>>>);

impl Connection {
    /// Starts as `initial`.
    pub fn new(initial: Result<(), String>) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(initial)))
    }

    pub fn set(&self, status: Result<(), String>) {
        if let Ok(mut current) = self.0.lock() {
            *current = status;
        }
    }

    pub fn get(&self) -> Result<(), String> {
        self.0
            .lock()
            .map_err(|_| "status unknown".to_owned())?
            .clone()
    }
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The platform refused or failed it; the message was not delivered (or may have been:
    /// the adapter already retried what provably was not).
    #[error("{0}")]
    Failed(String),
}

/// A chat platform.
#[async_trait::async_trait]
pub trait Platform: Send + Sync + 'static {
    fn capabilities(&self) -> Capabilities;

    /// Whether it is connected and receiving (`/readyz`); `Err` says what is wrong.
    fn ready(&self) -> Result<(), String>;

    /// Receives messages until `stop`, handing each over on `arrivals` and confirming it to
    /// the platform only once it is stored. Messages that are parts of one (an album, a text
    /// the client split) are joined before they are handed over.
    async fn run(&self, arrivals: mpsc::Sender<Arrival>, stop: CancellationToken);

    /// Downloads `file` into `path` (whole or not at all); `Err` says why not.
    async fn fetch(&self, file: &FileRef, path: &Path) -> Result<(), String>;

    /// Sends the model's Markdown as one or more messages (formatted, split at the limit, with
    /// the platform's fallbacks); returns the platform's message ids.
    async fn send(&self, to: &Address, markdown: &str) -> Result<Vec<String>, SendError>;

    /// Replaces the text of a message sent earlier.
    async fn edit(&self, to: &Address, message_id: &str, markdown: &str) -> Result<(), SendError>;

    /// Shows "typing…" in `to` (for [`Capabilities::typing_lasts`]).
    async fn typing(&self, to: &Address) -> Result<(), SendError>;

    /// Publishes the chat commands (name, description) in the platform's menu.
    async fn publish_commands(&self, commands: &[(&str, &str)]) -> Result<(), SendError>;
}
