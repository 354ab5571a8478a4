//! The conversation runtime over a real SQLite store and the fake model, for the runtime's
//! integration tests.
#![allow(dead_code)] // each test crate uses its own part

use std::sync::Arc;
use std::time::Duration;

use agent_core::agent::retry::RetryPolicy;
use agent_core::agent::{Agent, PromptBuilder, TurnConfig};
use agent_core::llm::ChatProvider;
use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::store::{SessionStore, SqliteStore};
use agent_core::tools::ToolRegistry;
use agent_core::tools::clock::Clock;
use gateway::conversation::{Gateway, Inbound, RuntimeConfig, Submission, TurnReply};
use serde_json::json;
use testkit::openai::FakeOpenAi;

pub struct World {
    pub gateway: Gateway,
    pub store: Arc<dyn SessionStore>,
    pub dir: tempfile::TempDir,
}

pub async fn world(fake: &FakeOpenAi, config: RuntimeConfig) -> World {
    let dir = tempfile::tempdir().expect("dir");
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(dir.path().join("s.db"))
            .await
            .expect("store"),
    );
    World {
        gateway: Gateway::new(store.clone(), agent(fake, store.clone()), config),
        store,
        dir,
    }
}

pub fn agent(fake: &FakeOpenAi, store: Arc<dyn SessionStore>) -> Arc<Agent> {
    let mut config = OpenAiConfig::new(&fake.base_url, "main");
    config.first_byte_timeout = Duration::from_secs(10);
    let provider: Arc<dyn ChatProvider> = Arc::new(OpenAiProvider::new(config).expect("client"));
    Arc::new(Agent {
        providers: vec![provider],
        tools: {
            let mut tools = ToolRegistry::new();
            tools.register(Arc::new(Clock));
            tools
        },
        store,
        prompt: PromptBuilder::new("You are terse."),
        compressor: None,
        todo: None,
        config: TurnConfig {
            retry: RetryPolicy {
                backoff_base: Duration::from_millis(10),
                backoff_cap: Duration::from_millis(20),
                ..RetryPolicy::default()
            },
            memory_flush: false,
            ..TurnConfig::default()
        },
    })
}

pub fn inbound(key: &str, id: &str, text: &str) -> Inbound {
    Inbound {
        source: "webhook".into(),
        platform_message_id: id.into(),
        conversation_key: key.into(),
        text: text.into(),
        images: Vec::new(),
        target: "webhook:test".into(),
        meta: json!({}),
        stream: None,
    }
}

pub async fn answer(submission: Submission) -> TurnReply {
    match submission {
        Submission::Accepted { reply, .. } => tokio::time::timeout(Duration::from_secs(20), reply)
            .await
            .expect("in time")
            .expect("a reply"),
        Submission::Duplicate { .. } => panic!("expected a fresh message"),
    }
}

pub async fn wait_for(mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 4 s");
}
