//! Discord as a [`Platform`]: serenity's gateway client for what arrives, Discord's REST API
//! (see [`rest`]) for what is sent.
//!
//! The gateway: one client with the guild-message, direct-message and message-content intents;
//! serenity resumes a dropped connection (Discord replays what was missed) and re-identifies
//! when it must; a message seen twice runs once because the inbox deduplicates on its id. If
//! Discord refuses the message-content intent the log says how to enable it. serenity runs each
//! event handler as its own task, so messages are put back in their (snowflake) order before
//! they are placed (threads) and handed over. Discord cannot be asked to send a message again, so a message that
//! could not be stored is retried here a few times before it is logged as lost.
//!
//! With a configured base URL (a test's fake) serenity's REST client is pointed there with its
//! rate limiter off (the limiter ignores the base URL), and `/gateway` is asked first: if it
//! fails, connecting fails, instead of serenity falling back to the real Discord.

pub mod inbound;
pub mod rest;
pub mod threads;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serenity::all::{
    CommandDataOptionValue, CommandInteraction, Context, EventHandler, GatewayIntents, Interaction,
    Message, Ready,
};
use serenity::http::HttpBuilder;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::platform::{
    Address, Arrival, Capabilities, Connection, Dialect, FileRef, InboundMessage, Origin, Platform,
    SendError,
};
use rest::Rest;

/// Discord's limit on a message's content, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2000;
/// The real Discord; any other base URL is a test's fake or a proxy.
pub const DISCORD_URL: &str = "https://discord.com";
/// How long messages are held to put them back in order.
const REORDER_WINDOW: Duration = Duration::from_millis(50);
/// Attempts at storing a message before it is logged as lost.
const STORE_ATTEMPTS: u32 = 5;

/// How to reach Discord and what to take.
#[derive(Debug, Clone)]
pub struct DiscordSettings {
    pub token: String,
    pub api_url: String,
    /// Answer other bots too.
    pub allow_bots: bool,
    pub max_file_bytes: u64,
    pub shards: u32,
    /// A mention in a channel starts a thread, where the conversation goes on.
    pub auto_thread: bool,
    /// Replies longer than this many characters come as an `answer.md` attachment with a short
    /// preview instead of several messages; 0 never.
    pub reply_as_file_over: usize,
}

/// Why the adapter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("discord: {0}")]
    Rest(#[from] rest::RestError),
    #[error(
        "discord: the gateway URL could not be had from {url}/api/v10/gateway ({reason}); not connecting"
    )]
    Gateway { url: String, reason: String },
    #[error("discord: /users/@me did not name the bot")]
    NoUser,
}

/// The Discord adapter.
pub struct DiscordPlatform {
    settings: DiscordSettings,
    rest: Arc<Rest>,
    bot_id: u64,
    /// The application's id, known once READY arrived (slash commands need it).
    application: Arc<OnceLock<String>>,
    ready: Arc<tokio::sync::Notify>,
    threads: Arc<threads::Threads>,
    /// Whether the gateway session is up, or why not.
    status: Connection,
}

impl DiscordPlatform {
    /// Checks the token (`/users/@me`) and the gateway URL.
    pub async fn connect(settings: DiscordSettings) -> Result<Self, ConnectError> {
        let rest = Rest::new(&settings.api_url, &settings.token)?;
        let me = rest.current_user().await?;
        let bot_id = me["id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .ok_or(ConnectError::NoUser)?;
        let gateway = rest
            .gateway_url()
            .await
            .map_err(|e| ConnectError::Gateway {
                url: settings.api_url.clone(),
                reason: e.to_string(),
            })?;
        tracing::info!(bot = me["username"].as_str().unwrap_or(""), %gateway, "discord: token accepted");
        Ok(Self {
            settings,
            rest: Arc::new(rest),
            bot_id,
            application: Arc::default(),
            ready: Arc::default(),
            threads: Arc::default(),
            status: Connection::new(Err("not connected to the Discord gateway yet".into())),
        })
    }

    fn http(&self) -> serenity::http::Http {
        let builder = HttpBuilder::new(&self.settings.token);
        if self.settings.api_url.trim_end_matches('/') == DISCORD_URL {
            builder.build()
        } else {
            builder
                .proxy(self.settings.api_url.trim_end_matches('/'))
                .ratelimiter_disabled(true)
                .build()
        }
    }

    /// Runs serenity's client until `stop`; started again after it fails.
    async fn run_gateway(&self, handler: Handler, stop: &CancellationToken) {
        let intents = GatewayIntents::GUILD_MESSAGES
            | GatewayIntents::DIRECT_MESSAGES
            | GatewayIntents::MESSAGE_CONTENT;
        let mut backoff = Duration::from_secs(5);
        loop {
            let built = serenity::client::ClientBuilder::new_with_http(self.http(), intents)
                .event_handler(handler.clone())
                .await;
            let mut client = match built {
                Ok(client) => client,
                Err(error) => {
                    tracing::error!(%error, "discord: could not build the client");
                    if sleep_or_stop(backoff, stop).await {
                        return;
                    }
                    continue;
                }
            };
            let shards = client.shard_manager.clone();
            let outcome = tokio::select! {
                () = stop.cancelled() => {
                    shards.shutdown_all().await;
                    return;
                }
                outcome = client.start_shards(self.settings.shards.max(1)) => outcome,
            };
            self.status.set(Err(match &outcome {
                Err(error) => format!("the gateway connection ended: {error}"),
                Ok(()) => "the gateway connection ended".to_owned(),
            }));
            match outcome {
                Err(serenity::Error::Gateway(
                    serenity::gateway::GatewayError::DisallowedGatewayIntents,
                )) => {
                    tracing::error!(
                        "discord refused the message content intent: enable \"Message Content Intent\" for this bot in the Discord Developer Portal (Bot → Privileged Gateway Intents); retrying in a minute"
                    );
                    backoff = Duration::from_secs(60);
                }
                Err(error) => tracing::error!(%error, "discord: the gateway connection ended"),
                Ok(()) => tracing::warn!("discord: the gateway connection ended"),
            }
            if sleep_or_stop(backoff, stop).await {
                return;
            }
        }
    }
}

/// Sleeps `wait`; `true` when `stop` came first.
async fn sleep_or_stop(wait: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(wait) => false,
    }
}

/// serenity's event handler: messages (and slash commands, as the typed command) normalised
/// and queued for the sequencer.
#[derive(Clone)]
struct Handler {
    bot_id: u64,
    allow_bots: bool,
    queue: mpsc::UnboundedSender<InboundMessage>,
    application: Arc<OnceLock<String>>,
    ready: Arc<tokio::sync::Notify>,
    rest: Arc<Rest>,
    status: Connection,
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn message(&self, _ctx: Context, message: Message) {
        if let Some(inbound) = inbound::normalize(&message, self.bot_id, self.allow_bots) {
            let _ = self.queue.send(inbound);
        }
    }

    /// A slash command runs as the same command typed: Discord gets an (only-you-see-it)
    /// acknowledgement within its 3 s, and the answer comes as a message in the channel.
    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        let Interaction::Command(command) = interaction else {
            return;
        };
        let message = slash_command(&command);
        let ack = format!("Running `{}`…", message.text);
        if let Err(error) = self
            .rest
            .respond_to_interaction(&command.id.get().to_string(), &command.token, &ack)
            .await
        {
            tracing::warn!(%error, "discord: could not acknowledge a slash command");
        }
        let _ = self.queue.send(message);
    }

    async fn shard_stage_update(&self, _ctx: Context, event: serenity::all::ShardStageUpdateEvent) {
        use serenity::gateway::ConnectionStage;
        match event.new {
            ConnectionStage::Connected => self.status.set(Ok(())),
            stage => self.status.set(Err(format!("gateway connection: {stage}"))),
        }
    }

    async fn ready(&self, _ctx: Context, ready: Ready) {
        self.status.set(Ok(()));
        let _ = self.application.set(ready.application.id.get().to_string());
        self.ready.notify_waiters();
        tracing::info!(bot = %ready.user.name, guilds = ready.guilds.len(), "discord connected");
    }
}

/// A slash command as the message that types it (`/name args`), always addressed to the bot.
fn slash_command(command: &CommandInteraction) -> InboundMessage {
    let mut text = format!("/{}", command.data.name);
    for option in &command.data.options {
        if let CommandDataOptionValue::String(value) = &option.value {
            text.push(' ');
            text.push_str(value);
        }
    }
    InboundMessage {
        id: command.id.get().to_string(),
        chat: command.channel_id.get().to_string(),
        thread: None,
        origin: if command.guild_id.is_some() {
            Origin::Group
        } else {
            Origin::Private
        },
        user_id: command.user.id.get().to_string(),
        username: Some(command.user.name.clone()),
        roles: command
            .member
            .as_ref()
            .map(|m| m.roles.iter().map(|r| r.get().to_string()).collect())
            .unwrap_or_default(),
        parent_chat: None,
        text,
        files: Vec::new(),
        addressed: true,
    }
}

/// Hands messages over in snowflake order: what arrived within [`REORDER_WINDOW`] of the
/// first is sorted, then stored one by one (retried when storing fails).
/// What placing messages in threads needs.
struct Places {
    rest: Arc<Rest>,
    threads: Arc<threads::Threads>,
    auto_thread: bool,
}

/// Threads are placed here, in order, not in the concurrent handlers: whether the bot is in a
/// thread depends on the messages before.
async fn sequence(
    mut queue: mpsc::UnboundedReceiver<InboundMessage>,
    arrivals: mpsc::Sender<Arrival>,
    places: Places,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            next = queue.recv() => match next { Some(m) => m, None => return },
        };
        tokio::time::sleep(REORDER_WINDOW).await;
        let mut batch = vec![first];
        while let Ok(more) = queue.try_recv() {
            batch.push(more);
        }
        batch.sort_by_key(|m| m.id.parse::<u64>().unwrap_or(u64::MAX));
        for mut message in batch {
            places
                .threads
                .place(&places.rest, &mut message, places.auto_thread)
                .await;
            let id = message.id.clone();
            let mut attempt = 0;
            loop {
                attempt += 1;
                match Arrival::hand_over(&arrivals, message.clone()).await {
                    Ok(()) => break,
                    Err(error) if attempt < STORE_ATTEMPTS => {
                        tracing::warn!(%error, message = %id, "discord: could not store a message; retrying");
                        if sleep_or_stop(Duration::from_millis(500 << attempt), &stop).await {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::error!(%error, message = %id, "discord: a message could not be stored and is lost (Discord does not send it again)");
                        break;
                    }
                }
            }
        }
    }
}

/// The message that carries a long reply as a file: its first paragraph (clipped), and a word
/// about the attachment.
fn file_preview(markdown: &str) -> String {
    const PREVIEW: usize = 300;
    let first = markdown
        .split("\n\n")
        .find(|p| !p.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut preview: String = first.chars().take(PREVIEW).collect();
    if first.chars().count() > PREVIEW || first.contains("```") {
        // A clipped preview must not leave a code fence open.
        preview = preview.replace("```", "");
        preview.push('…');
    }
    format!("{preview}\n\n(The whole answer is attached as answer.md.)")
}

fn failed(error: rest::RestError) -> SendError {
    SendError::Failed(error.to_string())
}

#[async_trait::async_trait]
impl Platform for DiscordPlatform {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "discord",
            max_message: MAX_MESSAGE_CHARS,
            measure: crate::split::chars,
            dialect: Dialect::DiscordMarkdown,
            threads: true,
            typing_lasts: Duration::from_secs(10),
        }
    }

    fn ready(&self) -> Result<(), String> {
        self.status.get()
    }

    async fn run(&self, arrivals: mpsc::Sender<Arrival>, stop: CancellationToken) {
        let (queue, queued) = mpsc::unbounded_channel();
        let handler = Handler {
            bot_id: self.bot_id,
            allow_bots: self.settings.allow_bots,
            queue,
            application: self.application.clone(),
            ready: self.ready.clone(),
            rest: self.rest.clone(),
            status: self.status.clone(),
        };
        let places = Places {
            rest: self.rest.clone(),
            threads: self.threads.clone(),
            auto_thread: self.settings.auto_thread,
        };
        let sequencer = tokio::spawn(sequence(queued, arrivals, places, stop.clone()));
        self.run_gateway(handler, &stop).await;
        sequencer.abort();
    }

    async fn fetch(&self, file: &FileRef, path: &Path) -> Result<(), String> {
        if file.info.bytes > self.settings.max_file_bytes {
            return Err(format!(
                "larger than the {} limit",
                crate::media::human_bytes(self.settings.max_file_bytes)
            ));
        }
        let bytes = self
            .rest
            .download(&file.fetch_id, self.settings.max_file_bytes)
            .await?;
        crate::media::write_whole(path, &bytes).await
    }

    async fn send(&self, to: &Address, markdown: &str) -> Result<Vec<String>, SendError> {
        let over = self.settings.reply_as_file_over;
        if over > 0 && crate::split::chars(markdown) > over {
            let channel = to.thread.as_deref().unwrap_or(&to.chat);
            let id = self
                .rest
                .create_message_with_file(
                    channel,
                    &file_preview(markdown),
                    to.reply_to.as_deref(),
                    ("answer.md", markdown),
                )
                .await
                .map_err(failed)?;
            if let Some(thread) = &to.thread {
                self.threads.joined(thread);
            }
            return Ok(vec![id]);
        }
        let mut ids = Vec::new();
        let parts = crate::split::split(markdown, MAX_MESSAGE_CHARS, crate::split::chars);
        for (i, part) in parts.iter().enumerate() {
            // Only the first part answers the user's message; the rest follow it.
            let reply_to = if i == 0 { to.reply_to.as_deref() } else { None };
            let channel = to.thread.as_deref().unwrap_or(&to.chat);
            let id = self
                .rest
                .create_message(channel, part, reply_to)
                .await
                .map_err(failed)?;
            ids.push(id);
        }
        if let Some(thread) = &to.thread {
            self.threads.joined(thread);
        }
        Ok(ids)
    }

    async fn edit(&self, to: &Address, message_id: &str, markdown: &str) -> Result<(), SendError> {
        if crate::split::chars(markdown) > MAX_MESSAGE_CHARS {
            return Err(SendError::Failed(
                "the new text is longer than one Discord message".into(),
            ));
        }
        let channel = to.thread.as_deref().unwrap_or(&to.chat);
        self.rest
            .edit_message(channel, message_id, markdown)
            .await
            .map_err(failed)
    }

    async fn typing(&self, to: &Address) -> Result<(), SendError> {
        let channel = to.thread.as_deref().unwrap_or(&to.chat);
        self.rest.typing(channel).await.map_err(failed)
    }

    async fn publish_commands(&self, commands: &[(&str, &str)]) -> Result<(), SendError> {
        let application = match self.application.get() {
            Some(id) => id.clone(),
            None => {
                let waited = tokio::time::timeout(Duration::from_secs(60), async {
                    loop {
                        let notified = self.ready.notified();
                        if let Some(id) = self.application.get() {
                            return id.clone();
                        }
                        notified.await;
                    }
                })
                .await;
                waited.map_err(|_| {
                    SendError::Failed("no READY from the gateway within a minute".into())
                })?
            }
        };
        // Each takes its arguments as one optional text option, typed as after the command.
        let body: Vec<serde_json::Value> = commands
            .iter()
            .map(|(name, about)| {
                serde_json::json!({
                    "name": name, "description": about, "type": 1,
                    "options": [{"name": "args", "description": "what follows the command", "type": 3, "required": false}],
                })
            })
            .collect();
        self.rest
            .set_commands(&application, &serde_json::Value::Array(body))
            .await
            .map_err(failed)
    }
}
