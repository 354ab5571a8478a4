//! Telegram in the daemon: the adapter ([`adapters::telegram::TelegramPlatform`]) from
//! `[telegram]`, run by [`crate::chat`], and in webhook mode the route Telegram posts to.
//!
//! `POST /telegram/webhook` answers 200 only once the update is stored (Telegram redelivers
//! anything else); the secret token is compared in constant time and a request without it is
//! refused.

use std::sync::Arc;

use adapters::telegram::{Intake, TelegramPlatform, Update};
use anyhow::Result;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::chat::{self, Access};
use crate::config::TelegramConfig;

/// The path Telegram posts updates to in webhook mode.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Connects the bot and starts it; in webhook mode, returns the route to serve.
pub async fn start(
    config: &TelegramConfig,
    token: &str,
    intake: Intake,
    runtime: &chat::Runtime,
) -> Result<Option<axum::Router>> {
    let secret = match &intake {
        Intake::Webhook { secret, .. } => Some(secret.clone()),
        Intake::Polling => None,
    };
    let platform = Arc::new(
        TelegramPlatform::connect(
            token,
            &config.api_url,
            intake,
            config.max_file_mb.saturating_mul(1024 * 1024),
        )
        .await?,
    );
    chat::start(platform.clone(), access(config), runtime);
    Ok(secret.map(|secret| {
        axum::Router::new()
            .route(WEBHOOK_PATH, axum::routing::post(receive))
            .with_state(Arc::new(Receiver { platform, secret }))
    }))
}

/// Who may talk to the bot, from `[telegram]` (also on a config reload).
pub fn access(config: &TelegramConfig) -> Access {
    Access {
        allowed_users: config.allowed_users.clone(),
        open_chats: config.open_groups.iter().map(i64::to_string).collect(),
        ..Access::default()
    }
}

struct Receiver {
    platform: Arc<TelegramPlatform>,
    secret: String,
}

/// `POST /telegram/webhook`: 200 once the update is stored; 401 without the secret, 400 for a
/// body that is not an update, 500 when it could not be stored (Telegram retries).
async fn receive(
    axum::extract::State(receiver): axum::extract::State<Arc<Receiver>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    use subtle::ConstantTimeEq;
    let given = headers
        .get(SECRET_HEADER)
        .map(axum::http::HeaderValue::as_bytes)
        .unwrap_or_default();
    if !bool::from(receiver.secret.as_bytes().ct_eq(given)) {
        tracing::warn!("telegram webhook: a request without the right secret token was refused");
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "unauthorized", "message": "missing or wrong X-Telegram-Bot-Api-Secret-Token"})),
        )
            .into_response();
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "bad_request", "message": format!("not a Telegram update: {error}")})),
            )
                .into_response();
        }
    };
    match receiver.platform.receive(&update).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(error) => {
            tracing::error!(%error, update = update.id.0, "telegram webhook: could not store an update; Telegram will send it again");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": "unavailable", "message": "try again"})),
            )
                .into_response()
        }
    }
}
