//! The inner retry chain: one model call, retried and failed over by error class.
//!
//! | class | handling |
//! |---|---|
//! | rate_limit | wait `Retry-After` (capped) or back off, then the next provider if any |
//! | overloaded, server_error, transport, timeout, unknown | back off (jittered, capped), retry |
//! | auth, billing, model_not_found, format_error | next provider, else stop |
//! | thinking_signature | strip thinking blocks from the request copy, retry once |
//! | context_overflow, payload_too_large | back to the caller, which compresses |
//! | content_policy, cancelled | stop |
//!
//! Every wait is cancellable, and no wait may end past the turn's deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::llm::{ChatProvider, ChatRequest, ChatResponse, ErrorClass, LlmError, StreamEvent};

/// How hard to try.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// First backoff; doubles per attempt.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// The most a `Retry-After` is honoured for.
    pub retry_after_cap: Duration,
    /// Calls per provider before moving on.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(2),
            backoff_cap: Duration::from_secs(60),
            retry_after_cap: Duration::from_secs(120),
            max_attempts: 3,
        }
    }
}

impl RetryPolicy {
    /// Jittered exponential backoff for the n-th retry (1-based): between half and all of
    /// `base × 2^(n-1)`, capped.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let full = self
            .backoff_base
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.backoff_cap);
        full / 2 + full.mul_f64(fastrand::f64() / 2.0)
    }
}

/// What the chain did, for the user and the logs.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryNotice {
    Retrying {
        class: ErrorClass,
        attempt: u32,
        wait: Duration,
    },
    FallingBack {
        to_model: String,
        after: ErrorClass,
    },
    /// The model kept answering with nothing; asking the next provider.
    FallingBackAfterEmpty {
        to_model: String,
    },
}

/// A successful call and how many calls it took.
#[derive(Debug, Clone)]
pub struct Called {
    pub response: ChatResponse,
    /// Which provider answered (0 = the main one).
    pub provider: usize,
    /// Every call made, failed ones included.
    pub calls: u32,
}

/// A failed chain and how many calls it made.
#[derive(Debug, Clone)]
pub struct Failed {
    pub error: LlmError,
    pub calls: u32,
}

/// Calls the providers in order until one answers, by the rules in the module docs.
pub async fn call(
    providers: &[Arc<dyn ChatProvider>],
    request: &ChatRequest,
    policy: &RetryPolicy,
    deadline: Instant,
    on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    notify: &(dyn Fn(RetryNotice) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Called, Failed> {
    let mut request = request.clone();
    let mut stripped_thinking = false;
    let mut calls = 0;
    let mut last = LlmError::transport("no model provider is configured", false);
    for (index, provider) in providers.iter().enumerate() {
        if index > 0 {
            notify(RetryNotice::FallingBack {
                to_model: provider.model().to_owned(),
                after: last.class,
            });
        }
        let mut attempt = 0;
        loop {
            calls += 1;
            let error = match provider.complete(&request, on_event, cancel).await {
                Ok(response) => {
                    return Ok(Called {
                        response,
                        provider: index,
                        calls,
                    });
                }
                Err(error) => error,
            };
            attempt += 1;
            let wait = match error.class {
                ErrorClass::Cancelled
                | ErrorClass::ContentPolicy
                | ErrorClass::ContextOverflow
                | ErrorClass::PayloadTooLarge => return Err(Failed { error, calls }),
                ErrorClass::ThinkingSignature if !stripped_thinking => {
                    stripped_thinking = true;
                    for message in &mut request.messages {
                        message.thinking.clear();
                    }
                    Duration::ZERO
                }
                ErrorClass::ThinkingSignature
                | ErrorClass::Auth
                | ErrorClass::Billing
                | ErrorClass::ModelNotFound
                | ErrorClass::FormatError => {
                    last = error;
                    break;
                }
                ErrorClass::RateLimit => {
                    let wait = error.retry_after.map_or_else(
                        || policy.backoff(attempt),
                        |w| w.min(policy.retry_after_cap),
                    );
                    if index + 1 < providers.len() {
                        // Another provider may have capacity now; this one said it has none.
                        last = error;
                        break;
                    }
                    wait
                }
                ErrorClass::Overloaded
                | ErrorClass::ServerError
                | ErrorClass::Transport
                | ErrorClass::Timeout
                | ErrorClass::Unknown => policy.backoff(attempt),
            };
            if attempt >= policy.max_attempts && error.class != ErrorClass::ThinkingSignature {
                last = error;
                break;
            }
            if Instant::now() + wait > deadline {
                return Err(Failed { error, calls });
            }
            notify(RetryNotice::Retrying {
                class: error.class,
                attempt,
                wait,
            });
            tokio::select! {
                () = cancel.cancelled() => return Err(Failed { error: LlmError::cancelled(), calls }),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
    Err(Failed { error: last, calls })
}
