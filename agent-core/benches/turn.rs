//! The conversation loop's own cost: whole turns against an in-process provider that answers
//! at once (no network), on a one-thread runtime, with a real SQLite store (every message is
//! persisted, as in production). Each turn is a tool round trip: user message, a model call
//! that asks for `clock`, the tool, a second model call that answers.
//!
//! ```text
//! cargo bench -p agent-core --bench turn [-- --turns 3000]
//! ```
//! Prints turns/s (timed without the allocation profiler) and heap allocations per turn
//! (counted by dhat in a second, shorter pass).

use std::sync::Arc;
use std::time::Instant;

use agent_core::agent::{Agent, ConversationState, PromptBuilder, TurnConfig};
use agent_core::llm::{
    ChatProvider, ChatRequest, ChatResponse, FinishReason, LlmError, ModelSpec, StreamEvent,
    ToolCall, Usage,
};
use agent_core::store::{NewConversation, Role, SessionSpec, SessionStore, SqliteStore};
use agent_core::tools::ToolRegistry;
use agent_core::tools::clock::Clock;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

static SPEC: ModelSpec = ModelSpec {
    context_length: 128_000,
    max_output_tokens: 4096,
    prices: agent_core::llm::Prices {
        input_per_mtok: 0.15,
        output_per_mtok: 0.6,
        cache_read_per_mtok: None,
        cache_write_per_mtok: None,
    },
    vision: false,
};

/// Answers at once: a tool call after a user message, text after a tool result.
struct Instant0;

#[async_trait::async_trait]
impl ChatProvider for Instant0 {
    fn kind(&self) -> &'static str {
        "openai"
    }
    fn model(&self) -> &str {
        "instant"
    }
    fn spec(&self) -> &ModelSpec {
        &SPEC
    }
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let after_tool = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Tool);
        let usage = Some(Usage {
            prompt_tokens: 400,
            completion_tokens: 12,
            ..Usage::default()
        });
        if after_tool {
            on_event(StreamEvent::TextDelta("It is noon.".into()));
            Ok(ChatResponse {
                content: "It is noon.".into(),
                tool_calls: Vec::new(),
                finish_reason: Some(FinishReason::Stop),
                usage,
                thinking: Vec::new(),
            })
        } else {
            Ok(ChatResponse {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "clock".into(),
                    arguments: "{}".into(),
                }],
                finish_reason: Some(FinishReason::ToolCalls),
                usage,
                thinking: Vec::new(),
            })
        }
    }
}

/// Turns per session before a fresh one, so history stays chat-sized.
const TURNS_PER_SESSION: usize = 10;

async fn run(agent: &Agent, store: &Arc<dyn SessionStore>, turns: usize, tag: &str) {
    let cancel = CancellationToken::new();
    let mut state = None;
    for i in 0..turns {
        if i % TURNS_PER_SESSION == 0 {
            let c = store
                .conversation(&NewConversation::new(format!("api:bench-{tag}-{i}"), "api"))
                .await
                .expect("conversation");
            let s = store
                .start_session(c.id, &SessionSpec::default())
                .await
                .expect("session");
            let mut fresh = ConversationState::new(c.id, s.id);
            fresh.system_prompt = Some("You are a helpful assistant.".into());
            state = Some(fresh);
        }
        let Some(state) = &mut state else {
            unreachable!("set on the first turn")
        };
        agent
            .run_turn(state, "What time is it?", &|_| {}, &cancel)
            .await
            .expect("turn");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; test runners that list or run every target (nextest's
    // `--list`, `cargo test --all-targets`) do not, and get nothing to run.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut turns = 3000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--turns" {
            turns = args.next().and_then(|v| v.parse().ok()).unwrap_or(turns);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let store: Arc<dyn SessionStore> = Arc::new(
            SqliteStore::open(dir.path().join("turn.db"))
                .await
                .expect("open"),
        );
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Clock));
        let agent = Agent {
            providers: vec![Arc::new(Instant0)],
            tools,
            store: store.clone(),
            prompt: PromptBuilder::new("You are a helpful assistant."),
            compressor: None,
            todo: None,
            config: TurnConfig::default(),
        };

        run(&agent, &store, 200, "warm").await;
        let start = Instant::now();
        run(&agent, &store, turns, "timed").await;
        let secs = start.elapsed().as_secs_f64();
        println!("| turns | seconds | turns/s | µs/turn |");
        println!("|---|---|---|---|");
        println!(
            "| {turns} | {secs:.2} | {:.0} | {:.0} |",
            turns as f64 / secs,
            secs * 1e6 / turns as f64
        );

        let counted = 300;
        let profiler = dhat::Profiler::builder().testing().build();
        let before = dhat::HeapStats::get();
        run(&agent, &store, counted, "counted").await;
        let after = dhat::HeapStats::get();
        drop(profiler);
        let blocks = after.total_blocks - before.total_blocks;
        let bytes = after.total_bytes - before.total_bytes;
        println!(
            "\nallocations per turn: {:.0} ({:.1} KiB allocated per turn; {counted} turns counted)",
            blocks as f64 / counted as f64,
            bytes as f64 / 1024.0 / counted as f64
        );
    });
}
