//! The webhook (DESIGN.md §8, source `webhook`): `POST /hooks/{route}` runs a turn for a
//! conversation the caller names, and `GET /hooks/{route}/conversations/{conversation}/messages`
//! reads it back. The shapes are a contract; every error is `{"error": {"code", "message"}}`.
//!
//! Order of checks: route (404), content type (415), body size (413), authentication (401),
//! rate limit (429, counted only after authentication), the body's fields (400), the queue
//! (503). A message is acknowledged (200 or 202) only after its inbox row is committed; a
//! repeated `message_id` / `Idempotency-Key` returns the original outcome and runs nothing.
//!
//! # Layout
//! - [`auth`]: bearer tokens and HMAC signatures, in constant time.
//! - [`limit`]: the per-route rate limit.
//! - [`callback`]: replies POSTed to `callback_url`, signed, retried with backoff.

pub mod auth;
pub mod callback;
pub mod limit;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::{Role, SessionStore};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::conversation::key::{Place, conversation_key};
use crate::conversation::{Gateway, Inbound, Submission, SubmitError, TurnReply};
use auth::RouteAuth;
use limit::RateLimiter;

/// How long a client is told to wait when the conversation's queue is full.
const BUSY_RETRY_AFTER_SECS: u64 = 5;
/// Conversation names longer than this are refused.
const MAX_CONVERSATION_CHARS: usize = 200;

/// What the webhook handlers share.
pub struct WebhookState {
    pub gateway: Arc<Gateway>,
    pub store: Arc<dyn SessionStore>,
    pub routes: HashMap<String, RouteAuth>,
    pub limiter: RateLimiter,
    pub max_body_bytes: usize,
    pub sync_timeout: Duration,
}

/// The webhook's routes.
pub fn router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/hooks/{route}", post(submit))
        .route(
            "/hooks/{route}/conversations/{conversation}/messages",
            get(messages),
        )
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

/// A JSON error with an optional `Retry-After`.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, Json(body)).into_response()
}

fn retry_after(mut response: Response, after: Duration) -> Response {
    let secs = after.as_secs_f64().ceil().max(1.0) as u64;
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert("retry-after", value);
    }
    response
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    conversation: String,
    user: String,
    text: String,
    message_id: Option<String>,
    wait: Option<bool>,
    callback_url: Option<String>,
}

// The refusal is the response the handler returns at once; boxing it would buy nothing.
#[allow(clippy::result_large_err)]
/// Checks shared by both endpoints: the route exists, the caller is allowed, and (for calls
/// that start turns) the route's budget has room.
fn admit(
    state: &WebhookState,
    route: &str,
    headers: &HeaderMap,
    body: &[u8],
    counted: bool,
) -> Result<(), Response> {
    let Some(auth) = state.routes.get(route) else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "unknown_route",
            format!("no webhook route {route:?}"),
        ));
    };
    if !auth.allows(headers, body) {
        tracing::warn!(route, "webhook call refused: bad or missing credentials");
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token or X-Iris-Signature is required",
        ));
    }
    if counted && let Err(wait) = state.limiter.take(route) {
        return Err(retry_after(
            error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many calls on this route; slow down",
            ),
            wait,
        ));
    }
    Ok(())
}

async fn submit(
    State(state): State<Arc<WebhookState>>,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !state.routes.contains_key(&route) {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_route",
            format!("no webhook route {route:?}"),
        );
    }
    let json_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json_type {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send Content-Type: application/json",
        );
    }
    let Ok(body) = axum::body::to_bytes(body, state.max_body_bytes).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body is over {} bytes", state.max_body_bytes),
        );
    };
    if let Err(refused) = admit(&state, &route, &headers, &body, true) {
        return refused;
    }
    let message: Message = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("invalid JSON body: {e}"),
            );
        }
    };
    if let Err(why) = validate(&message) {
        return error(StatusCode::BAD_REQUEST, "invalid_body", why);
    }
    let message_id = message
        .message_id
        .clone()
        .or_else(|| {
            headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("auto-{:016x}", fastrand::u64(..)));
    let target = match &message.callback_url {
        Some(url) => callback::target(&route, url),
        None => format!("webhook:{route}"),
    };
    let inbound = Inbound {
        source: "webhook".into(),
        platform_message_id: format!("{route}:{message_id}"),
        conversation_key: conversation_key(
            Place::Webhook {
                route: &route,
                conversation: &message.conversation,
            },
            true,
        ),
        text: message.text.clone(),
        images: Vec::new(),
        target,
        meta: json!({
            "route": route,
            "conversation": message.conversation,
            "user": message.user,
            "message_id": message_id,
        }),
        stream: None,
    };
    let answered = |reply: &TurnReply| {
        let mut body = json!({
            "conversation": message.conversation,
            "session_id": reply.session_id,
            "message_id": message_id,
            "reply": reply.text,
        });
        if let Some(error) = &reply.error {
            body["error"] = json!({"code": error, "message": reply.text});
        }
        (StatusCode::OK, Json(body)).into_response()
    };
    let accepted = || {
        (
            StatusCode::ACCEPTED,
            Json(json!({"status": "accepted", "message_id": message_id})),
        )
            .into_response()
    };
    match state.gateway.submit(inbound).await {
        Err(SubmitError::Busy) => retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "queue_full",
                "this conversation has too many messages waiting; try again shortly",
            ),
            Duration::from_secs(BUSY_RETRY_AFTER_SECS),
        ),
        Err(SubmitError::Store(e)) => {
            tracing::error!(error = %e, "webhook message not stored");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_unavailable",
                "the message could not be stored; try again",
            )
        }
        Ok(Submission::Duplicate {
            reply: Some(reply), ..
        }) => answered(&reply),
        Ok(Submission::Duplicate { reply: None, .. }) => accepted(),
        Ok(Submission::Accepted { reply, .. }) => {
            if !message.wait.unwrap_or(true) {
                return accepted();
            }
            match tokio::time::timeout(state.sync_timeout, reply).await {
                Ok(Ok(reply)) => answered(&reply),
                // Still running (or resumed later): the reply stays in the outbox.
                _ => accepted(),
            }
        }
    }
}

fn validate(message: &Message) -> Result<(), String> {
    let conversation = message.conversation.trim();
    if conversation.is_empty() || conversation.chars().count() > MAX_CONVERSATION_CHARS {
        return Err(format!(
            "conversation must be 1 to {MAX_CONVERSATION_CHARS} characters"
        ));
    }
    if message.user.trim().is_empty() {
        return Err("user must not be empty".into());
    }
    if message.text.trim().is_empty() {
        return Err("text must not be empty".into());
    }
    if let Some(id) = &message.message_id
        && (id.is_empty() || id.len() > 200)
    {
        return Err("message_id must be 1 to 200 characters".into());
    }
    if let Some(url) = &message.callback_url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        return Err("callback_url must be an http(s) URL".into());
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
struct After {
    after: Option<i64>,
}

async fn messages(
    State(state): State<Arc<WebhookState>>,
    Path((route, conversation)): Path<(String, String)>,
    Query(after): Query<After>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admit(&state, &route, &headers, b"", false) {
        return refused;
    }
    let key = conversation_key(
        Place::Webhook {
            route: &route,
            conversation: &conversation,
        },
        true,
    );
    let found = match state.store.conversation_by_key(&key).await {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(error = %e, "webhook messages: store failed");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_unavailable",
                "the store did not answer",
            );
        }
    };
    let Some(session_id) = found.and_then(|c| c.current_session_id) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_conversation",
            format!("no conversation {conversation:?} on route {route:?}"),
        );
    };
    let stored = match state.store.messages(&session_id).await {
        Ok(stored) => stored,
        Err(e) => {
            tracing::error!(error = %e, "webhook messages: store failed");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_unavailable",
                "the store did not answer",
            );
        }
    };
    let after = after.after.unwrap_or(0);
    let listed: Vec<Value> = stored
        .iter()
        .filter(|m| m.id > after && matches!(m.body.role, Role::User | Role::Assistant))
        .filter_map(|m| {
            let content = m.body.content.as_deref().filter(|c| !c.is_empty())?;
            Some(json!({
                "id": m.id,
                "role": m.body.role.as_str(),
                "content": content,
                "created_at": m.created_at,
            }))
        })
        .collect();
    Json(json!({
        "conversation": conversation,
        "session_id": session_id,
        "messages": listed,
    }))
    .into_response()
}
