//! The HTTP plumbing both providers share: the client, sending with a first-byte bound,
//! turning an error answer into an [`LlmError`], and bounding every wait by a timeout and the
//! turn's cancellation.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::LlmError;

/// An HTTP client with this connect timeout.
pub(crate) fn client(connect_timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|e| LlmError::transport(format!("cannot build HTTP client: {e}"), false))
}

/// Awaits `future` unless the turn is cancelled or `limit` passes first.
pub(crate) async fn bounded<F: std::future::Future>(
    cancel: &CancellationToken,
    limit: Duration,
    future: F,
) -> Result<F::Output, LlmError> {
    tokio::select! {
        () = cancel.cancelled() => Err(LlmError::cancelled()),
        result = tokio::time::timeout(limit, future) => {
            result.map_err(|_| LlmError::transport(format!("no data for {} s", limit.as_secs()), true))
        }
    }
}

/// Sends `call` and returns the response if it is a success; an HTTP error becomes a
/// classified [`LlmError`] with the provider's message and `Retry-After`.
pub(crate) async fn send(
    call: reqwest::RequestBuilder,
    cancel: &CancellationToken,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
) -> Result<reqwest::Response, LlmError> {
    let response = bounded(cancel, first_byte_timeout, call.send())
        .await?
        .map_err(|e| LlmError::transport(e.to_string(), e.is_timeout()))?;
    let status = response.status().as_u16();
    if status < 400 {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = bounded(cancel, idle_timeout, response.text())
        .await?
        .unwrap_or_default();
    Err(LlmError::from_http(status, retry_after.as_deref(), &body))
}
