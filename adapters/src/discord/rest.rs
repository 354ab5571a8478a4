//! Discord's REST API for what the adapter sends: messages (with mentions disabled), edits,
//! typing, application commands, attachment downloads.
//!
//! serenity's own rate limiter ignores a configured base URL (it builds requests without the
//! proxy), so the adapter talks REST itself and honours Discord's limits itself: a 429's
//! `retry_after` is waited out and the same request sent again; a route whose bucket is
//! empty (`X-RateLimit-Remaining: 0`) waits `X-RateLimit-Reset-After` before its next request.
//! A request is retried only when it cannot have been delivered: a 429, or a connection that
//! never opened.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Attempts per request before giving up on one that could not have been delivered.
const MAX_TRIES: u32 = 6;
/// The longest wait honoured in place; longer ones fail the request (the outbox retries).
const MAX_WAIT: Duration = Duration::from_secs(120);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error("discord answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("discord unreachable: {0}")]
    Transport(String),
    #[error("discord asked to wait {0:?}, longer than this send may wait")]
    TooLong(Duration),
}

/// A REST client for one bot.
pub struct Rest {
    client: reqwest::Client,
    /// `https://discord.com/api/v10` or the configured base + `/api/v10`.
    base: String,
    authorization: String,
    /// Per route: when its bucket refills, once Discord said it is empty.
    empty_until: Mutex<HashMap<String, Instant>>,
}

impl Rest {
    pub fn new(base_url: &str, token: &str) -> Result<Self, RestError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| RestError::Transport(e.to_string()))?;
        Ok(Self {
            client,
            base: format!("{}/api/v10", base_url.trim_end_matches('/')),
            authorization: format!("Bot {}", token.trim_start_matches("Bot ")),
            empty_until: Mutex::default(),
        })
    }

    /// The bot's own user (`/users/@me`): checks the token.
    pub async fn current_user(&self) -> Result<Value, RestError> {
        self.call(Method::GET, "/users/@me", None).await
    }

    /// The gateway's WebSocket URL (`/gateway`).
    pub async fn gateway_url(&self) -> Result<String, RestError> {
        let answer = self.call(Method::GET, "/gateway", None).await?;
        answer["url"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RestError::Status {
                status: 200,
                message: "no url in the answer".into(),
            })
    }

    /// Creates a message in `channel`: no mention in it pings anyone; a reply when
    /// `reply_to` is set (without failing if that message is gone). Returns its id.
    pub async fn create_message(
        &self,
        channel: &str,
        content: &str,
        reply_to: Option<&str>,
    ) -> Result<String, RestError> {
        let mut body = json!({"content": content, "allowed_mentions": {"parse": []}});
        if let Some(id) = reply_to {
            body["message_reference"] = json!({"message_id": id, "fail_if_not_exists": false});
        }
        let path = format!("/channels/{channel}/messages");
        let sent = self.call(Method::POST, &path, Some(&body)).await?;
        Ok(sent["id"].as_str().unwrap_or_default().to_owned())
    }

    /// Creates a message in `channel` with `content` and `file` (name, Markdown text) attached.
    pub async fn create_message_with_file(
        &self,
        channel: &str,
        content: &str,
        reply_to: Option<&str>,
        file: (&str, &str),
    ) -> Result<String, RestError> {
        let (name, text) = file;
        let mut payload = json!({
            "content": content,
            "allowed_mentions": {"parse": []},
            "attachments": [{"id": 0, "filename": name}],
        });
        if let Some(id) = reply_to {
            payload["message_reference"] = json!({"message_id": id, "fail_if_not_exists": false});
        }
        let path = format!("/channels/{channel}/messages");
        let payload = payload.to_string();
        let sent = self
            .call_with(Method::POST, &path, &|request| {
                let part = reqwest::multipart::Part::bytes(text.as_bytes().to_vec())
                    .file_name(name.to_owned());
                let form = reqwest::multipart::Form::new()
                    .text("payload_json", payload.clone())
                    .part("files[0]", part);
                request.multipart(form)
            })
            .await?;
        Ok(sent["id"].as_str().unwrap_or_default().to_owned())
    }

    /// Replaces a message's content (mentions still disabled).
    pub async fn edit_message(
        &self,
        channel: &str,
        id: &str,
        content: &str,
    ) -> Result<(), RestError> {
        let body = json!({"content": content, "allowed_mentions": {"parse": []}});
        let path = format!("/channels/{channel}/messages/{id}");
        self.call(Method::PATCH, &path, Some(&body))
            .await
            .map(|_| ())
    }

    /// Shows "typing…" in `channel` for about 10 s.
    pub async fn typing(&self, channel: &str) -> Result<(), RestError> {
        let path = format!("/channels/{channel}/typing");
        self.call(Method::POST, &path, None).await.map(|_| ())
    }

    /// Replaces the application's global slash commands.
    pub async fn set_commands(&self, application: &str, commands: &Value) -> Result<(), RestError> {
        let path = format!("/applications/{application}/commands");
        self.call(Method::PUT, &path, Some(commands))
            .await
            .map(|_| ())
    }

    /// A channel (`type`, `parent_id`…).
    pub async fn channel(&self, channel: &str) -> Result<Value, RestError> {
        self.call(Method::GET, &format!("/channels/{channel}"), None)
            .await
    }

    /// Whether the bot is a member of `thread`.
    pub async fn is_thread_member(&self, thread: &str) -> Result<bool, RestError> {
        let path = format!("/channels/{thread}/thread-members/@me");
        match self.call(Method::GET, &path, None).await {
            Ok(_) => Ok(true),
            Err(RestError::Status { status: 404, .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Starts a thread from `message` in `channel`; returns the thread's id.
    pub async fn start_thread(
        &self,
        channel: &str,
        message: &str,
        name: &str,
    ) -> Result<String, RestError> {
        let path = format!("/channels/{channel}/messages/{message}/threads");
        let body = json!({"name": name, "auto_archive_duration": 1440});
        let thread = self.call(Method::POST, &path, Some(&body)).await?;
        thread["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RestError::Status {
                status: 200,
                message: "no thread id in the answer".into(),
            })
    }

    /// Answers a slash command at once with a message only its user sees.
    pub async fn respond_to_interaction(
        &self,
        id: &str,
        token: &str,
        content: &str,
    ) -> Result<(), RestError> {
        let body = json!({"type": 4, "data": {"content": content, "flags": 64, "allowed_mentions": {"parse": []}}});
        let path = format!("/interactions/{id}/{token}/callback");
        self.call(Method::POST, &path, Some(&body))
            .await
            .map(|_| ())
    }

    /// Downloads an attachment (a CDN URL Discord gave) into memory, refusing more than `max`.
    pub async fn download(&self, url: &str, max: u64) -> Result<Vec<u8>, String> {
        let mut response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("the download answered {}", response.status()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > max {
                return Err("larger than the limit".into());
            }
        }
        Ok(bytes)
    }

    /// One request with a JSON body (or none).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RestError> {
        self.call_with(method, path, &|request| match body {
            Some(body) => request.json(body),
            None => request,
        })
        .await
    }

    /// One request, its body set by `body` on every attempt, with the waits and retries of
    /// the module docs.
    async fn call_with(
        &self,
        method: Method,
        path: &str,
        body: &(dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync),
    ) -> Result<Value, RestError> {
        let route = route_of(path);
        let mut tries = 0;
        loop {
            tries += 1;
            self.wait_for_bucket(&route).await;
            let request = self
                .client
                .request(method.clone(), format!("{}{path}", self.base))
                .header("authorization", &self.authorization);
            let response = match body(request).send().await {
                Ok(response) => response,
                Err(error) if error.is_connect() && tries < MAX_TRIES => {
                    tracing::debug!(%error, "discord unreachable; retrying");
                    tokio::time::sleep(Duration::from_millis(250 * u64::from(tries))).await;
                    continue;
                }
                Err(error) => return Err(RestError::Transport(error.to_string())),
            };
            self.note_bucket(&route, response.headers());
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let header = retry_after_header(response.headers());
                let body: Value = response.json().await.unwrap_or(Value::Null);
                let wait = body["retry_after"]
                    .as_f64()
                    .map(Duration::from_secs_f64)
                    .or(header)
                    .unwrap_or(Duration::from_secs(1));
                if wait > MAX_WAIT || tries >= MAX_TRIES {
                    return Err(RestError::TooLong(wait));
                }
                tracing::info!(wait_ms = wait.as_millis() as u64, %route, "discord rate limit; waiting");
                tokio::time::sleep(wait).await;
                continue;
            }
            if status == StatusCode::NO_CONTENT {
                return Ok(Value::Null);
            }
            let text = response.text().await.unwrap_or_default();
            if !status.is_success() {
                let message = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_owned))
                    .unwrap_or(text);
                return Err(RestError::Status {
                    status: status.as_u16(),
                    message,
                });
            }
            return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
        }
    }

    async fn wait_for_bucket(&self, route: &str) {
        let until = self
            .empty_until
            .lock()
            .ok()
            .and_then(|m| m.get(route).copied());
        if let Some(until) = until.filter(|u| *u > Instant::now()) {
            tokio::time::sleep_until(until).await;
        }
    }

    fn note_bucket(&self, route: &str, headers: &reqwest::header::HeaderMap) {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<f64>().ok())
        };
        let Ok(mut buckets) = self.empty_until.lock() else {
            return;
        };
        match (
            number("x-ratelimit-remaining"),
            number("x-ratelimit-reset-after"),
        ) {
            (Some(remaining), Some(after))
                if remaining < 1.0 && after.is_finite() && after >= 0.0 =>
            {
                let wait = Duration::from_secs_f64(after).min(MAX_WAIT);
                buckets.insert(route.to_owned(), Instant::now() + wait);
            }
            _ => {
                buckets.remove(route);
            }
        }
    }
}

/// `Retry-After` in seconds.
fn retry_after_header(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The rate-limit route of a path: Discord buckets by route with the major parameter (the
/// channel) kept and other ids folded.
fn route_of(path: &str) -> String {
    let mut out = String::new();
    let mut previous = "";
    for part in path.trim_start_matches('/').split('/') {
        out.push('/');
        let major = matches!(
            previous,
            "channels" | "guilds" | "webhooks" | "applications"
        );
        if part.chars().all(|c| c.is_ascii_digit()) && !major {
            out.push_str("{id}");
        } else {
            out.push_str(part);
        }
        previous = part;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_the_channel_and_fold_message_ids() {
        assert_eq!(route_of("/channels/5/messages"), "/channels/5/messages");
        assert_eq!(
            route_of("/channels/5/messages/77"),
            "/channels/5/messages/{id}"
        );
        assert_eq!(route_of("/channels/6/typing"), "/channels/6/typing");
    }
}
