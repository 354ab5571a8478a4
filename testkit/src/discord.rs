//! A fake Discord: the REST routes the adapter calls (under `/api/v10`) and a WebSocket
//! gateway speaking the real opcodes — Hello, Identify → READY, Heartbeat → ACK, Dispatch
//! `MESSAGE_CREATE`, Resume (missed dispatches replayed, then `RESUMED`), Reconnect and
//! Invalid Session — on 127.0.0.1, with switches for the faults the adapter must survive:
//! 429 with `retry_after`, a dropped connection, a duplicated dispatch, refused intents, a
//! failing `/gateway`.
//!
//! serenity reaches REST through `HttpBuilder::proxy(base)` (it swaps `https://discord.com`
//! for the base), and the gateway URL comes from this fake's `/gateway` answer
//! (`ws://127.0.0.1:PORT/ws`), so nothing leaves the machine.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bot's user id and name.
pub const BOT_ID: u64 = 900_000_000_000_000_001;
pub const BOT_NAME: &str = "iris-test";
pub const APPLICATION_ID: u64 = 900_000_000_000_000_002;
/// Heartbeat interval the fake asks for, in milliseconds.
const HEARTBEAT_MS: u64 = 5_000;

/// A REST call the fake received.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// The path after `/api/v10`, e.g. `/channels/5/messages`.
    pub path: String,
    pub body: Value,
    /// Whether it was answered with success.
    pub ok: bool,
}

/// Who writes a message, and where.
#[derive(Debug, Clone)]
pub struct Author {
    pub user_id: u64,
    pub username: String,
    pub channel_id: u64,
    /// `None` in DMs.
    pub guild_id: Option<u64>,
    pub bot: bool,
    /// Guild role ids.
    pub roles: Vec<u64>,
}

impl Author {
    /// A DM from user `id` (the DM channel's id is derived from it).
    pub fn dm(id: u64) -> Self {
        Self {
            user_id: id,
            username: format!("user{id}"),
            channel_id: 1_000 + id,
            guild_id: None,
            bot: false,
            roles: Vec::new(),
        }
    }

    /// User `user` in guild channel `channel` (guild 1).
    pub fn guild(channel: u64, user: u64) -> Self {
        Self {
            user_id: user,
            username: format!("user{user}"),
            channel_id: channel,
            guild_id: Some(1),
            bot: false,
            roles: Vec::new(),
        }
    }
}

/// What goes to the gateway connection.
enum Outgoing {
    Text(String),
    /// Close with this code.
    Close(u16),
    /// Cut the connection without a close frame.
    Drop,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    next_id: u64,
    /// Every dispatch so far, with its sequence number (replayed on Resume).
    dispatched: Vec<(u64, Value)>,
    seq: u64,
    session: Option<String>,
    connection: Option<mpsc::UnboundedSender<Outgoing>>,
    identifies: u32,
    resumes: u32,
    /// The next this many message creates are answered 429 with this `retry_after` (seconds).
    rate_limited: (u32, f64),
    refuse_intents: bool,
    fail_gateway_url: bool,
    /// Attachment bytes by id, served at `/attachments/{id}/{name}`.
    files: std::collections::HashMap<String, Vec<u8>>,
    /// A per-route bucket on message creates: size, seconds to refill, requests left, when it
    /// refills.
    bucket: Option<(u32, f64, u32, std::time::Instant)>,
    /// Thread id → parent channel id.
    threads: std::collections::HashMap<u64, u64>,
    /// Threads the bot is a member of.
    joined: std::collections::HashSet<u64>,
}

struct Shared {
    token: String,
    addr: OnceLock<SocketAddr>,
    inner: Mutex<Inner>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::script::lock(&self.inner)
    }
}

/// A running fake; stops when dropped.
pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: crate::script::ServerTask,
}

impl FakeDiscord {
    /// Starts on a free port for bot `token`.
    pub async fn start(token: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            addr: OnceLock::new(),
            inner: Mutex::new(Inner {
                next_id: 5_000,
                ..Inner::default()
            }),
        });
        let app = Router::new()
            .route("/ws", get(gateway))
            .route("/attachments/{id}/{name}", get(attachment))
            .route("/api/v10/{*path}", any(rest))
            .with_state(shared.clone());
        let (addr, server) = crate::script::serve(app).await?;
        let _ = shared.addr.set(addr);
        Ok(Self {
            addr,
            shared,
            _server: server,
        })
    }

    /// The REST base to configure (`[discord] api_url`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends a `MESSAGE_CREATE` from `author` (to the connected bot, or kept for a Resume);
    /// `mentions_bot` adds the bot to the message's mentions (and `<@bot>` to its text).
    /// Returns the message id.
    pub fn message(&self, author: &Author, content: &str, mentions_bot: bool) -> u64 {
        self.message_with_file(author, content, mentions_bot, None)
    }

    /// [`Self::message`] with an attachment: `(file name, content type, bytes)`, served by
    /// this fake the way Discord's CDN serves it.
    pub fn message_with_file(
        &self,
        author: &Author,
        content: &str,
        mentions_bot: bool,
        file: Option<(&str, &str, Vec<u8>)>,
    ) -> u64 {
        let id = self.next_id();
        let attachments: Vec<Value> = file
            .map(|(name, content_type, bytes)| {
                let file_id = self.next_id().to_string();
                let size = bytes.len();
                self.shared.lock().files.insert(file_id.clone(), bytes);
                json!({
                    "id": file_id,
                    "filename": name,
                    "size": size,
                    "url": format!("http://{}/attachments/{file_id}/{name}", self.addr),
                    "proxy_url": format!("http://{}/attachments/{file_id}/{name}", self.addr),
                    "content_type": content_type,
                    "width": 4,
                    "height": 4,
                })
            })
            .into_iter()
            .collect();
        let mut content = content.to_owned();
        let mut mentions = Vec::new();
        if mentions_bot {
            content = format!("<@{BOT_ID}> {content}");
            mentions.push(bot_user());
        }
        let mut message = json!({
            "id": id.to_string(),
            "channel_id": author.channel_id.to_string(),
            "author": {
                "id": author.user_id.to_string(),
                "username": author.username,
                "discriminator": "0",
                "global_name": null,
                "avatar": null,
                "bot": author.bot,
            },
            "content": content,
            "timestamp": "2026-11-30T12:00:00.000000+00:00",
            "edited_timestamp": null,
            "tts": false,
            "mention_everyone": false,
            "mentions": mentions,
            "mention_roles": [],
            "attachments": attachments,
            "embeds": [],
            "pinned": false,
            "type": 0,
        });
        if let Some(guild) = author.guild_id {
            message["guild_id"] = json!(guild.to_string());
            let roles: Vec<String> = author.roles.iter().map(ToString::to_string).collect();
            message["member"] = json!({"roles": roles, "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false});
        }
        self.dispatch("MESSAGE_CREATE", message);
        id
    }

    /// Sends an `INTERACTION_CREATE` for slash command `name` with its `args` option, from
    /// `author`. Returns the interaction id.
    pub fn command(&self, author: &Author, name: &str, args: Option<&str>) -> u64 {
        let id = self.next_id();
        let options: Vec<Value> = args
            .map(|a| json!({"name": "args", "type": 3, "value": a}))
            .into_iter()
            .collect();
        let mut interaction = json!({
            "id": id.to_string(),
            "application_id": APPLICATION_ID.to_string(),
            "type": 2,
            "data": {"id": "1", "name": name, "type": 1, "options": options},
            "channel_id": author.channel_id.to_string(),
            "user": {
                "id": author.user_id.to_string(),
                "username": author.username,
                "discriminator": "0",
                "global_name": null,
                "avatar": null,
                "bot": false,
            },
            "token": format!("interaction-token-{id}"),
            "version": 1,
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 8_388_608,
        });
        if let Some(guild) = author.guild_id {
            interaction["guild_id"] = json!(guild.to_string());
        }
        self.dispatch("INTERACTION_CREATE", interaction);
        id
    }

    /// Makes `thread` a public thread of `parent` (the bot not in it).
    pub fn add_thread(&self, thread: u64, parent: u64) {
        self.shared.lock().threads.insert(thread, parent);
    }

    /// Threads started from messages (`POST …/threads`), as (parent channel, message, name).
    pub fn started_threads(&self) -> Vec<(String, String, String)> {
        self.calls("POST", "/channels/")
            .into_iter()
            .filter(|c| c.ok && c.path.ends_with("/threads"))
            .map(|c| {
                let parts: Vec<&str> = c.path.split('/').collect();
                (
                    parts.get(2).copied().unwrap_or_default().to_owned(),
                    parts.get(4).copied().unwrap_or_default().to_owned(),
                    c.body["name"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Sends the last dispatch again with a new sequence number (Discord may deliver twice).
    pub fn duplicate_last_dispatch(&self) {
        let last = self.shared.lock().dispatched.last().cloned();
        if let Some((_, event)) = last {
            let kind = event["t"].as_str().unwrap_or_default().to_owned();
            self.dispatch(&kind, event["d"].clone());
        }
    }

    /// Cuts the gateway connection without a close frame (the bot should resume).
    pub fn drop_connection(&self) {
        if let Some(connection) = self.shared.lock().connection.take() {
            let _ = connection.send(Outgoing::Drop);
        }
    }

    /// Asks the bot to reconnect (opcode 7).
    pub fn request_reconnect(&self) {
        self.send_op(json!({"op": 7, "d": null}));
    }

    /// Invalidates the session (opcode 9): `resumable` lets the bot resume, otherwise it must
    /// identify again.
    pub fn invalidate_session(&self, resumable: bool) {
        if !resumable {
            self.shared.lock().session = None;
        }
        self.send_op(json!({"op": 9, "d": resumable}));
    }

    /// Answers the next `count` message creates with 429 and `retry_after` seconds.
    pub fn rate_limit(&self, count: u32, retry_after: f64) {
        self.shared.lock().rate_limited = (count, retry_after);
    }

    /// Message creates share a bucket of `size` requests refilled `reset_after` seconds after
    /// it was first used, announced in `X-RateLimit-*` headers as Discord does; a create on an
    /// empty bucket is answered 429.
    pub fn bucket(&self, size: u32, reset_after: f64) {
        self.shared.lock().bucket = Some((size, reset_after, size, std::time::Instant::now()));
    }

    /// Closes the next Identify with 4014 (disallowed intents: message content not enabled).
    pub fn refuse_intents(&self, on: bool) {
        self.shared.lock().refuse_intents = on;
    }

    /// Answers `/gateway` with 500.
    pub fn fail_gateway_url(&self, on: bool) {
        self.shared.lock().fail_gateway_url = on;
    }

    /// REST calls so far to paths starting with `prefix`, with `method` (any case).
    pub fn calls(&self, method: &str, prefix: &str) -> Vec<Call> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method.eq_ignore_ascii_case(method) && c.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The bodies of messages created (successfully) in `channel`, in order.
    pub fn sent(&self, channel: u64) -> Vec<Value> {
        self.calls("POST", &format!("/channels/{channel}/messages"))
            .into_iter()
            .filter(|c| c.ok && c.path == format!("/channels/{channel}/messages"))
            .map(|c| c.body)
            .collect()
    }

    /// The texts of messages created in `channel`.
    pub fn sent_texts(&self, channel: u64) -> Vec<String> {
        self.sent(channel)
            .iter()
            .filter_map(|b| b["content"].as_str().map(str::to_owned))
            .collect()
    }

    /// How many times the bot identified, and resumed.
    pub fn sessions(&self) -> (u32, u32) {
        let inner = self.shared.lock();
        (inner.identifies, inner.resumes)
    }

    /// Whether a gateway connection is open.
    pub fn connected(&self) -> bool {
        self.shared.lock().connection.is_some()
    }

    fn next_id(&self) -> u64 {
        let mut inner = self.shared.lock();
        inner.next_id += 1;
        inner.next_id
    }

    fn dispatch(&self, kind: &str, data: Value) {
        let mut inner = self.shared.lock();
        inner.seq += 1;
        let event = json!({"op": 0, "t": kind, "s": inner.seq, "d": data});
        let seq = inner.seq;
        inner.dispatched.push((seq, event.clone()));
        if let Some(connection) = &inner.connection {
            let _ = connection.send(Outgoing::Text(event.to_string()));
        }
    }

    fn send_op(&self, payload: Value) {
        if let Some(connection) = &self.shared.lock().connection {
            let _ = connection.send(Outgoing::Text(payload.to_string()));
        }
    }
}

fn bot_user() -> Value {
    json!({
        "id": BOT_ID.to_string(),
        "username": BOT_NAME,
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
    })
}

/// `GET /ws`: the gateway.
async fn gateway(State(shared): State<Arc<Shared>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| session(shared, socket))
}

async fn session(shared: Arc<Shared>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel();
    shared.lock().connection = Some(tx.clone());
    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            let sent = match out {
                Outgoing::Text(text) => sink.send(Message::Text(text.into())).await,
                Outgoing::Close(code) => {
                    let frame = axum::extract::ws::CloseFrame {
                        code,
                        reason: "closed by the fake".into(),
                    };
                    let _ = sink.send(Message::Close(Some(frame))).await;
                    return;
                }
                Outgoing::Drop => return,
            };
            if sent.is_err() {
                return;
            }
        }
    });
    let hello = json!({"op": 10, "d": {"heartbeat_interval": HEARTBEAT_MS}});
    let _ = tx.send(Outgoing::Text(hello.to_string()));
    while let Some(Ok(message)) = stream.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(payload) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        match payload["op"].as_u64() {
            Some(1) => {
                let _ = tx.send(Outgoing::Text(json!({"op": 11}).to_string()));
            }
            Some(2) => identify(&shared, &tx, &payload["d"]),
            Some(6) => resume(&shared, &tx, &payload["d"]),
            _ => {}
        }
        if writer.is_finished() {
            break;
        }
    }
    writer.abort();
    let mut inner = shared.lock();
    if inner
        .connection
        .as_ref()
        .is_some_and(|c| c.same_channel(&tx))
    {
        inner.connection = None;
    }
}

fn identify(shared: &Shared, tx: &mpsc::UnboundedSender<Outgoing>, d: &Value) {
    let mut inner = shared.lock();
    if d["token"].as_str().map(|t| t.trim_start_matches("Bot ")) != Some(shared.token.as_str()) {
        let _ = tx.send(Outgoing::Close(4004));
        return;
    }
    if inner.refuse_intents {
        let _ = tx.send(Outgoing::Close(4014));
        return;
    }
    inner.identifies += 1;
    let session = format!("session-{}", inner.identifies);
    inner.session = Some(session.clone());
    inner.seq += 1;
    let addr = shared
        .addr
        .get()
        .map(ToString::to_string)
        .unwrap_or_default();
    let ready = json!({"op": 0, "t": "READY", "s": inner.seq, "d": {
        "v": 10,
        "user": bot_user(),
        "guilds": [],
        "session_id": session,
        "resume_gateway_url": format!("ws://{addr}/ws"),
        "shard": [0, 1],
        "application": {"id": APPLICATION_ID.to_string(), "flags": 0},
    }});
    let _ = tx.send(Outgoing::Text(ready.to_string()));
}

fn resume(shared: &Shared, tx: &mpsc::UnboundedSender<Outgoing>, d: &Value) {
    let mut inner = shared.lock();
    if inner.session.as_deref() != d["session_id"].as_str() {
        let _ = tx.send(Outgoing::Text(json!({"op": 9, "d": false}).to_string()));
        return;
    }
    inner.resumes += 1;
    let after = d["seq"].as_u64().unwrap_or(0);
    for (seq, event) in &inner.dispatched {
        if *seq > after {
            let _ = tx.send(Outgoing::Text(event.to_string()));
        }
    }
    inner.seq += 1;
    let resumed = json!({"op": 0, "t": "RESUMED", "s": inner.seq, "d": {}});
    let _ = tx.send(Outgoing::Text(resumed.to_string()));
}

/// `GET /attachments/{id}/{name}`: the CDN.
async fn attachment(
    State(shared): State<Arc<Shared>>,
    Path((id, _name)): Path<(String, String)>,
) -> Response {
    match shared.lock().files.get(&id) {
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `/api/v10/...`: the REST routes the adapter uses.
async fn rest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{path}");
    let mut body = crate::script::form_params(&headers, &body);
    // A message with a file: its JSON is in `payload_json`, the file in `files[0]` (kept as
    // `_file`).
    if let Some(payload) = body["payload_json"]
        .as_str()
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
    {
        let file = body["files[0]"].clone();
        body = payload;
        body["_file"] = file;
    }
    let authorised = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bot {}", shared.token));
    let mut inner = shared.lock();
    let addr = shared
        .addr
        .get()
        .map(ToString::to_string)
        .unwrap_or_default();
    let (ok, response) = answer(&mut inner, &addr, &method, &path, &body, authorised);
    inner.calls.push(Call {
        method: method.to_string(),
        path,
        body,
        ok,
    });
    response
}

/// The answer to one REST call, and whether it succeeded.
fn answer(
    inner: &mut Inner,
    addr: &str,
    method: &Method,
    path: &str,
    body: &Value,
    authorised: bool,
) -> (bool, Response) {
    if path == "/gateway" {
        // serenity asks for the gateway URL without a token.
        if inner.fail_gateway_url {
            return (false, StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        return (
            true,
            axum::Json(json!({"url": format!("ws://{addr}/ws")})).into_response(),
        );
    }
    if !authorised {
        return (
            false,
            error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized"),
        );
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let response = match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": format!("ws://{addr}/ws"),
            "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
        }))
        .into_response(),
        ("GET", ["users", "@me"]) => axum::Json(bot_user()).into_response(),
        ("POST", ["channels", channel, "messages"]) => {
            if inner.rate_limited.0 > 0 {
                inner.rate_limited.0 -= 1;
                return (false, rate_limited(inner.rate_limited.1));
            }
            let headers = match take_from_bucket(inner) {
                Ok(headers) => headers,
                Err(until) => return (false, rate_limited(until)),
            };
            inner.next_id += 1;
            // Posting in a thread makes the bot a member, as on Discord.
            if let Ok(id) = channel.parse::<u64>()
                && inner.threads.contains_key(&id)
            {
                inner.joined.insert(id);
            }
            let mut response = axum::Json(sent_message(inner.next_id, channel, body)).into_response();
            for (name, value) in headers {
                if let Ok(value) = value.parse() {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        ("GET", ["channels", channel]) => {
            let id = channel.parse::<u64>().unwrap_or(0);
            let info = match inner.threads.get(&id) {
                Some(parent) => json!({"id": channel, "type": 11, "parent_id": parent.to_string()}),
                None => json!({"id": channel, "type": 0}),
            };
            axum::Json(info).into_response()
        }
        ("GET", ["channels", thread, "thread-members", "@me"]) => {
            let id = thread.parse::<u64>().unwrap_or(0);
            if !inner.joined.contains(&id) {
                return (false, error(StatusCode::NOT_FOUND, 10_007, "Unknown Member"));
            }
            axum::Json(json!({"id": thread, "user_id": BOT_ID.to_string()})).into_response()
        }
        ("POST", ["channels", channel, "messages", _, "threads"]) => {
            inner.next_id += 1;
            let id = inner.next_id;
            let parent = channel.parse::<u64>().unwrap_or(0);
            inner.threads.insert(id, parent);
            inner.joined.insert(id);
            axum::Json(json!({"id": id.to_string(), "type": 11, "parent_id": channel, "name": body["name"]}))
                .into_response()
        }
        ("PATCH", ["channels", channel, "messages", id]) => {
            axum::Json(sent_message(id.parse().unwrap_or(0), channel, body)).into_response()
        }
        ("POST", ["channels", _, "typing"]) => StatusCode::NO_CONTENT.into_response(),
        ("PUT", ["applications", _, "commands"]) => axum::Json(body.clone()).into_response(),
        ("POST", ["interactions", _, _, "callback"]) => StatusCode::NO_CONTENT.into_response(),
        _ => return (false, error(StatusCode::NOT_FOUND, 10_000, "404: Not Found")),
    };
    (true, response)
}

/// One request from the message bucket, if there is one: the headers to answer with, or (when
/// it is empty) the seconds until it refills.
fn take_from_bucket(inner: &mut Inner) -> Result<Vec<(&'static str, String)>, f64> {
    let Some((size, reset_after, left, refills)) = inner.bucket.as_mut() else {
        return Ok(Vec::new());
    };
    let now = std::time::Instant::now();
    if now >= *refills {
        *left = *size;
        *refills = now + std::time::Duration::from_secs_f64(*reset_after);
    }
    let until = refills.saturating_duration_since(now).as_secs_f64();
    if *left == 0 {
        return Err(until);
    }
    *left -= 1;
    Ok(vec![
        ("x-ratelimit-limit", size.to_string()),
        ("x-ratelimit-remaining", left.to_string()),
        ("x-ratelimit-reset-after", format!("{until:.3}")),
        ("x-ratelimit-bucket", "fake-messages".to_owned()),
    ])
}

fn sent_message(id: u64, channel: &str, body: &Value) -> Value {
    json!({
        "id": id.to_string(),
        "channel_id": channel,
        "author": bot_user(),
        "content": body["content"],
        "timestamp": "2026-11-30T12:00:00.000000+00:00",
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "type": if body.get("message_reference").is_some() { 19 } else { 0 },
    })
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

/// Discord's 429: `retry_after` in seconds in the body, `Retry-After` in the header.
fn rate_limited(after: f64) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({"message": "You are being rate limited.", "retry_after": after, "global": false})),
    )
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        ("retry-after", format!("{}", after.ceil())),
        ("x-ratelimit-remaining", "0".to_owned()),
        ("x-ratelimit-reset-after", format!("{after}")),
        ("x-ratelimit-bucket", "fake-bucket".to_owned()),
        ("x-ratelimit-scope", "user".to_owned()),
    ] {
        if let Ok(value) = value.parse() {
            headers.insert(name, value);
        }
    }
    response
}
