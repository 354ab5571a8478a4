//! Model-call failures, classified so the loop knows what to do (DESIGN.md §5).
//!
//! Providers word the same failure differently, so classification reads the status code and
//! the error text together: a 400 is a context overflow when OpenAI says "maximum context
//! length", Anthropic "prompt is too long", vLLM "This model's maximum context length" or
//! llama.cpp "exceeds the available context size"; otherwise it is a format error. Where the
//! text gives the real limit, it is parsed so compression can aim below it.

use std::time::Duration;

/// What kind of failure, i.e. which recovery applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 429 / rate-limit text: wait `Retry-After`, then a fallback provider.
    RateLimit,
    /// 503, 529: back off and retry.
    Overloaded,
    /// 500, 502: back off and retry.
    ServerError,
    /// Connect or read failure, stream idle: rebuild the client and retry.
    Transport,
    /// Request timed out.
    Timeout,
    /// The prompt does not fit: compress and retry.
    ContextOverflow,
    /// 413: compress and retry.
    PayloadTooLarge,
    /// 401, 403: fallback, else stop with an actionable message.
    Auth,
    /// 402: fallback, else stop.
    Billing,
    /// 404 with model text: fallback provider.
    ModelNotFound,
    /// Moderation refused: no retry; tell the user.
    ContentPolicy,
    /// Invalid thinking signature: strip reasoning from the request copy, retry once.
    ThinkingSignature,
    /// Any other 4xx: fallback or stop.
    FormatError,
    /// Anything else: back off and retry.
    Unknown,
    /// The turn was cancelled (`/stop`, interrupt): not a failure to recover from.
    Cancelled,
}

impl ErrorClass {
    /// The request is too big: the loop compresses and retries.
    pub fn needs_compression(self) -> bool {
        matches!(self, Self::ContextOverflow | Self::PayloadTooLarge)
    }

    /// The label used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::Overloaded => "overloaded",
            Self::ServerError => "server_error",
            Self::Transport => "transport",
            Self::Timeout => "timeout",
            Self::ContextOverflow => "context_overflow",
            Self::PayloadTooLarge => "payload_too_large",
            Self::Auth => "auth",
            Self::Billing => "billing",
            Self::ModelNotFound => "model_not_found",
            Self::ContentPolicy => "content_policy",
            Self::ThinkingSignature => "thinking_signature",
            Self::FormatError => "format_error",
            Self::Unknown => "unknown",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class:?} (HTTP {status:?}): {message}")]
pub struct LlmError {
    pub class: ErrorClass,
    pub status: Option<u16>,
    /// The provider's message (or the transport error), for logs and the user.
    pub message: String,
    /// From `Retry-After` (seconds or an HTTP date is not parsed: seconds only).
    pub retry_after: Option<Duration>,
    /// For context overflows: the real context limit, when the text gives it.
    pub context_limit: Option<u64>,
}

impl LlmError {
    /// A transport-level failure (no HTTP answer).
    pub fn transport(message: impl Into<String>, timed_out: bool) -> Self {
        Self {
            class: if timed_out {
                ErrorClass::Timeout
            } else {
                ErrorClass::Transport
            },
            status: None,
            message: message.into(),
            retry_after: None,
            context_limit: None,
        }
    }

    /// The provider answered but withheld the text (`finish_reason: content_filter`).
    pub fn content_filtered() -> Self {
        Self {
            class: ErrorClass::ContentPolicy,
            status: None,
            message: "the provider's content filter withheld the answer".into(),
            retry_after: None,
            context_limit: None,
        }
    }

    /// The turn was cancelled while waiting for the model.
    pub fn cancelled() -> Self {
        Self {
            class: ErrorClass::Cancelled,
            status: None,
            message: "cancelled".into(),
            retry_after: None,
            context_limit: None,
        }
    }

    /// Classifies an HTTP error answer from its status, `Retry-After` header and body.
    pub fn from_http(status: u16, retry_after: Option<&str>, body: &str) -> Self {
        let message = error_message(body);
        let lower = format!("{message} {body}").to_lowercase();
        let class = classify(status, &lower);
        Self {
            class,
            status: Some(status),
            retry_after: retry_after
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| *s >= 0.0)
                .map(Duration::from_secs_f64),
            context_limit: if class == ErrorClass::ContextOverflow {
                context_limit(&lower)
            } else {
                None
            },
            message,
        }
    }
}

/// The `error.message` of a JSON error body, else the body itself (shortened).
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(|m| m.as_str())
    });
    match message {
        Some(m) => m.to_owned(),
        None => body.chars().take(500).collect(),
    }
}

fn classify(status: u16, text: &str) -> ErrorClass {
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(&[
        "invalid thinking signature",
        "invalid `signature` in `thinking` block",
        "thinking block signature",
    ]) {
        return ErrorClass::ThinkingSignature;
    }
    if has(&[
        "maximum context length",
        "context_length_exceeded",
        "prompt is too long",
        "exceeds the available context size",
        "exceed_context_size_error",
        "context window",
        "too many tokens",
        "input is too long",
    ]) && matches!(status, 400 | 413 | 422)
    {
        return ErrorClass::ContextOverflow;
    }
    if has(&[
        "content_filter",
        "content policy",
        "content management policy",
        "flagged by moderation",
        "safety system",
    ]) {
        return ErrorClass::ContentPolicy;
    }
    match status {
        429 => ErrorClass::RateLimit,
        503 | 529 => ErrorClass::Overloaded,
        500 | 502 | 504 => ErrorClass::ServerError,
        413 => ErrorClass::PayloadTooLarge,
        401 | 403 => ErrorClass::Auth,
        402 => ErrorClass::Billing,
        404 if has(&["model"]) => ErrorClass::ModelNotFound,
        408 => ErrorClass::Timeout,
        _ if has(&["rate limit", "rate_limit", "too many requests"]) => ErrorClass::RateLimit,
        400..=499 => ErrorClass::FormatError,
        _ => ErrorClass::Unknown,
    }
}

/// The real context limit from overflow text, as each provider words it.
fn context_limit(text: &str) -> Option<u64> {
    let number_after = |marker: &str| -> Option<u64> {
        let at = text.find(marker)? + marker.len();
        let digits: String = text[at..]
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    // OpenAI / vLLM: "maximum context length is 8192 tokens"
    number_after("maximum context length is")
        // Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
        .or_else(|| number_after("tokens >"))
        // llama.cpp: JSON "n_ctx":4096, or "available context size (4096 tokens)"
        .or_else(|| number_after("\"n_ctx\":"))
        .or_else(|| number_after("available context size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_wording_is_classified() {
        let cases: &[(u16, &str, ErrorClass, Option<u64>)] = &[
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
                ErrorClass::ContextOverflow,
                Some(8192),
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210123 tokens > 200000 maximum"}}"#,
                ErrorClass::ContextOverflow,
                Some(200_000),
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"request (5021 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5021,"n_ctx":4096}}"#,
                ErrorClass::ContextOverflow,
                Some(4096),
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached for requests"}}"#,
                ErrorClass::RateLimit,
                None,
            ),
            (503, "upstream overloaded", ErrorClass::Overloaded, None),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ErrorClass::Overloaded,
                None,
            ),
            (500, "internal", ErrorClass::ServerError, None),
            (502, "bad gateway", ErrorClass::ServerError, None),
            (
                413,
                "request entity too large",
                ErrorClass::PayloadTooLarge,
                None,
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided"}}"#,
                ErrorClass::Auth,
                None,
            ),
            (403, "forbidden", ErrorClass::Auth, None),
            (402, "insufficient credits", ErrorClass::Billing, None),
            (
                404,
                r#"{"error":{"message":"The model `gpt-9` does not exist"}}"#,
                ErrorClass::ModelNotFound,
                None,
            ),
            (
                400,
                r#"{"error":{"message":"The response was filtered due to the prompt triggering content management policy","code":"content_filter"}}"#,
                ErrorClass::ContentPolicy,
                None,
            ),
            (
                400,
                r#"{"type":"error","error":{"message":"messages.1.content.0: Invalid `signature` in `thinking` block"}}"#,
                ErrorClass::ThinkingSignature,
                None,
            ),
            (
                422,
                r#"{"error":{"message":"tools[0].function.name is invalid"}}"#,
                ErrorClass::FormatError,
                None,
            ),
            (418, "teapot", ErrorClass::FormatError, None),
            (599, "odd", ErrorClass::Unknown, None),
        ];
        for (status, body, class, limit) in cases {
            let err = LlmError::from_http(*status, None, body);
            assert_eq!(err.class, *class, "{status} {body}");
            assert_eq!(err.context_limit, *limit, "{status} {body}");
        }
    }

    #[test]
    fn retry_after_and_messages() {
        let err = LlmError::from_http(429, Some("7"), r#"{"error":{"message":"slow down"}}"#);
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(err.message, "slow down");
        assert_eq!(
            LlmError::from_http(429, Some("soon"), "x").retry_after,
            None
        );
        assert_eq!(
            LlmError::from_http(500, None, "plain text").message,
            "plain text"
        );
    }
}
