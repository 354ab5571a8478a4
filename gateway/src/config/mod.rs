//! Configuration: defaults < `iris.toml` < environment (`IRIS__SECTION__KEY`).
//!
//! Every key is documented here and in `deploy/iris.example.toml` (a test parses that file).
//! Parsing is strict: an unknown key is an error naming the key and where it came from, so a
//! typo never silently falls back to a default. Secrets never sit in the file: a key ending in
//! `_env` names the environment variable holding the secret, and [`Config::secret`] reads it
//! verbatim (no number parsing, an empty variable counts as unset).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

mod tools;

pub use tools::{McpConfig, McpServerEntry, SearchScopeConfig, ToolsConfig};

/// A snapshot of the process environment. Loading reads only this, so tests can pass their
/// own instead of changing the real environment.
pub type Env = HashMap<String, String>;

/// Where Iris keeps its state when nothing else is configured: `$IRIS_HOME`, else `~/.iris`.
pub fn iris_home(env: &Env) -> PathBuf {
    if let Some(home) = env.get("IRIS_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    match env.get("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".iris"),
        None => PathBuf::from(".iris"),
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The HTTP server: webhook, API, health, metrics, admin.
    pub server: ServerConfig,
    /// The session store.
    pub store: StoreConfig,
    /// The main model.
    pub llm: LlmConfig,
    /// Context compression.
    pub compression: CompressionConfig,
    /// The conversation loop.
    pub agent: AgentConfig,
    /// The built-in tools.
    pub tools: ToolsConfig,
    /// MCP servers whose tools the agent may call.
    pub mcp: McpConfig,
    /// `POST /hooks/<route>`.
    pub webhook: WebhookConfig,
    /// The OpenAI-compatible endpoint.
    pub api: ApiConfig,
    /// The Telegram adapter.
    pub telegram: TelegramConfig,
    /// The Discord adapter.
    pub discord: DiscordConfig,
    /// Logging.
    pub log: LogConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP server.
    pub bind: String,
    /// Names the variable holding the admin API token; without it the admin API is closed.
    pub admin_token_env: String,
    /// On SIGTERM, how long running turns may take to finish before the process exits (what
    /// is left is resumed on the next start).
    pub shutdown_grace_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8787".into(),
            admin_token_env: "IRIS_ADMIN_TOKEN".into(),
            shutdown_grace_secs: 30,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://user@host/db`. Unset: `DATABASE_URL` if set, else
    /// `sqlite://$IRIS_HOME/state.db`.
    pub url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    pub provider: String,
    /// The API base URL.
    pub base_url: String,
    /// The model name sent to the provider.
    pub model: String,
    /// Names the variable holding the API key. Unset: `OPENAI_API_KEY` or `ANTHROPIC_API_KEY`
    /// by provider. The variable may be unset for local servers.
    pub api_key_env: Option<String>,
    /// The model's context window in tokens.
    pub context_length: u64,
    /// The most tokens one answer may use.
    pub max_output_tokens: u64,
    /// Stream answers (OpenAI-compatible servers; Anthropic always streams).
    pub stream: bool,
    pub connect_timeout_secs: u64,
    /// Until the first byte of the answer.
    pub first_token_timeout_secs: u64,
    /// Between two chunks of a streamed answer.
    pub idle_timeout_secs: u64,
    /// US dollars per million tokens, for the cost estimate (0 = free or unknown).
    pub input_price_per_mtok: f64,
    pub output_price_per_mtok: f64,
    /// Cached prompt tokens; the input price when unset.
    pub cache_read_price_per_mtok: Option<f64>,
    pub cache_write_price_per_mtok: Option<f64>,
    /// The model takes images (photos sent in chat go to it as image parts; otherwise it gets
    /// their text notes only). Unset: guessed from the model name ([`LlmConfig::sees_images`]).
    pub vision: Option<bool>,
    /// Providers tried in order when this one fails (same keys, no nesting).
    pub fallback: Vec<LlmConfig>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            provider: "openai".into(),
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: None,
            context_length: 128_000,
            max_output_tokens: 4096,
            stream: true,
            connect_timeout_secs: 10,
            first_token_timeout_secs: 120,
            idle_timeout_secs: 60,
            input_price_per_mtok: 0.0,
            output_price_per_mtok: 0.0,
            cache_read_price_per_mtok: None,
            cache_write_price_per_mtok: None,
            vision: None,
            fallback: Vec::new(),
        }
    }
}

/// Model-name fragments of families that take images, for when `vision` is unset.
const VISION_FAMILIES: &[&str] = &[
    "gpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-5",
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "gemini",
    "vision",
    "-vl",
    "llava",
    "pixtral",
    "gemma-3",
    "llama-4",
    "minicpm-v",
];
/// Name beginnings of OpenAI's reasoning models that take images (`o3-mini` does not).
const VISION_PREFIXES: &[&str] = &["o1", "o3", "o4"];

impl LlmConfig {
    /// `vision` when set, else whether the model's name is of a family known to take images.
    pub fn sees_images(&self) -> bool {
        self.vision.unwrap_or_else(|| {
            let name = self.model.to_ascii_lowercase();
            let base = name.rsplit('/').next().unwrap_or(&name);
            VISION_FAMILIES.iter().any(|family| name.contains(family))
                || (VISION_PREFIXES.iter().any(|p| base.starts_with(p))
                    && !base.starts_with("o3-mini")
                    && !base.starts_with("o1-mini"))
        })
    }

    /// The variable that holds this provider's key.
    pub fn key_env(&self) -> &str {
        match (&self.api_key_env, self.provider.as_str()) {
            (Some(name), _) => name,
            (None, "anthropic") => "ANTHROPIC_API_KEY",
            (None, _) => "OPENAI_API_KEY",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    /// Compress automatically when the context grows past the threshold.
    pub enabled: bool,
    /// Threshold as a share of the context length.
    pub threshold_percent: f64,
    /// The threshold never goes below this many tokens.
    pub min_threshold_tokens: u64,
    /// Messages after the system prompt that are never compressed.
    pub protect_first_n: u32,
    /// Share of the threshold kept verbatim as the recent tail.
    pub summary_target_ratio: f64,
    /// Before compressing, let the model save what it wants to keep with the memory tool
    /// (one extra model call per compression).
    pub memory_flush: bool,
    /// The model that writes summaries; defaults to the main model.
    pub model: Option<LlmConfig>,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_percent: 0.50,
            min_threshold_tokens: 64_000,
            protect_first_n: 3,
            summary_target_ratio: 0.20,
            memory_flush: true,
            model: None,
        }
    }
}

/// What a conversation does with messages that arrive while a turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BusyMode {
    #[default]
    Queue,
    Interrupt,
    Steer,
    Collect,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Tool-loop iterations before one last call asks for a final answer.
    pub max_iterations: u32,
    /// The default busy mode: queue | interrupt | steer | collect.
    pub busy_mode: BusyMode,
    /// The system prompt of new sessions.
    pub system_prompt: String,
    /// The longest a turn may take, retries included.
    pub turn_timeout_secs: u64,
    /// Model calls in flight at once, across all conversations.
    pub max_concurrent_model_calls: u32,
    /// Messages a conversation may have waiting while a turn runs.
    pub queue_cap: u32,
    /// A conversation idle this long leaves memory (its state stays in the store).
    pub idle_ttl_secs: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 90,
            busy_mode: BusyMode::Queue,
            system_prompt: "You are a helpful assistant.".into(),
            turn_timeout_secs: 900,
            max_concurrent_model_calls: 16,
            queue_cap: 32,
            idle_ttl_secs: 1800,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Serve `POST /hooks/<route>`.
    pub enabled: bool,
    /// Larger bodies get 413.
    pub max_body_bytes: u64,
    /// How long a `wait: true` call waits before answering 202.
    pub sync_timeout_secs: u64,
    /// Accepted calls per route per minute (counted after authentication); more get 429.
    pub rate_limit_per_minute: u32,
    /// Routes by name.
    pub routes: BTreeMap<String, WebhookRoute>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_body_bytes: 1_048_576,
            sync_timeout_secs: 120,
            rate_limit_per_minute: 120,
            routes: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookRoute {
    /// Names the variable holding the route's bearer token.
    pub token_env: Option<String>,
    /// Names the variable holding the route's HMAC-SHA256 secret.
    pub secret_env: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Serve `/v1/chat/completions` and `/v1/models`.
    pub enabled: bool,
    /// Names the variable holding the API key clients must send.
    pub key_env: String,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            key_env: "IRIS_API_KEY".into(),
        }
    }
}

/// How the Telegram adapter receives updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TelegramMode {
    #[default]
    Polling,
    Webhook,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Connect to Telegram.
    pub enabled: bool,
    /// Names the variable holding the bot token.
    pub token_env: String,
    /// The Bot API base URL (a local Bot API server, or the tests' fake).
    pub api_url: String,
    /// polling | webhook.
    pub mode: TelegramMode,
    /// User ids or @usernames allowed to talk to the bot; others get pairing codes in DMs.
    pub allowed_users: Vec<String>,
    /// Group chat ids where the bot answers every message, from anyone in the group (the
    /// group itself is allowed); elsewhere in groups it answers only when addressed, and only
    /// allowed or paired users.
    pub open_groups: Vec<i64>,
    /// Webhook mode: the public HTTPS URL Telegram posts updates to; it must reach this
    /// server's `POST /telegram/webhook`.
    pub webhook_url: Option<String>,
    /// Webhook mode: names the variable holding the secret Telegram sends back in
    /// `X-Telegram-Bot-Api-Secret-Token` (1–256 of `A-Z a-z 0-9 _ -`).
    pub webhook_secret_env: String,
    /// Files users send larger than this many MiB are not downloaded (the Bot API serves at
    /// most 20); the message still runs, with a note that the file was not fetched.
    pub max_file_mb: u64,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            mode: TelegramMode::Polling,
            allowed_users: Vec::new(),
            open_groups: Vec::new(),
            webhook_url: None,
            webhook_secret_env: "TELEGRAM_WEBHOOK_SECRET".into(),
            max_file_mb: 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// Connect to Discord.
    pub enabled: bool,
    /// Names the variable holding the bot token.
    pub token_env: String,
    /// REST base; requests go to `<api_url>/api/v10/…` (a proxy, or the tests' fake).
    pub api_url: String,
    /// User ids or @usernames allowed to talk to the bot; others get pairing codes in DMs.
    pub allowed_users: Vec<String>,
    /// Role ids whose members may talk to the bot in guilds.
    pub allowed_roles: Vec<String>,
    /// When not empty, the only guild channels the bot answers in (DMs are not affected).
    pub allowed_channels: Vec<String>,
    /// Guild channels the bot never answers in.
    pub ignored_channels: Vec<String>,
    /// Channel ids where the bot answers every message, from anyone in them (elsewhere in
    /// guilds it answers only when mentioned or replied to, and only allowed or paired users).
    pub free_response_channels: Vec<String>,
    /// Answer other bots' messages too (they are ignored by default).
    pub allow_bots: bool,
    /// Attachments larger than this many MiB are not downloaded.
    pub max_file_mb: u64,
    /// Gateway shards this process runs (1 is right below 2,500 guilds).
    pub shards: u32,
    /// A mention in a channel starts a thread from that message; the conversation goes on
    /// there (threads are shared by everyone in them, and answered without a mention).
    pub auto_thread: bool,
    /// Replies longer than this many characters come as an `answer.md` attachment with a
    /// short preview instead of several messages (0: always as messages).
    pub reply_as_file_over_chars: u64,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: "https://discord.com".into(),
            allowed_users: Vec::new(),
            allowed_roles: Vec::new(),
            allowed_channels: Vec::new(),
            ignored_channels: Vec::new(),
            free_response_channels: Vec::new(),
            allow_bots: false,
            max_file_mb: 20,
            shards: 1,
            auto_thread: false,
            reply_as_file_over_chars: 0,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Pretty,
    Json,
}

/// How often the log file rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogRotation {
    Hourly,
    #[default]
    Daily,
    Never,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter: `info`, `debug`, `iris=debug,sqlx=warn`… (`RUST_LOG` overrides).
    pub level: String,
    /// pretty | json.
    pub format: LogFormat,
    /// Also write to rotating files under `$IRIS_HOME/logs/`.
    pub file: bool,
    /// hourly | daily | never.
    pub rotation: LogRotation,
    /// Rotated files kept.
    pub max_files: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Pretty,
            file: false,
            rotation: LogRotation::Daily,
            max_files: 7,
        }
    }
}

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// `$IRIS_HOME`.
    pub home: PathBuf,
    /// The environment it was loaded from; secrets are read from here.
    pub env: Arc<Env>,
    /// The first run's local model server this configuration was pointed at
    /// ([`crate::local_model::adopt`]), if any.
    pub local_model: Option<String>,
}

impl Loaded {
    /// Reads a secret verbatim from the environment; empty counts as unset. Never parsed:
    /// a token like `0012345` stays `0012345`.
    pub fn secret(&self, name: &str) -> Option<String> {
        self.env.get(name).filter(|v| !v.is_empty()).cloned()
    }

    /// The store URL: the configured one, else `DATABASE_URL`, else SQLite under `$IRIS_HOME`.
    pub fn store_url(&self) -> String {
        if let Some(url) = &self.config.store.url {
            return expand_home(url, &self.home, &self.env);
        }
        if let Some(url) = self.secret("DATABASE_URL") {
            return url;
        }
        format!("sqlite://{}", self.home.join("state.db").display())
    }

    /// Every secret value this configuration can reach, for the log redactor.
    pub fn secret_values(&self) -> Vec<String> {
        let c = &self.config;
        let mut names: Vec<&str> = vec![
            c.server.admin_token_env.as_str(),
            c.api.key_env.as_str(),
            c.telegram.token_env.as_str(),
            c.telegram.webhook_secret_env.as_str(),
            c.discord.token_env.as_str(),
            c.llm.key_env(),
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
        ];
        names.extend(c.llm.fallback.iter().map(LlmConfig::key_env));
        if let Some(model) = &c.compression.model {
            names.push(model.key_env());
        }
        for route in c.webhook.routes.values() {
            names.extend(route.token_env.as_deref());
            names.extend(route.secret_env.as_deref());
        }
        for server in c.mcp.servers.values() {
            names.extend(server.secret_env_names());
        }
        let mut values: Vec<String> = names.into_iter().filter_map(|n| self.secret(n)).collect();
        let url = self.store_url();
        if let Some(password) = url_password(&url) {
            values.push(password);
        }
        values
    }
}

/// The password inside `scheme://user:password@host…`, if any.
fn url_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split('@').next().filter(|_| rest.contains('@'))?;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then(|| password.to_owned())
}

/// Expands `~/` and `$IRIS_HOME` in a `sqlite://` URL.
fn expand_home(url: &str, home: &Path, env: &Env) -> String {
    let url = url.replace("$IRIS_HOME", &home.display().to_string());
    match (url.strip_prefix("sqlite://~/"), env.get("HOME")) {
        (Some(rest), Some(user_home)) => {
            format!("sqlite://{}", Path::new(&user_home).join(rest).display())
        }
        _ => url,
    }
}

/// Loads the configuration from the process environment; see [`load_with`].
pub fn load(explicit: Option<&Path>) -> Result<Loaded> {
    load_with(explicit, std::env::vars().collect())
}

/// Loads the configuration: `explicit` (from `--config`), else `$IRIS_HOME/iris.toml` when it
/// exists, layered over the defaults and under `IRIS__SECTION__KEY` variables of `env`.
pub fn load_with(explicit: Option<&Path>, env: Env) -> Result<Loaded> {
    let home = iris_home(&env);
    let file = match explicit {
        Some(path) => {
            if !path.is_file() {
                bail!("config file {} does not exist", path.display());
            }
            Some(path.to_owned())
        }
        None => Some(home.join("iris.toml")).filter(|p| p.is_file()),
    };

    // The file alone first, so an unknown key is reported against the file.
    if let Some(path) = &file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        toml_check(&text).with_context(|| format!("invalid config file {}", path.display()))?;
    }

    let mut builder = config::Config::builder();
    if let Some(path) = &file {
        builder =
            builder.add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml));
    }
    builder = builder.add_source(
        config::Environment::with_prefix("IRIS")
            .prefix_separator("__")
            .separator("__")
            .ignore_empty(true)
            .source(Some(env.clone())),
    );
    let layered = builder
        .build()
        .context("cannot assemble the configuration")?;
    let config: Config = layered
        .try_deserialize()
        .context("invalid configuration from IRIS__* environment variables")?;
    validate(&config)?;
    Ok(Loaded {
        config,
        file,
        home,
        env: Arc::new(env),
        local_model: None,
    })
}

/// Parses TOML text strictly into [`Config`].
pub fn toml_check(text: &str) -> Result<Config> {
    let config: Config = toml::from_str(text).map_err(|e| {
        // One line: "line L, column C: message", not the multi-line rendering.
        let message = e.message().trim().replace('\n', " ");
        match e.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                anyhow::anyhow!("line {line}, column {column}: {message}")
            }
            None => anyhow::anyhow!("{message}"),
        }
    })?;
    validate(&config)?;
    Ok(config)
}

fn validate(config: &Config) -> Result<()> {
    let llms = std::iter::once(&config.llm)
        .chain(&config.llm.fallback)
        .chain(config.compression.model.as_ref());
    for llm in llms {
        if !matches!(llm.provider.as_str(), "openai" | "anthropic") {
            bail!(
                "llm.provider must be \"openai\" or \"anthropic\", not {:?}",
                llm.provider
            );
        }
        if llm.context_length == 0 {
            bail!("llm.context_length must be positive");
        }
        if llm.max_output_tokens == 0 || llm.max_output_tokens > u64::from(u32::MAX) {
            bail!(
                "llm.max_output_tokens must be between 1 and {}, not {}",
                u32::MAX,
                llm.max_output_tokens
            );
        }
        let prices = [
            Some(llm.input_price_per_mtok),
            Some(llm.output_price_per_mtok),
            llm.cache_read_price_per_mtok,
            llm.cache_write_price_per_mtok,
        ];
        if prices
            .into_iter()
            .flatten()
            .any(|p| !p.is_finite() || p < 0.0)
        {
            bail!(
                "llm prices must be zero or positive numbers (model {:?})",
                llm.model
            );
        }
        if [
            llm.connect_timeout_secs,
            llm.first_token_timeout_secs,
            llm.idle_timeout_secs,
        ]
        .contains(&0)
        {
            bail!(
                "llm timeouts must be at least 1 second (model {:?})",
                llm.model
            );
        }
    }
    let c = &config.compression;
    if !(0.0..=1.0).contains(&c.threshold_percent) || c.threshold_percent == 0.0 {
        bail!(
            "compression.threshold_percent must be in (0, 1], not {}",
            c.threshold_percent
        );
    }
    if !(0.0..=1.0).contains(&c.summary_target_ratio) || c.summary_target_ratio == 0.0 {
        bail!(
            "compression.summary_target_ratio must be in (0, 1], not {}",
            c.summary_target_ratio
        );
    }
    if config.server.bind.parse::<std::net::SocketAddr>().is_err() {
        bail!(
            "server.bind must be an address like 127.0.0.1:8787, not {:?}",
            config.server.bind
        );
    }
    tools::validate(&config.tools, &config.mcp)?;
    let a = &config.agent;
    if [a.max_iterations, a.max_concurrent_model_calls, a.queue_cap].contains(&0)
        || a.turn_timeout_secs == 0
        || a.idle_ttl_secs == 0
    {
        bail!(
            "agent.max_iterations, turn_timeout_secs, max_concurrent_model_calls, queue_cap and idle_ttl_secs must be at least 1"
        );
    }
    if config.webhook.rate_limit_per_minute == 0 || config.webhook.sync_timeout_secs == 0 {
        bail!("webhook.rate_limit_per_minute and webhook.sync_timeout_secs must be at least 1");
    }
    for (name, route) in &config.webhook.routes {
        if route.token_env.is_none() && route.secret_env.is_none() {
            bail!("webhook.routes.{name} needs token_env or secret_env (routes never run open)");
        }
    }
    Ok(())
}
