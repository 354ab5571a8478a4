//! The CLI's side of the admin API: where the local daemon listens, whether it is running,
//! and JSON calls with the admin token that turn the API's error bodies into plain messages.
//!
//! `iris sessions` and `iris logs` use it; they find the daemon at `server.bind` (an unspecified
//! address such as `0.0.0.0` is reached on loopback).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

/// How long the CLI waits for `/healthz` before deciding no daemon runs.
const PROBE_TIMEOUT: Duration = Duration::from_millis(700);

/// The local daemon's base URL from `server.bind`.
pub fn daemon_url(bind: &str) -> String {
    match bind.parse::<SocketAddr>() {
        Ok(mut addr) => {
            if addr.ip().is_unspecified() {
                addr.set_ip(if addr.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            format!("http://{addr}")
        }
        Err(_) => format!("http://{bind}"),
    }
}

/// A client for one daemon's admin API.
pub struct AdminClient {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl AdminClient {
    pub fn new(base: &str, token: &str) -> Result<Self> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .context("HTTP client")?,
        })
    }

    /// The daemon's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path?query` as JSON.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        let request = self.http.get(format!("{}{path}", self.base)).query(query);
        self.call(request).await
    }

    /// `POST path` as JSON.
    pub async fn post(&self, path: &str) -> Result<Value> {
        self.call(self.http.post(format!("{}{path}", self.base)))
            .await
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<Value> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("the daemon at {} did not answer", self.base))?;
        let status = response.status();
        let body: Value = response.json().await.with_context(|| {
            format!("the daemon at {} answered {status} without JSON", self.base)
        })?;
        if status.is_success() {
            return Ok(body);
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(anyhow!(
                "the daemon at {} refused the admin token: set the variable server.admin_token_env names (IRIS_ADMIN_TOKEN by default) to the daemon's token",
                self.base
            ));
        }
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_owned();
        Err(anyhow!("{message} (the daemon answered {status})"))
    }
}

/// Whether a daemon answers `/healthz` at `base`.
pub async fn daemon_running(base: &str) -> bool {
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return false;
    };
    client
        .get(format!("{}/healthz", base.trim_end_matches('/')))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_address_is_reached_on_loopback() {
        assert_eq!(daemon_url("0.0.0.0:9000"), "http://127.0.0.1:9000");
        assert_eq!(daemon_url("[::]:9000"), "http://[::1]:9000");
        assert_eq!(daemon_url("10.0.0.5:8787"), "http://10.0.0.5:8787");
    }
}
