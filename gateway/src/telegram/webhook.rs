//! Webhook mode: `POST /telegram/webhook` answers 200 only once the update is in the inbox
//! (Telegram redelivers anything else). The secret token is compared in constant time and a
//! request without it is refused.
//!
//! Messages that are parts of one — an album's photos, the pieces of a long text the Telegram
//! client split — arrive as separate requests. They are gathered: each part's request waits
//! until no further part came for [`QUIET`] (at most [`GATHER_AT_MOST`]), then the parts are
//! joined, stored as one message, and every waiting request is answered together. Nothing is
//! acknowledged before it is stored; if the process stops meanwhile, Telegram sends the parts
//! again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adapters::telegram::inbound::{Incoming, may_continue, merge_parts, normalize};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Adapter;

const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
/// A group of parts is closed when no part came for this long.
pub const QUIET: Duration = Duration::from_millis(800);
/// A group of parts is closed this long after it opened, whatever still arrives.
pub const GATHER_AT_MOST: Duration = Duration::from_secs(3);

pub(super) struct Receiver {
    pub adapter: Arc<Adapter>,
    pub secret: String,
    pub gatherer: Arc<Gatherer>,
}

/// `POST /telegram/webhook`: 200 once the update is in the inbox; 401 without the secret,
/// 400 for a body that is not an update, 500 when it could not be stored (Telegram retries).
pub(super) async fn receive(
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
    let update: teloxide_core::types::Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "bad_request", "message": format!("not a Telegram update: {error}")})),
            )
                .into_response();
        }
    };
    let Some(message) = normalize(&update, &receiver.adapter.identity) else {
        return StatusCode::OK.into_response();
    };
    let stored = match receiver.gatherer.key(&message) {
        Some(key) => {
            receiver
                .gatherer
                .join(&receiver.adapter, key, message)
                .await
        }
        None => receiver
            .adapter
            .accept_message(message)
            .await
            .map_err(|e| e.to_string()),
    };
    match stored {
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

/// What the parts of one message share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum GroupKey {
    /// An album: chat and `media_group_id`.
    Album(i64, String),
    /// A long text in pieces: chat, sender, topic.
    Split(i64, i64, Option<i64>),
}

/// Parts waiting to be joined, by what they share.
#[derive(Default)]
pub(super) struct Gatherer {
    open: Mutex<HashMap<GroupKey, Group>>,
}

struct Group {
    parts: Vec<Incoming>,
    last: Instant,
    /// `None` until the group is stored; then whether that worked.
    done: watch::Receiver<Option<Result<(), String>>>,
}

impl Gatherer {
    /// The group `message` belongs to, if it may be a part: an album's, or a long text's
    /// (a long message opens one; any message of its sender joins one that is open).
    pub fn key(&self, message: &Incoming) -> Option<GroupKey> {
        if let Some(album) = &message.album {
            return Some(GroupKey::Album(message.chat_id, album.clone()));
        }
        let split = GroupKey::Split(message.chat_id, message.user_id, message.topic_id);
        let open = self.open.lock().is_ok_and(|open| open.contains_key(&split));
        (open || may_continue(message)).then_some(split)
    }

    /// Adds `message` to its group (opening it, and the task that closes it, when it is the
    /// first part) and waits until the group is stored.
    pub async fn join(
        self: &Arc<Self>,
        adapter: &Arc<Adapter>,
        key: GroupKey,
        message: Incoming,
    ) -> Result<(), String> {
        let mut done = {
            let Ok(mut open) = self.open.lock() else {
                return Err("the gatherer is poisoned".into());
            };
            match open.get_mut(&key) {
                Some(group) => {
                    group.parts.push(message);
                    group.last = Instant::now();
                    group.done.clone()
                }
                None => {
                    let (tx, rx) = watch::channel(None);
                    open.insert(
                        key.clone(),
                        Group {
                            parts: vec![message],
                            last: Instant::now(),
                            done: rx.clone(),
                        },
                    );
                    tokio::spawn(close_when_quiet(self.clone(), adapter.clone(), key, tx));
                    rx
                }
            }
        };
        match done.wait_for(Option::is_some).await {
            Ok(result) => result.clone().unwrap_or(Ok(())),
            Err(_) => Err("the part's group was dropped".into()),
        }
    }

    /// The group's parts once it has been quiet for [`QUIET`] (or open for
    /// [`GATHER_AT_MOST`]), taken out of the open groups.
    async fn take_when_quiet(&self, key: &GroupKey) -> Vec<Incoming> {
        let opened = Instant::now();
        loop {
            let last = match self.open.lock() {
                Ok(open) => open.get(key).map(|g| g.last),
                Err(_) => None,
            };
            let Some(last) = last else {
                return Vec::new();
            };
            let until = (last + QUIET).min(opened + GATHER_AT_MOST);
            if Instant::now() >= until {
                break;
            }
            tokio::time::sleep_until(until).await;
        }
        self.open
            .lock()
            .ok()
            .and_then(|mut open| open.remove(key))
            .map(|g| g.parts)
            .unwrap_or_default()
    }
}

/// Closes a group when it is quiet: joins its parts, stores the result, tells every part.
async fn close_when_quiet(
    gatherer: Arc<Gatherer>,
    adapter: Arc<Adapter>,
    key: GroupKey,
    done: watch::Sender<Option<Result<(), String>>>,
) {
    let parts = gatherer.take_when_quiet(&key).await;
    let mut result = Ok(());
    for message in merge_parts(parts) {
        if let Err(error) = adapter.accept_message(message).await {
            result = Err(error.to_string());
            break;
        }
    }
    let _ = done.send(Some(result));
}
