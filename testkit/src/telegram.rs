//! A fake Telegram Bot API: what teloxide calls, on 127.0.0.1, with switches for the faults
//! the adapter must survive.
//!
//! teloxide posts JSON to `/bot<token>/<Method>` with the method name capitalised (`GetMe`,
//! `SendMessage`), so methods match case-insensitively. Answers follow the Bot API:
//! `{"ok": true, "result": …}`, or `{"ok": false, "error_code", "description", "parameters"}`
//! with the same HTTP status — teloxide reads the description to pick its error variant, so the
//! descriptions are Telegram's own words.
//!
//! Updates are queued by the test ([`FakeTelegram::push_text`], [`FakeTelegram::push_update`])
//! and served by `getUpdates` long polling with offsets: an update is dropped only when a later
//! call's `offset` passes it, exactly as Telegram confirms them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The bot the fake answers `getMe` with.
pub const BOT_ID: i64 = 7_000_000_001;
pub const BOT_USERNAME: &str = "iris_test_bot";

/// A call the fake received: the method (lower case) and its JSON parameters.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub params: Value,
}

#[derive(Default)]
struct Inner {
    next_update_id: i64,
    next_message_id: i64,
    /// Updates not yet confirmed by an `offset` past them.
    pending: Vec<Value>,
    /// The highest `offset` any `getUpdates` sent.
    confirmed_offset: i64,
    calls: Vec<Call>,
    reject_entities: bool,
    /// The next this many sends are answered 429 with this `retry_after`.
    rate_limited: (u32, u32),
    /// The next this many `getUpdates` are answered 409 (another poller).
    conflicts: u32,
    delay: Duration,
    files: HashMap<String, (String, Vec<u8>)>,
    webhook: Option<String>,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    arrived: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::script::lock(&self.inner)
    }
}

/// A running fake; stops when dropped.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: crate::script::ServerTask,
}

/// Who sent a pushed message, and where.
#[derive(Debug, Clone)]
pub struct From {
    pub user_id: i64,
    pub username: Option<String>,
    pub chat_id: i64,
    /// `private`, `group` or `supergroup`.
    pub chat_type: &'static str,
    /// A forum topic.
    pub thread_id: Option<i64>,
}

impl From {
    /// A private chat with user `id` (Telegram uses the user id as the chat id).
    pub fn dm(id: i64) -> Self {
        Self {
            user_id: id,
            username: Some(format!("user{id}")),
            chat_id: id,
            chat_type: "private",
            thread_id: None,
        }
    }

    /// User `user` in supergroup `chat`.
    pub fn group(chat: i64, user: i64) -> Self {
        Self {
            user_id: user,
            username: Some(format!("user{user}")),
            chat_id: chat,
            chat_type: "supergroup",
            thread_id: None,
        }
    }
}

impl FakeTelegram {
    /// Starts on a free port for bot `token`.
    pub async fn start(token: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            inner: Mutex::new(Inner {
                next_update_id: 100,
                next_message_id: 1,
                ..Inner::default()
            }),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/{bot}/{method}", post(method).get(method))
            .route("/file/{bot}/{*path}", get(download))
            .with_state(shared.clone());
        let (addr, server) = crate::script::serve(app).await?;
        Ok(Self {
            addr,
            shared,
            _server: server,
        })
    }

    /// The API base URL to configure (`[telegram] api_url`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues an update (its `update_id` is assigned here) and returns the id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let id = {
            let mut inner = self.shared.lock();
            let id = inner.next_update_id;
            inner.next_update_id += 1;
            update["update_id"] = json!(id);
            inner.pending.push(update);
            id
        };
        self.shared.arrived.notify_waiters();
        id
    }

    /// Queues a text message from `from`; returns its update id.
    pub fn push_text(&self, from: &From, text: &str) -> i64 {
        let update = self.text_update(from, text);
        let id = update["update_id"].as_i64().unwrap_or_default();
        {
            let mut inner = self.shared.lock();
            inner.pending.push(update);
        }
        self.shared.arrived.notify_waiters();
        id
    }

    /// A text message update from `from`, with fresh update and message ids, not queued (for
    /// posting to a webhook the way Telegram would).
    pub fn text_update(&self, from: &From, text: &str) -> Value {
        let (update_id, message_id) = {
            let mut inner = self.shared.lock();
            let ids = (inner.next_update_id, inner.next_message_id);
            inner.next_update_id += 1;
            inner.next_message_id += 1;
            ids
        };
        let mut message = json!({
            "message_id": message_id,
            "date": 1_764_500_000,
            "chat": chat_json(from.chat_id, from.chat_type),
            "from": {
                "id": from.user_id,
                "is_bot": false,
                "first_name": format!("User {}", from.user_id),
                "username": from.username,
            },
            "text": text,
        });
        if let Some(thread) = from.thread_id {
            message["message_thread_id"] = json!(thread);
            message["is_topic_message"] = json!(true);
        }
        json!({ "update_id": update_id, "message": message })
    }

    /// A message update from `from` carrying a file: `media` holds the message's file fields
    /// (`{"photo": [...]}`, `{"document": {...}}`, `{"voice": {...}}`, and `media_group_id`
    /// for an album), `caption` its caption. Not queued (see [`Self::push_update`]).
    pub fn media_update(&self, from: &From, caption: Option<&str>, media: Value) -> Value {
        let mut update = self.text_update(from, "");
        let message = &mut update["message"];
        if let Some(object) = message.as_object_mut() {
            object.remove("text");
            if let Some(caption) = caption {
                object.insert("caption".into(), json!(caption));
            }
            if let Some(fields) = media.as_object() {
                object.extend(fields.clone());
            }
        }
        update
    }

    /// Queues the last pushed update again, with the same `update_id` (Telegram redelivers
    /// after a lost confirmation).
    pub fn duplicate_last_update(&self) {
        {
            let mut inner = self.shared.lock();
            if let Some(last) = inner.pending.last().cloned() {
                inner.pending.push(last);
            }
        }
        self.shared.arrived.notify_waiters();
    }

    /// Every call so far to `method` (case-insensitive), in order.
    pub fn calls(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// The texts of every message sent (successful `sendMessage` calls) to `chat_id`.
    pub fn sent_texts(&self, chat_id: i64) -> Vec<String> {
        self.calls("sendMessage")
            .into_iter()
            .filter(|c| c.params["chat_id"].as_i64() == Some(chat_id) && c.params["_ok"] == true)
            .filter_map(|c| c.params["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// The highest `offset` a `getUpdates` call has sent (updates below it are confirmed).
    pub fn confirmed_offset(&self) -> i64 {
        self.shared.lock().confirmed_offset
    }

    /// Updates not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// Rejects any message with a `parse_mode` ("can't parse entities").
    pub fn reject_entities(&self, on: bool) {
        self.shared.lock().reject_entities = on;
    }

    /// The next `count` sends are answered 429 with `retry_after` seconds.
    pub fn rate_limit(&self, count: u32, retry_after: u32) {
        self.shared.lock().rate_limited = (count, retry_after);
    }

    /// The next `count` `getUpdates` calls are answered 409 (another poller on the token).
    pub fn conflict(&self, count: u32) {
        self.shared.lock().conflicts = count;
    }

    /// Every answer waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Serves `bytes` for `getFile(file_id)` and its download.
    pub fn add_file(&self, file_id: &str, bytes: Vec<u8>) {
        let path = format!("files/{file_id}.bin");
        self.shared
            .lock()
            .files
            .insert(file_id.to_owned(), (path, bytes));
    }

    /// The URL `setWebhook` set, if any.
    pub fn webhook(&self) -> Option<String> {
        self.shared.lock().webhook.clone()
    }
}

fn chat_json(id: i64, kind: &str) -> Value {
    if kind == "private" {
        json!({"id": id, "type": "private", "first_name": format!("User {id}")})
    } else {
        json!({"id": id, "type": kind, "title": format!("Group {id}"), "is_forum": true})
    }
}

fn ok(result: Value) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({"ok": true, "result": result})),
    )
        .into_response()
}

fn fail(status: StatusCode, description: &str, parameters: Option<Value>) -> Response {
    let mut body = json!({"ok": false, "error_code": status.as_u16(), "description": description});
    if let Some(p) = parameters {
        body["parameters"] = p;
    }
    (status, axum::Json(body)).into_response()
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return fail(StatusCode::UNAUTHORIZED, "Unauthorized", None);
    }
    let method = method.to_ascii_lowercase();
    let mut params = crate::script::form_params(&headers, &body);
    let delay = shared.lock().delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = answer(&shared, &method, &mut params).await;
    params["_ok"] = json!(response.status().is_success());
    shared.lock().calls.push(Call { method, params });
    response
}

async fn answer(shared: &Shared, method: &str, params: &mut Value) -> Response {
    match method {
        "getme" => ok(json!({
            "id": BOT_ID,
            "is_bot": true,
            "first_name": "Iris",
            "username": BOT_USERNAME,
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
            "can_connect_to_business": false,
            "has_main_web_app": false,
        })),
        "getupdates" => get_updates(shared, params).await,
        "sendmessage" => send_message(shared, params),
        "editmessagetext" => {
            if let Some(rejected) = reject_entities(&shared.lock(), params) {
                return rejected;
            }
            ok(json!({
                "message_id": params["message_id"],
                "date": 1_764_500_000,
                "chat": chat_json(params["chat_id"].as_i64().unwrap_or(0), "private"),
                "text": params["text"],
            }))
        }
        "sendchataction" | "setmycommands" | "deletewebhook" | "deletemycommands" => {
            ok(json!(true))
        }
        "setwebhook" => {
            shared.lock().webhook = params["url"].as_str().map(str::to_owned);
            ok(json!(true))
        }
        "getfile" => {
            let id = params["file_id"].as_str().unwrap_or_default().to_owned();
            match shared.lock().files.get(&id) {
                Some((path, bytes)) => ok(json!({
                    "file_id": id,
                    "file_unique_id": format!("u{id}"),
                    "file_size": bytes.len(),
                    "file_path": path,
                })),
                None => fail(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: invalid file_id",
                    None,
                ),
            }
        }
        _ => fail(StatusCode::NOT_FOUND, "Not Found: method not found", None),
    }
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    {
        let mut inner = shared.lock();
        if inner.conflicts > 0 {
            inner.conflicts -= 1;
            return fail(
                StatusCode::CONFLICT,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
                None,
            );
        }
    }
    let offset = params["offset"].as_i64().unwrap_or(0);
    let timeout = params["timeout"].as_u64().unwrap_or(0).min(30);
    let limit = params["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let arrived = shared.arrived.notified();
        {
            let mut inner = shared.lock();
            if offset > 0 {
                inner.confirmed_offset = inner.confirmed_offset.max(offset);
                inner
                    .pending
                    .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            }
            let ready: Vec<Value> = inner.pending.iter().take(limit).cloned().collect();
            if !ready.is_empty() || tokio::time::Instant::now() >= deadline {
                return ok(Value::Array(ready));
            }
        }
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            return ok(json!([]));
        }
    }
}

/// The "can't parse entities" error, when that switch is on and the call has a `parse_mode`.
fn reject_entities(inner: &Inner, params: &Value) -> Option<Response> {
    (inner.reject_entities && params.get("parse_mode").is_some_and(|m| !m.is_null())).then(|| {
        fail(
            StatusCode::BAD_REQUEST,
            "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0",
            None,
        )
    })
}

fn send_message(shared: &Shared, params: &Value) -> Response {
    let mut inner = shared.lock();
    if inner.rate_limited.0 > 0 {
        inner.rate_limited.0 -= 1;
        let after = inner.rate_limited.1;
        return fail(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("Too Many Requests: retry after {after}"),
            Some(json!({"retry_after": after})),
        );
    }
    if let Some(rejected) = reject_entities(&inner, params) {
        return rejected;
    }
    let message_id = inner.next_message_id;
    inner.next_message_id += 1;
    let chat_id = params["chat_id"].as_i64().unwrap_or(0);
    let mut message = json!({
        "message_id": message_id,
        "date": 1_764_500_000,
        "chat": chat_json(chat_id, if chat_id > 0 { "private" } else { "supergroup" }),
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Iris", "username": BOT_USERNAME},
        "text": params["text"],
    });
    if let Some(thread) = params.get("message_thread_id").filter(|t| !t.is_null()) {
        message["message_thread_id"] = thread.clone();
    }
    ok(message)
}

async fn download(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let inner = shared.lock();
    match inner.files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
