//! A scripted OpenAI-compatible server: `POST /v1/chat/completions`, streaming or not.
//!
//! Each request takes the next [`Reply`] from the script (an exhausted script answers 500 so a
//! test that calls too often fails loudly). Streams are framed as llama.cpp and OpenAI frame
//! them: a first chunk with `delta.role`, content or tool-call deltas (a tool call's first
//! fragment carries `index`, `id`, `type` and the name; later ones only argument pieces), a
//! finish chunk, a usage chunk with `"choices": []` when `stream_options.include_usage` asked
//! for it, then `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::script::{Kind, Running, Shared, error_response, pieces};
pub use crate::script::{Recorded, Reply};

/// A running fake; stops when dropped.
pub struct FakeOpenAi {
    /// The base URL to configure: `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    running: Running,
}

impl FakeOpenAi {
    /// Starts on a free port with this script.
    pub async fn start(script: impl IntoIterator<Item = Reply>) -> std::io::Result<Self> {
        let running = Running::start(script, "/v1/chat/completions", post(complete)).await?;
        Ok(Self {
            base_url: format!("http://{}/v1", running.addr),
            running,
        })
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.running.requests()
    }
}

async fn complete(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let request = body.clone();
    let Some(reply) = shared
        .next(Recorded {
            body,
            authorization,
        })
        .map(|r| r.resolved(&request))
    else {
        let body = json!({"error": {"message": "fake script exhausted", "type": "server_error"}});
        return (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response();
    };
    tokio::time::sleep(reply.delay).await;
    match &reply.kind {
        Kind::Hang => std::future::pending().await,
        Kind::Error {
            status,
            body,
            retry_after,
        } => error_response(*status, body, retry_after.as_deref()),
        _ if stream => sse(&reply, include_usage),
        _ => whole(&reply),
    }
}

fn usage_json(reply: &Reply) -> Value {
    match reply.usage {
        Some((p, c)) => json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}),
        None => Value::Null,
    }
}

fn tool_calls_json(calls: &[(String, String)]) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": args}}))
        .collect()
}

fn whole(reply: &Reply) -> Response {
    let (message, default_finish) = match &reply.kind {
        Kind::Text { text, .. } | Kind::Dropped(text) => {
            (json!({"role": "assistant", "content": text}), "stop")
        }
        Kind::ToolCalls(calls) => (
            json!({"role": "assistant", "content": reply.saying.clone().unwrap_or_default(), "tool_calls": tool_calls_json(calls)}),
            "tool_calls",
        ),
        Kind::Error { .. } | Kind::Hang | Kind::Echo => (Value::Null, "stop"),
    };
    let finish = reply
        .finish_reason
        .clone()
        .unwrap_or_else(|| default_finish.to_owned());
    let mut body = json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    });
    if reply.usage.is_some() {
        body["usage"] = usage_json(reply);
    }
    Json(body).into_response()
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

fn sse(reply: &Reply, include_usage: bool) -> Response {
    let mut events = vec![chunk(json!({"role": "assistant", "content": null}), None)];
    let mut complete = true;
    let default_finish = match &reply.kind {
        Kind::Text { text, chunks } => {
            events.extend(
                pieces(text, *chunks)
                    .into_iter()
                    .map(|p| chunk(json!({"content": p}), None)),
            );
            "stop"
        }
        Kind::Dropped(text) => {
            events.extend(
                pieces(text, 2)
                    .into_iter()
                    .map(|p| chunk(json!({"content": p}), None)),
            );
            complete = false;
            "stop"
        }
        Kind::ToolCalls(calls) => {
            if let Some(text) = &reply.saying {
                events.push(chunk(json!({"content": text}), None));
            }
            for (i, (name, args)) in calls.iter().enumerate() {
                let first = json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": ""}}]});
                events.push(chunk(first, None));
                for piece in pieces(args, 2) {
                    events.push(chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
            }
            "tool_calls"
        }
        Kind::Error { .. } | Kind::Hang | Kind::Echo => "stop",
    };
    if complete {
        let finish = reply
            .finish_reason
            .clone()
            .unwrap_or_else(|| default_finish.to_owned());
        events.push(chunk(json!({}), Some(&finish)));
        if include_usage && reply.usage.is_some() {
            let usage = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [], "usage": usage_json(reply)});
            events.push(format!("data: {usage}\n\n"));
        }
        events.push("data: [DONE]\n\n".to_owned());
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
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    response
}
