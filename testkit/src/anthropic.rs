//! A scripted Anthropic Messages API server: `POST /v1/messages`, streamed.
//!
//! Follows the same [`Reply`] script as the OpenAI fake and frames answers as Anthropic does:
//! `event: <type>` + `data: <json>` pairs — `message_start` (input usage), one
//! `content_block_start` / `content_block_delta`… / `content_block_stop` group per block
//! (thinking with its signature, text, `tool_use` with `input_json_delta` fragments),
//! `message_delta` (stop reason, output tokens) and `message_stop`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::script::{Kind, Running, Shared, error_response, pieces};
pub use crate::script::{Recorded, Reply};

/// A running fake; stops when dropped.
pub struct FakeAnthropic {
    /// The base URL to configure: `http://127.0.0.1:PORT`.
    pub base_url: String,
    running: Running,
}

impl FakeAnthropic {
    /// Starts on a free port with this script.
    pub async fn start(script: impl IntoIterator<Item = Reply>) -> std::io::Result<Self> {
        let running = Running::start(script, "/v1/messages", post(messages)).await?;
        Ok(Self {
            base_url: format!("http://{}", running.addr),
            running,
        })
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.running.requests()
    }
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let request = body.clone();
    let Some(reply) = shared
        .next(Recorded {
            body,
            authorization: key,
        })
        .map(|r| r.resolved(&request))
    else {
        let body = json!({"type": "error", "error": {"type": "api_error", "message": "fake script exhausted"}});
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response();
    };
    tokio::time::sleep(reply.delay).await;
    if let Kind::Error {
        status,
        body,
        retry_after,
    } = &reply.kind
    {
        let response = error_response(*status, body, retry_after.as_deref());
        return response;
    }
    if let Kind::Hang = reply.kind {
        std::future::pending::<()>().await;
    }
    let mut events = Vec::new();
    let (input, output) = reply.usage.unwrap_or((0, 0));
    events.push(event(
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
        "role": "assistant", "model": "fake", "content": [], "stop_reason": null,
        "usage": {"input_tokens": input, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
    ));
    events.push(event(json!({"type": "ping"})));
    let mut index = 0;
    if let Some((text, signature)) = &reply.thinking {
        events.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": ""}})));
        for piece in pieces(text, 2) {
            events.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        events.push(event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "signature_delta", "signature": signature}})));
        events.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let (default_stop, complete) = match &reply.kind {
        Kind::Text { text, chunks } => {
            push_text(&mut events, index, text, *chunks);
            ("end_turn", true)
        }
        Kind::Dropped(text) => {
            push_text(&mut events, index, text, 2);
            events.pop(); // no content_block_stop either
            ("end_turn", false)
        }
        Kind::ToolCalls(calls) => {
            for (i, (name, args)) in calls.iter().enumerate() {
                events.push(event(json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": {}}})));
                for piece in pieces(args, 2) {
                    events.push(event(json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}})));
                }
                events.push(event(json!({"type": "content_block_stop", "index": index})));
                index += 1;
            }
            ("tool_use", true)
        }
        Kind::Error { .. } | Kind::Hang | Kind::Echo => ("end_turn", true),
    };
    if complete {
        let stop = reply
            .finish_reason
            .clone()
            .unwrap_or_else(|| default_stop.to_owned());
        events.push(event(
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": output}}),
        ));
        events.push(event(json!({"type": "message_stop"})));
    }
    let events = futures_util::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, Infallible>(Bytes::from(e))),
    );
    let mut response = if reply.stall {
        Response::new(Body::from_stream(
            events.chain(futures_util::stream::pending()),
        ))
    } else {
        Response::new(Body::from_stream(events))
    };
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn push_text(events: &mut Vec<String>, index: usize, text: &str, chunks: usize) {
    events.push(event(json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""}})));
    for piece in pieces(text, chunks) {
        events.push(event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": piece}})));
    }
    events.push(event(json!({"type": "content_block_stop", "index": index})));
}

fn event(data: Value) -> String {
    let kind = data["type"].as_str().unwrap_or("message").to_owned();
    format!("event: {kind}\ndata: {data}\n\n")
}
