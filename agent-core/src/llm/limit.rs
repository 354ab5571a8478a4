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

    fn with_model(&self, model: &str) -> Option<Arc<dyn ChatProvider>> {
        let inner = self.inner.with_model(model)?;
        Some(Arc::new(Self {
            inner,
            permits: self.permits.clone(),
        }))
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::llm::{ErrorClass, FinishReason};

    /// Takes 50 ms per call and records the most calls it saw at once.
    #[derive(Default)]
    struct Slow {
        now: AtomicUsize,
        most: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ChatProvider for Slow {
        fn kind(&self) -> &'static str {
            "openai"
        }
        fn model(&self) -> &str {
            "slow"
        }
        fn spec(&self) -> &ModelSpec {
            static SPEC: std::sync::LazyLock<ModelSpec> =
                std::sync::LazyLock::new(ModelSpec::default);
            &SPEC
        }
        async fn complete(
            &self,
            _: &ChatRequest,
            _: &(dyn Fn(StreamEvent) + Send + Sync),
            _: &CancellationToken,
        ) -> Result<ChatResponse, LlmError> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            Ok(ChatResponse {
                content: "ok".into(),
                tool_calls: Vec::new(),
                finish_reason: Some(FinishReason::Stop),
                usage: None,
                thinking: Vec::new(),
            })
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            system: None,
            messages: Vec::new(),
            tools: Vec::new(),
            max_tokens: 1,
            temperature: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_beyond_the_limit_wait_for_a_permit() {
        let slow = Arc::new(Slow::default());
        let permits = Arc::new(Semaphore::new(2));
        let limited = Limited::all(vec![slow.clone(), slow.clone()], &permits);
        let cancel = CancellationToken::new();
        let calls = (0..6).map(|i| {
            let provider = limited[i % 2].clone();
            let cancel = cancel.clone();
            async move { provider.complete(&request(), &|_| {}, &cancel).await }
        });
        let results = futures_util::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(
            slow.most.load(Ordering::SeqCst),
            2,
            "two providers, one limit"
        );
    }

    #[tokio::test]
    async fn waiting_for_a_permit_is_cancellable() {
        let permits = Arc::new(Semaphore::new(0));
        let limited = Limited::all(vec![Arc::new(Slow::default())], &permits);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = limited[0]
            .complete(&request(), &|_| {}, &cancel)
            .await
            .expect_err("cancelled");
        assert_eq!(err.class, ErrorClass::Cancelled);
    }
}
