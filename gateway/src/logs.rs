//! Following a running daemon's log: `GET /admin/logs` (Server-Sent Events, one JSON line per
//! event, behind the admin token) and `iris logs --follow`, which reads it, filters, prints
//! each line for people or as JSON, and reconnects when the daemon restarts.
//!
//! Lines come from [`crate::logging::stream`], after redaction: a follower sees exactly what
//! the log files would hold, down to the daemon's `log.level`.

use std::convert::Infallible;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::Query;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

/// Which lines a follower wants.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct LogFilter {
    /// The lowest level shown (`trace` … `error`).
    pub level: Option<String>,
    pub source: Option<String>,
    pub conversation: Option<String>,
    pub session: Option<String>,
}

fn rank(level: &str) -> u8 {
    match level.to_ascii_lowercase().as_str() {
        "trace" => 0,
        "debug" => 1,
        "info" => 2,
        "warn" | "warning" => 3,
        "error" => 4,
        _ => 2,
    }
}

impl LogFilter {
    /// Whether the JSON log line `line` passes.
    pub fn accepts(&self, line: &Value) -> bool {
        if let Some(level) = &self.level
            && rank(line["level"].as_str().unwrap_or("info")) < rank(level)
        {
            return false;
        }
        let wanted = [
            ("source", &self.source),
            ("conversation", &self.conversation),
            ("session", &self.session),
        ];
        wanted.iter().all(|(field, value)| match value {
            None => true,
            Some(value) => field_values(line, field).any(|v| v == value),
        })
    }
}

/// Every value of `field` on the line: the event's own and its spans'.
fn field_values<'a>(line: &'a Value, field: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let own = [&line["fields"][field], &line["span"][field]];
    let spans = line["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(move |s| &s[field]);
    own.into_iter().chain(spans).filter_map(Value::as_str)
}

/// `GET /admin/logs?level=&source=&conversation=&session=`: the live log as SSE.
pub async fn follow(Query(filter): Query<LogFilter>) -> Response {
    let receiver = crate::logging::stream().subscribe();
    let events =
        futures_util::stream::unfold((receiver, filter), |(mut receiver, filter)| async move {
            loop {
                let event = match receiver.recv().await {
                    Ok(line) => {
                        let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                        if !filter.accepts(&parsed) {
                            continue;
                        }
                        Event::default().data(line.as_ref())
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        Event::default().event("skipped").data(missed.to_string())
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                };
                return Some((Ok::<_, Infallible>(event), (receiver, filter)));
            }
        });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// A JSON log line for a person: `time LEVEL target: message key=value… [conversation …]`.
pub fn human(line: &Value) -> String {
    let mut out = format!(
        "{} {:>5} {}: {}",
        line["timestamp"].as_str().unwrap_or(""),
        line["level"].as_str().unwrap_or(""),
        line["target"].as_str().unwrap_or(""),
        line["fields"]["message"].as_str().unwrap_or(""),
    );
    if let Some(fields) = line["fields"].as_object() {
        for (key, value) in fields.iter().filter(|(k, _)| *k != "message") {
            out.push_str(&format!(" {key}={}", plain(value)));
        }
    }
    for field in ["conversation", "session", "source"] {
        if let Some(value) = field_values(line, field).next() {
            out.push_str(&format!(" {field}={value}"));
        }
    }
    out
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `iris logs --follow`: reads `url`'s log stream until interrupted, reconnecting when it
/// ends (a restarting daemon); prints each line (`json` as it came).
pub async fn run(url: &str, token: Option<&str>, filter: &LogFilter, json: bool) -> Result<()> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .context("HTTP client")?;
    let mut announced = false;
    loop {
        let mut request = client.get(format!("{}/admin/logs", url.trim_end_matches('/')));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let query: Vec<(&str, &str)> = [
            ("level", &filter.level),
            ("source", &filter.source),
            ("conversation", &filter.conversation),
            ("session", &filter.session),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
        .collect();
        match request.query(&query).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::UNAUTHORIZED => {
                anyhow::bail!(
                    "the daemon refused the admin token: set the variable server.admin_token_env names (IRIS_ADMIN_TOKEN by default) to the daemon's token"
                );
            }
            Ok(response) if response.status().is_success() => {
                if announced {
                    eprintln!("iris logs: reconnected to {url}");
                    announced = false;
                }
                read_stream(response, json).await;
            }
            Ok(response) => eprintln!("iris logs: {url} answered {}", response.status()),
            Err(error) => {
                if !announced {
                    eprintln!("iris logs: cannot reach {url} ({error}); retrying…");
                }
            }
        }
        if !announced {
            eprintln!("iris logs: disconnected; reconnecting…");
            announced = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Prints the SSE `data:` lines of `response` until it ends.
async fn read_stream(mut response: reqwest::Response, json: bool) {
    use std::io::Write as _;
    let mut pending = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let line = line.trim_end();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim_start();
            let shown = if json {
                data.to_owned()
            } else {
                serde_json::from_str::<Value>(data)
                    .map(|v| human(&v))
                    .unwrap_or_else(|_| data.to_owned())
            };
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{shown}").and_then(|()| out.flush()).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_look_at_the_event_and_its_spans() {
        let line: Value = serde_json::from_str(
            r#"{"timestamp":"t","level":"INFO","target":"gateway","fields":{"message":"turn finished","model_calls":1},
                "spans":[{"name":"turn","conversation":"webhook:a:b","session":"s1","source":"webhook"}]}"#,
        )
        .expect("json");
        let with = |f: LogFilter| f.accepts(&line);
        assert!(with(LogFilter::default()));
        assert!(with(LogFilter {
            conversation: Some("webhook:a:b".into()),
            source: Some("webhook".into()),
            ..LogFilter::default()
        }));
        assert!(!with(LogFilter {
            session: Some("s2".into()),
            ..LogFilter::default()
        }));
        assert!(!with(LogFilter {
            level: Some("warn".into()),
            ..LogFilter::default()
        }));
        assert_eq!(
            human(&line),
            "t  INFO gateway: turn finished model_calls=1 conversation=webhook:a:b session=s1 source=webhook"
        );
    }
}
