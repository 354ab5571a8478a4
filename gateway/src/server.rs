//! The HTTP server and its one shutdown path.
//!
//! It serves health — `GET /healthz` (the process is alive) and `GET /readyz` (the store
//! answers and every enabled platform is connected; the body names what is not ready) — and `GET /metrics` (Prometheus text; no user
//! data in it, so it needs no token), plus whatever the daemon mounts beside it (webhook, API,
//! Telegram's webhook route). Every error is
//! a JSON body `{"error": {"code", "message"}}`.

use std::sync::Arc;
use std::time::Duration;

use agent_core::store::SessionStore;
use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long `/readyz` waits for the store before calling it not ready.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn SessionStore>,
    /// The platforms' checks for `/readyz`.
    pub readiness: crate::readiness::Readiness,
}

/// The health routes merged with `mounted` (the daemon's other endpoints).
pub fn router(state: AppState, mounted: Router) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(mounted)
        .fallback(not_found)
}

/// Serves on `listener` until `shutdown` is cancelled, then drains in-flight requests.
pub async fn run(
    state: AppState,
    mounted: Router,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<()> {
    let addr = listener.local_addr().context("listener has no address")?;
    tracing::info!(%addr, store = state.store.backend(), "iris listening");
    axum::serve(listener, router(state, mounted))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .context("HTTP server failed")?;
    tracing::info!("iris stopped");
    Ok(())
}

/// `GET /metrics`: the process's metrics in the Prometheus text format.
async fn metrics() -> Response {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        crate::metrics::metrics().render(),
    )
        .into_response()
}

/// Cancels `token` on SIGINT or SIGTERM.
pub async fn cancel_on_signal(token: CancellationToken) {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!(signal = "SIGINT", "shutting down"),
        () = term => tracing::info!(signal = "SIGTERM", "shutting down"),
    }
    token.cancel();
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Response {
    let store = match tokio::time::timeout(READY_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {} s", READY_TIMEOUT.as_secs())),
    };
    let mut checks = serde_json::Map::new();
    let mut ready = true;
    for (name, outcome) in std::iter::once(("store".to_owned(), store)).chain(state.readiness.run())
    {
        let shown = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(reason) => {
                tracing::warn!(check = %name, %reason, "not ready");
                ready = false;
                reason
            }
        };
        checks.insert(name, json!(shown));
    }
    if ready {
        (
            StatusCode::OK,
            Json(json!({"status": "ready", "checks": checks})),
        )
            .into_response()
    } else {
        let body = json!({"status": "not_ready", "checks": checks});
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

async fn not_found() -> Response {
    let body = json!({"error": {"code": "not_found", "message": "no such endpoint"}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}
