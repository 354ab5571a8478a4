//! A global limit on concurrent model calls: every provider of a deployment is wrapped around
//! one semaphore, so a burst of conversations queues for the model instead of flooding it
//! (and its rate limits). Waiting for a permit is cancellable like every other wait.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{ChatProvider, ChatRequest, ChatResponse, LlmError, ModelSpec, StreamEvent};

/// A provider whose calls take a permit from a shared semaphore.
pub struct Limited {
    inner: Arc<dyn ChatProvider>,
    permits: Arc<Semaphore>,
}

impl Limited {
    /// Wraps every provider around `permits`.
    pub fn all(
        providers: Vec<Arc<dyn ChatProvider>>,
        permits: &Arc<Semaphore>,
    ) -> Vec<Arc<dyn ChatProvider>> {
        providers
            .into_iter()
            .map(|inner| {
                Arc::new(Self {
                    inner,
                    permits: permits.clone(),
                }) as Arc<dyn ChatProvider>
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl ChatProvider for Limited {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn spec(&self) -> &ModelSpec {
        self.inner.spec()
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let _permit = tokio::select! {
            () = cancel.cancelled() => return Err(LlmError::cancelled()),
            permit = self.permits.acquire() => permit
                .map_err(|_| LlmError::transport("the model-call limit was closed", false))?,
        };
        self.inner.complete(request, on_event, cancel).await
    }
}
