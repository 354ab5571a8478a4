//! The OpenAI-compatible API (DESIGN.md §8, source `api`): `POST /v1/chat/completions`
//! (streamed or not, the standard shapes, usage) and `GET /v1/models`, behind
//! `Authorization: Bearer <api key>` compared in constant time (no key configured: every call
//! is refused).
//!
//! With `X-Iris-Conversation` or the body's `user`, the conversation lives on the server: only
//! the trailing user message(s) of the request are taken, the history is Iris's own. Without
//! them the call is stateless: the request's history seeds a fresh conversation of its own.
//! Either way every message is stored, and the response carries `X-Iris-Session-Id`.

use std::convert::Infallible;
use std::sync::Arc;

use agent_core::store::{NewConversation, NewMessage, Role, SessionSpec, SessionStore};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::conversation::key::{Place, conversation_key};
use crate::conversation::{Gateway, Inbound, Submission, SubmitError, TurnReply};

/// What the API handlers share.
pub struct ApiState {
    pub gateway: Arc<Gateway>,
    pub store: Arc<dyn SessionStore>,
    /// The key clients must send; `None` refuses everything.
    pub key: Option<String>,
}

/// The API's routes.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/v1/models", get(models))
        .with_state(state)
}

/// An error in OpenAI's shape.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"message": message.into(), "type": kind, "code": kind}});
    (status, Json(body)).into_response()
}

fn authorised(state: &ApiState, headers: &HeaderMap) -> bool {
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match (&state.key, given) {
        (Some(key), Some(given)) => bool::from(key.as_bytes().ct_eq(given.trim().as_bytes())),
        _ => false,
    }
}

async fn models(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    if !authorised(&state, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "a valid API key is required",
        );
    }
    Json(json!({
        "object": "list",
        "data": [{"id": state.gateway.model_name(), "object": "model", "created": 0, "owned_by": "iris"}],
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
struct Request {
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: bool,
    user: Option<String>,
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

impl WireMessage {
    /// The text of `content`: a string, or the text parts of an array.
    fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }
}

async fn completions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorised(&state, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "a valid API key is required",
        );
    }
    let request: Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("invalid body: {e}"),
            );
        }
    };
    // The trailing user messages are this turn's; everything before them is history.
    let first_new = request
        .messages
        .iter()
        .rposition(|m| m.role != "user")
        .map_or(0, |i| i + 1);
    let new: Vec<String> = request.messages[first_new..]
        .iter()
        .map(WireMessage::text)
        .filter(|t| !t.trim().is_empty())
        .collect();
    if new.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the last message must be a user message with text",
        );
    }
    let named = headers
        .get("x-iris-conversation")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(request.user.clone())
        .filter(|c| !c.trim().is_empty());
    let key = match &named {
        Some(name) => conversation_key(Place::Api { conversation: name }, true),
        None => {
            // Stateless: a conversation of its own, seeded with the request's history.
            let key = format!("api:stateless:{:016x}", fastrand::u64(..));
            if let Err(e) = seed(&state, &key, &request.messages[..first_new]).await {
                tracing::error!(error = %e, "API history not stored");
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "the history could not be stored",
                );
            }
            key
        }
    };
    let id = format!("chatcmpl-{:016x}", fastrand::u64(..));
    let (stream_tx, stream_rx) = if request.stream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let inbound = Inbound {
        source: "api".into(),
        platform_message_id: id.clone(),
        conversation_key: key,
        text: new.join("\n\n"),
        images: Vec::new(),
        target: "api".into(),
        meta: json!({"conversation": named}),
        stream: stream_tx,
    };
    let reply = match state.gateway.submit(inbound).await {
        Ok(Submission::Accepted { reply, .. }) => reply,
        Ok(Submission::Duplicate { .. }) => {
            return error(
                StatusCode::CONFLICT,
                "duplicate",
                "this request was already answered",
            );
        }
        Err(SubmitError::Busy) => {
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_busy",
                "this conversation has too many messages waiting",
            );
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static("5"));
            return response;
        }
        Err(SubmitError::Store(e)) => {
            tracing::error!(error = %e, "API message not stored");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the message could not be stored",
            );
        }
    };
    let model = state.gateway.model_name();
    match stream_rx {
        None => match reply.await {
            Ok(reply) => whole(&id, &model, &reply),
            Err(_) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the turn ended without a reply",
            ),
        },
        Some(deltas) => streamed(
            id,
            model,
            deltas,
            reply,
            request.stream_options.is_some_and(|o| o.include_usage),
        ),
    }
}

/// Stores `history` as the first session of a new conversation `key`.
async fn seed(
    state: &ApiState,
    key: &str,
    history: &[WireMessage],
) -> Result<(), agent_core::store::StoreError> {
    let conversation = state
        .store
        .conversation(&NewConversation::new(key, "api"))
        .await?;
    let session = state
        .store
        .start_session(conversation.id, &SessionSpec::default())
        .await?;
    let messages: Vec<NewMessage> = history
        .iter()
        .filter_map(|m| {
            let role = match m.role.as_str() {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                // The system prompt is the deployment's; tool traffic is not replayed.
                _ => return None,
            };
            let text = m.text();
            (!text.is_empty()).then(|| NewMessage::text(role, text))
        })
        .collect();
    if !messages.is_empty() {
        state.store.append_messages(&session.id, &messages).await?;
    }
    Ok(())
}

fn usage_json(reply: &TurnReply) -> Value {
    let (prompt, completion) = reply.usage.unwrap_or((0, 0));
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn with_session(mut response: Response, session: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(session) {
        response.headers_mut().insert("x-iris-session-id", value);
    }
    response
}

fn whole(id: &str, model: &str, reply: &TurnReply) -> Response {
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.text},
            "finish_reason": "stop",
        }],
        "usage": usage_json(reply),
    });
    with_session(
        (StatusCode::OK, Json(body)).into_response(),
        &reply.session_id,
    )
}

/// Server-sent events as OpenAI streams them: a role chunk, content deltas as the model writes
/// them, a finish chunk, usage when asked for, `[DONE]`. A turn that fails after streaming
/// began ends with its notice as the last delta.
fn streamed(
    id: String,
    model: String,
    mut deltas: tokio::sync::mpsc::UnboundedReceiver<String>,
    reply: tokio::sync::oneshot::Receiver<TurnReply>,
    include_usage: bool,
) -> Response {
    let created = chrono::Utc::now().timestamp();
    let head =
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model});
    let frame = |body: &Value| Bytes::from(format!("data: {body}\n\n"));
    let usage_head = head.clone();
    let chunk = move |delta: Value, finish: Option<&str>| {
        let mut body = head.clone();
        body["choices"] = json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
        frame(&body)
    };
    let events = async_stream(move |tx| async move {
        let _ = tx.send(chunk(json!({"role": "assistant", "content": ""}), None));
        let mut streamed = String::new();
        while let Some(delta) = deltas.recv().await {
            streamed.push_str(&delta);
            let _ = tx.send(chunk(json!({"content": delta}), None));
        }
        // The turn is over (its sender dropped); its reply is stored.
        if let Ok(reply) = reply.await {
            // What the stream has not shown yet: the rest of a continued answer, or the whole
            // reply when it is not what was streamed (an earlier text reused, a failure notice).
            let rest = reply.text.strip_prefix(&streamed).unwrap_or(&reply.text);
            if !rest.is_empty() {
                let _ = tx.send(chunk(json!({"content": rest}), None));
            }
            let _ = tx.send(chunk(json!({}), Some("stop")));
            if include_usage {
                let mut body = usage_head;
                body["choices"] = json!([]);
                body["usage"] = usage_json(&reply);
                let _ = tx.send(frame(&body));
            }
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n"));
    });
    let mut response = Response::new(Body::from_stream(events));
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// A byte stream fed by a task.
fn async_stream<F, Fut>(produce: F) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::UnboundedSender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(produce(tx));
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|bytes| (Ok(bytes), rx))
    })
}
