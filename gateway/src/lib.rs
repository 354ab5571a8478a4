//! The Iris daemon: configuration, logging, the HTTP server and the command line around the
//! agent core.
//!
//! `main.rs` only parses arguments and calls into this library, so tests drive everything
//! here on `127.0.0.1:0`.
//!
//! # Layout
//! - [`admin`]: the admin API (conversations, sessions, lineage, search, export, ending a
//!   session) behind the admin token; [`admin_client`]: the CLI's side of it.
//! - [`api`]: the OpenAI-compatible API.
//! - [`agent`]: the agent (providers, tools, prompt, compression) from configuration.
//! - [`chat`]: chat platforms at run time: access, pairing, files, typing, delivery.
//! - [`telegram`]: the Telegram adapter from `[telegram]`, and its webhook route.
//! - [`discord`]: the Discord adapter from `[discord]`.
//! - [`cli`]: the command line and what each subcommand does.
//! - [`daemon`]: what `iris serve` starts beside the health endpoints.
//! - [`conversation`]: inbox, router, conversation actors, outbox.
//! - [`config`]: configuration loading (defaults < file < environment), strict.
//! - [`local_model`]: the tiny local model a first run without a key talks to.
//! - [`logging`]: `tracing` set-up with redaction at the sink.
//! - [`logs`]: `GET /admin/logs` and `iris logs --follow`.
//! - [`metrics`]: the Prometheus registry behind `GET /metrics`.
//! - [`server`]: the HTTP server (`/healthz`, `/readyz`) and its graceful shutdown.
//! - [`readiness`]: the platforms' checks behind `/readyz`.
//! - [`reload`]: SIGHUP: what of the configuration changes live.
//! - [`providers`]: model providers (main + fallbacks) from `[llm]`.
//! - [`tools`]: the agent's tools (built-ins and MCP servers) from `[tools]` and `[mcp]`.
//! - [`webhook`]: `POST /hooks/{route}`, its messages endpoint and callbacks.
//! - [`doctor`]: `iris doctor`'s checks.
//! - [`sessions`]: `iris sessions …`, through the daemon when one runs.

pub mod admin;
pub mod admin_client;
pub mod agent;
pub mod api;
pub mod chat;
pub mod cli;
pub mod config;
pub mod conversation;
pub mod daemon;
pub mod discord;
pub mod doctor;
pub mod local_model;
pub mod logging;
pub mod logs;
pub mod metrics;
pub mod pairing;
pub mod providers;
pub mod readiness;
pub mod reload;
pub mod server;
pub mod sessions;
pub mod telegram;
pub mod tools;
pub mod webhook;

pub use server::run;
