//! What `iris serve` runs beside the health endpoints: the agent, the conversation runtime
//! (resuming what a previous run left unanswered), the webhook and its callback delivery, the
//! chat platforms, and the gauges of `/metrics`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::redact::Redactor;
use agent_core::store::SessionStore;
use anyhow::{Context, Result};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::config::Loaded;
use crate::conversation::{Gateway, RuntimeConfig};
use crate::webhook::auth::RouteAuth;
use crate::webhook::callback::Deliverer;
use crate::webhook::limit::RateLimiter;
use crate::webhook::{self, WebhookState};

/// How long, after the running turns, the replies they wrote may take to go out on shutdown.
const DELIVERY_GRACE: Duration = Duration::from_secs(5);

/// What [`start`] started.
pub struct Started {
    /// The routes to serve beside health and metrics.
    pub routes: Router,
    /// Resolves once a shutdown has drained: intake stopped, running turns finished (or the
    /// grace period passed), their replies sent, every task told to stop.
    pub drained: tokio::sync::oneshot::Receiver<()>,
}

/// Starts the runtime. When `intake` is cancelled (SIGTERM), intake stops, running turns get
/// `server.shutdown_grace_secs` to finish and their replies a moment to go out; then
/// everything stops and `drained` resolves. Whatever did not finish is resumed on the next
/// start.
pub async fn start(
    loaded: &Loaded,
    store: Arc<dyn SessionStore>,
    readiness: &crate::readiness::Readiness,
    intake: CancellationToken,
) -> Result<Started> {
    let stop = CancellationToken::new();
    let config = &loaded.config;
    let redactor = Arc::new(Redactor::with_secrets(loaded.secret_values()));
    let built = crate::agent::build(loaded, store.clone(), redactor).await?;
    for problem in &built.problems {
        tracing::warn!(%problem, "left out at start");
    }
    let gateway = Arc::new(Gateway::new(
        store.clone(),
        Arc::new(built.agent),
        RuntimeConfig {
            idle_ttl: Duration::from_secs(config.agent.idle_ttl_secs),
            queue_cap: usize::try_from(config.agent.queue_cap).unwrap_or(usize::MAX),
            busy_mode: config.agent.busy_mode,
        },
    ));
    let metrics = crate::metrics::metrics();
    let weak = Arc::downgrade(&gateway);
    metrics.gauge(
        "iris_conversations_resident",
        "Conversations with an actor in memory.",
        Box::new(move || weak.upgrade().map_or(0.0, |g| g.resident() as f64)),
    );
    let weak = Arc::downgrade(&gateway);
    metrics.gauge(
        "iris_conversations_active",
        "Conversations with a turn running now (one turn at a time per conversation).",
        Box::new(move || weak.upgrade().map_or(0.0, |g| g.active_turns() as f64)),
    );
    let weak = Arc::downgrade(&gateway);
    metrics.gauge(
        "iris_queue_depth",
        "Messages given to conversations and not answered yet (running turns included).",
        Box::new(move || weak.upgrade().map_or(0.0, |g| g.pending() as f64)),
    );
    let resumed = gateway.resume_unfinished().await?;
    if resumed > 0 {
        tracing::info!(resumed, "resumed messages left unanswered by the last run");
    }
    let mut mounted = Router::new();
    let runtime = crate::chat::Runtime {
        home: loaded.home.clone(),
        gateway: gateway.clone(),
        store: store.clone(),
        readiness: readiness.clone(),
        access: crate::chat::AccessBook::default(),
        intake: intake.clone(),
        stop: stop.clone(),
    };
    if config.webhook.enabled {
        let routes: HashMap<String, RouteAuth> = config
            .webhook
            .routes
            .iter()
            .map(|(name, route)| {
                let read = |var: &Option<String>| var.as_deref().and_then(|v| loaded.secret(v));
                let auth = RouteAuth {
                    token: read(&route.token_env),
                    secret: read(&route.secret_env),
                };
                if auth.token.is_none() && auth.secret.is_none() {
                    tracing::warn!(route = %name, "webhook route has no credentials in the environment; it refuses every call");
                }
                (name.clone(), auth)
            })
            .collect();
        let deliverer = Deliverer {
            store: store.clone(),
            routes: routes.clone(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            poll: Duration::from_millis(500),
            backoff: Duration::from_secs(2),
        };
        tokio::spawn(deliverer.run(stop.clone()));
        mounted = mounted.merge(webhook::router(Arc::new(WebhookState {
            gateway: gateway.clone(),
            store: store.clone(),
            routes,
            limiter: RateLimiter::new(config.webhook.rate_limit_per_minute),
            max_body_bytes: usize::try_from(config.webhook.max_body_bytes).unwrap_or(usize::MAX),
            sync_timeout: Duration::from_secs(config.webhook.sync_timeout_secs),
        })));
    }
    if config.telegram.enabled {
        let token = loaded.secret(&config.telegram.token_env).with_context(|| {
            format!(
                "telegram.enabled = true, but ${} (telegram.token_env) is unset",
                config.telegram.token_env
            )
        })?;
        let intake = match config.telegram.mode {
            crate::config::TelegramMode::Polling => adapters::telegram::Intake::Polling,
            crate::config::TelegramMode::Webhook => adapters::telegram::Intake::Webhook {
                url: config.telegram.webhook_url.clone().context(
                    "telegram.mode = \"webhook\" needs telegram.webhook_url (the public URL of POST /telegram/webhook)",
                )?,
                secret: loaded.secret(&config.telegram.webhook_secret_env).with_context(|| {
                    format!(
                        "telegram.mode = \"webhook\" needs a secret in ${} (telegram.webhook_secret_env)",
                        config.telegram.webhook_secret_env
                    )
                })?,
            },
        };
        if let Some(route) =
            crate::telegram::start(&config.telegram, &token, intake, &runtime).await?
        {
            mounted = mounted.merge(route);
        }
    }
    if config.discord.enabled {
        let token = loaded.secret(&config.discord.token_env).with_context(|| {
            format!(
                "discord.enabled = true, but ${} (discord.token_env) is unset",
                config.discord.token_env
            )
        })?;
        crate::discord::start(&config.discord, &token, &runtime).await?;
    }
    if config.api.enabled {
        let key = loaded.secret(&config.api.key_env);
        if key.is_none() {
            tracing::warn!(variable = %config.api.key_env, "api.enabled but its key variable is unset; every call is refused");
        }
        mounted = mounted.merge(crate::api::router(Arc::new(crate::api::ApiState {
            gateway: gateway.clone(),
            store: store.clone(),
            key,
        })));
    }
    let admin_token = loaded.secret(&config.server.admin_token_env);
    if admin_token.is_none() {
        tracing::info!(variable = %config.server.admin_token_env, "the admin API is closed (no token in the environment)");
    }
    mounted = mounted.merge(crate::admin::router(Arc::new(crate::admin::AdminState {
        store: store.clone(),
        gateway: gateway.clone(),
        token: admin_token,
    })));
    tokio::spawn(crate::reload::on_sighup(
        loaded.clone(),
        crate::reload::Live {
            gateway: gateway.clone(),
            access: runtime.access.clone(),
            store: store.clone(),
        },
        stop.clone(),
    ));
    let (done, drained) = tokio::sync::oneshot::channel();
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    tokio::spawn(drain(gateway, store, grace, intake, stop, done));
    Ok(Started {
        routes: mounted,
        drained,
    })
}

/// The shutdown sequence, once `intake` is cancelled.
async fn drain(
    gateway: Arc<Gateway>,
    store: Arc<dyn SessionStore>,
    grace: Duration,
    intake: CancellationToken,
    stop: CancellationToken,
    done: tokio::sync::oneshot::Sender<()>,
) {
    intake.cancelled().await;
    tracing::info!(
        grace_secs = grace.as_secs(),
        running_turns = gateway.active_turns(),
        "draining: intake stopped, waiting for running turns"
    );
    let drained = gateway.drain(grace).await;
    if drained.unfinished_turns > 0 {
        tracing::warn!(
            unfinished_turns = drained.unfinished_turns,
            "the grace period ended with turns running; they resume on the next start"
        );
    }
    let deadline = tokio::time::Instant::now() + DELIVERY_GRACE;
    while tokio::time::Instant::now() < deadline {
        match store.outbox_pending().await {
            Ok(rows) if rows.is_empty() => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(error) => {
                tracing::warn!(%error, "outbox unreadable while draining");
                break;
            }
        }
    }
    stop.cancel();
    tracing::info!("drained");
    let _ = done.send(());
}
