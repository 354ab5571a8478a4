//! The script both model fakes follow: what to answer to each request, and what was asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde_json::Value;

/// What the fake answers to one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) kind: Kind,
    pub(crate) usage: Option<(u64, u64)>,
    pub(crate) delay: Duration,
    pub(crate) finish_reason: Option<String>,
    /// A thinking block (text, signature) before the answer (Anthropic).
    pub(crate) thinking: Option<(String, String)>,
    /// Text sent beside tool calls.
    pub(crate) saying: Option<String>,
    /// Keep the stream open, silent, after the last event (a model hung mid-answer).
    pub(crate) stall: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Text {
        text: String,
        chunks: usize,
    },
    ToolCalls(Vec<(String, String)>),
    Error {
        status: u16,
        body: String,
        retry_after: Option<String>,
    },
    /// Never answers.
    Hang,
    /// Streams this text, then closes without a finish reason or `[DONE]`.
    Dropped(String),
    /// Answers `echo: ` and every user message of the request, joined by ` | ` (to show which
    /// history a request carried).
    Echo,
}

impl Reply {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            usage: None,
            delay: Duration::ZERO,
            finish_reason: None,
            thinking: None,
            saying: None,
            stall: false,
        }
    }

    /// A text answer, streamed in `chunks` pieces (split on character boundaries).
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Kind::Text {
            text: text.into(),
            chunks: 3,
        })
    }

    /// Tool calls `(name, JSON arguments)`, ids `call_0`, `call_1`…
    pub fn tool_calls<N: Into<String>, A: Into<String>>(
        calls: impl IntoIterator<Item = (N, A)>,
    ) -> Self {
        Self::new(Kind::ToolCalls(
            calls
                .into_iter()
                .map(|(n, a)| (n.into(), a.into()))
                .collect(),
        ))
    }

    /// An HTTP error with this body.
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        Self::new(Kind::Error {
            status,
            body: body.into(),
            retry_after: None,
        })
    }

    /// Answers with the request's own user messages (see [`Kind::Echo`]): many conversations
    /// can share one fake and each reply still shows whose history it saw.
    pub fn echo() -> Self {
        Self::new(Kind::Echo)
    }

    /// Never answers (to test timeouts and cancellation).
    pub fn hang() -> Self {
        Self::new(Kind::Hang)
    }

    /// Streams `text`, then drops the connection mid-answer.
    pub fn dropped(text: impl Into<String>) -> Self {
        Self::new(Kind::Dropped(text.into()))
    }

    /// Streams `text`, then hangs mid-answer with the connection open (to test that a cancel
    /// abandons a stalled stream and keeps what it said).
    pub fn stalled(text: impl Into<String>) -> Self {
        Self {
            stall: true,
            ..Self::new(Kind::Dropped(text.into()))
        }
    }

    /// Reports this usage (prompt, completion tokens).
    pub fn usage(mut self, prompt: u64, completion: u64) -> Self {
        self.usage = Some((prompt, completion));
        self
    }

    /// Waits this long before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Streams text in this many pieces.
    pub fn chunks(mut self, n: usize) -> Self {
        if let Kind::Text { chunks, .. } = &mut self.kind {
            *chunks = n.max(1);
        }
        self
    }

    /// Overrides the finish reason (e.g. `length`, `content_filter`).
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Starts the answer with a signed thinking block (Anthropic only).
    pub fn thinking(mut self, text: impl Into<String>, signature: impl Into<String>) -> Self {
        self.thinking = Some((text.into(), signature.into()));
        self
    }

    /// Text the model writes beside its tool calls (OpenAI fake).
    pub fn saying(mut self, text: impl Into<String>) -> Self {
        self.saying = Some(text.into());
        self
    }

    /// Adds a `Retry-After` header to an error reply.
    pub fn retry_after(mut self, value: impl Into<String>) -> Self {
        if let Kind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(value.into());
        }
        self
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub body: Value,
    pub authorization: Option<String>,
}

#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) script: Mutex<VecDeque<Reply>>,
    pub(crate) requests: Mutex<Vec<Recorded>>,
}

impl Shared {
    /// Records a request and takes the next reply (None: the script is exhausted).
    pub(crate) fn next(&self, recorded: Recorded) -> Option<Reply> {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push(recorded);
        }
        self.script.lock().ok().and_then(|mut s| s.pop_front())
    }
}

impl Reply {
    /// This reply with an echo resolved against `body` (the request), ready to render.
    pub(crate) fn resolved(mut self, body: &Value) -> Self {
        if matches!(self.kind, Kind::Echo) {
            self.kind = Kind::Text {
                text: echo_text(body),
                chunks: 2,
            };
        }
        self
    }
}

/// `echo: ` and the text of every user message in `body["messages"]`.
fn echo_text(body: &Value) -> String {
    let users: Vec<String> = body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "user")
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                })
                .collect()
        })
        .unwrap_or_default();
    format!("echo: {}", users.join(" | "))
}

/// Splits `text` into `n` pieces on character boundaries.
pub(crate) fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A fake's server task and script, shared by both fakes; stops when dropped.
pub(crate) struct Running {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) shared: Arc<Shared>,
    _server: ServerTask,
}

/// A fake's server task; the fake stops when this is dropped.
pub(crate) struct ServerTask(tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `app` on a free port of 127.0.0.1 until the returned task is dropped.
pub(crate) async fn serve(app: Router) -> std::io::Result<(std::net::SocketAddr, ServerTask)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, ServerTask(server)))
}

/// A fake's state, locked; a test that panicked while holding it does not poison the rest.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Running {
    /// Serves `handler` at `path` on a free port, following `script`.
    pub(crate) async fn start(
        script: impl IntoIterator<Item = Reply>,
        path: &str,
        handler: MethodRouter<Arc<Shared>>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        shared
            .script
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend(script);
        let app = Router::new()
            .route(path, handler)
            .with_state(shared.clone());
        let (addr, server) = serve(app).await?;
        Ok(Self {
            addr,
            shared,
            _server: server,
        })
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

/// An HTTP error reply with a JSON body and an optional `Retry-After`.
pub(crate) fn error_response(status: u16, body: &str, retry_after: Option<&str>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body.to_owned()).into_response();
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if let Some(value) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        response.headers_mut().insert("retry-after", value);
    }
    response
}

/// A request body's parameters, whether JSON, multipart or form encoded (teloxide sends JSON,
/// and multipart for methods that can carry a file; Discord multipart for attachments).
/// Multipart fields come back as strings.
pub(crate) fn form_params(headers: &axum::http::HeaderMap, body: &[u8]) -> serde_json::Value {
    if body.is_empty() {
        return serde_json::json!({});
    }
    let boundary = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.starts_with("multipart/form-data"))
        .and_then(|v| v.split("boundary=").nth(1))
        .map(|b| b.trim_matches('"').to_owned());
    if let Some(boundary) = boundary {
        let text = String::from_utf8_lossy(body);
        let mut fields = serde_json::Map::new();
        for part in text.split(&format!("--{boundary}")) {
            let Some((head, value)) = part.split_once("\r\n\r\n") else {
                continue;
            };
            let Some(name) = head
                .split("name=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
            else {
                continue;
            };
            let value = value.strip_suffix("\r\n").unwrap_or(value);
            fields.insert(name.to_owned(), serde_json::Value::String(value.to_owned()));
        }
        return serde_json::Value::Object(fields);
    }
    serde_json::from_slice(body).unwrap_or_else(|_| {
        let pairs: serde_json::Map<String, serde_json::Value> = String::from_utf8_lossy(body)
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.to_owned())))
            .collect();
        serde_json::Value::Object(pairs)
    })
}
