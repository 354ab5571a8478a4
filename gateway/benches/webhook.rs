//! Webhook turns/s and latency at 1, 100 and 1,000 concurrent conversations, against an
//! in-process model that answers at once (no network) and the real SQLite store (every message
//! persisted), over real HTTP on 127.0.0.1 — compared in the same run with a bare axum handler
//! that does no work (the ratio is Iris's own cost). Then the resident memory of 10,000 idle
//! conversations.
//!
//! ```text
//! cargo bench -p gateway --bench webhook [-- --seconds 5]
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::agent::{Agent, PromptBuilder, TurnConfig};
use agent_core::llm::{
    ChatProvider, ChatRequest, ChatResponse, FinishReason, LlmError, ModelSpec, StreamEvent, Usage,
};
use agent_core::store::{SearchQuery, SessionStore, SqliteStore};
use agent_core::tools::ToolRegistry;
use gateway::conversation::{Gateway, Inbound, RuntimeConfig, Submission};
use gateway::webhook::auth::RouteAuth;
use gateway::webhook::limit::RateLimiter;
use gateway::webhook::{self, WebhookState};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bench-token-0123456789";

/// Answers every request at once.
struct Instant0(ModelSpec);

#[async_trait::async_trait]
impl ChatProvider for Instant0 {
    fn kind(&self) -> &'static str {
        "openai"
    }
    fn model(&self) -> &str {
        "instant"
    }
    fn spec(&self) -> &ModelSpec {
        &self.0
    }
    async fn complete(
        &self,
        _: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        _: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        on_event(StreamEvent::TextDelta("ok".into()));
        Ok(ChatResponse {
            content: "ok".into(),
            tool_calls: Vec::new(),
            finish_reason: Some(FinishReason::Stop),
            usage: Some(Usage {
                prompt_tokens: 200,
                completion_tokens: 1,
                ..Usage::default()
            }),
            thinking: Vec::new(),
        })
    }
}

async fn gateway(dir: &std::path::Path) -> (Arc<Gateway>, Arc<dyn SessionStore>) {
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(dir.join("bench.db"))
            .await
            .expect("store"),
    );
    let agent = Agent {
        providers: vec![Arc::new(Instant0(ModelSpec::default()))],
        tools: ToolRegistry::new(),
        store: store.clone(),
        prompt: PromptBuilder::new("You are a helpful assistant."),
        compressor: None,
        todo: None,
        config: TurnConfig {
            memory_flush: false,
            ..TurnConfig::default()
        },
    };
    let gateway = Gateway::new(store.clone(), Arc::new(agent), RuntimeConfig::default());
    (Arc::new(gateway), store)
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

struct Run {
    turns: usize,
    seconds: f64,
    p50: Duration,
    p99: Duration,
}

/// `concurrency` conversations, each sending its next message when the last is answered,
/// for `seconds`.
async fn drive(url: &str, concurrency: usize, seconds: f64) -> Run {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .expect("client");
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks = (0..concurrency).map(|c| {
        let client = client.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0;
            while Instant::now() < until {
                n += 1;
                let body = serde_json::json!({"conversation": format!("c{c}"), "user": "u", "text": format!("message {n}")});
                let t = Instant::now();
                let response = client.post(&url).bearer_auth(TOKEN).json(&body).send().await;
                match response {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        latencies.push(t.elapsed());
                    }
                    Ok(r) => panic!("HTTP {}", r.status()),
                    Err(e) => panic!("{e}"),
                }
            }
            latencies
        })
    });
    let mut all: Vec<Duration> = Vec::new();
    for task in futures_util::future::join_all(tasks).await {
        all.extend(task.expect("task"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pick = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Run {
        turns: all.len(),
        seconds: elapsed,
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

/// While the load runs: every 250 ms one more conversation sends a message with a word found
/// nowhere else, and once it is answered, searches for it every 5 ms. Returns, per probe, how
/// long after it was sent the message was searchable (its turn plus the background indexer's
/// lag under load: an upper bound on persisted-to-searchable).
async fn search_lag(url: String, store: Arc<dyn SessionStore>, seconds: f64) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut lags = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        n += 1;
        let word = format!("probe{n}x{}", fastrand::u64(..));
        let body = serde_json::json!({"conversation": "probe", "user": "u", "text": word});
        let sent = Instant::now();
        let answered = client
            .post(&url)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await;
        if !answered.is_ok_and(|r| r.status().is_success()) {
            panic!("probe message {n} was not answered");
        }
        let query = SearchQuery {
            text: word.clone(),
            ..SearchQuery::default()
        };
        loop {
            let hits = store.search(&query).await.expect("search");
            if !hits.is_empty() {
                lags.push(sent.elapsed());
                break;
            }
            if sent.elapsed() > Duration::from_secs(30) {
                panic!("probe {word} not searchable 30 s after it was sent");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    lags
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut seconds = 5.0;
    let mut levels = vec![1, 100, 1000];
    let mut idle = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(seconds);
            }
            // `--concurrency 100`: only that level, and no idle-memory pass (for profiling).
            "--concurrency" => {
                if let Some(n) = args.next().and_then(|v| v.parse().ok()) {
                    levels = vec![n];
                    idle = false;
                }
            }
            _ => {}
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let bare = serve(axum::Router::new().route(
            "/hooks/bench",
            axum::routing::post(|| async { axum::Json(serde_json::json!({"reply": "ok"})) }),
        ))
        .await;
        println!("| concurrent conversations | server | turns | turns/s | p50 ms | p99 ms | Iris ÷ bare |");
        println!("|---|---|---|---|---|---|---|");
        let mut lags = Vec::new();
        for concurrency in levels.iter().copied() {
            let dir = tempfile::tempdir().expect("dir");
            let (gateway, store) = gateway(dir.path()).await;
            let routes: HashMap<String, RouteAuth> = [(
                "bench".to_owned(),
                RouteAuth {
                    token: Some(TOKEN.into()),
                    secret: None,
                },
            )]
            .into_iter()
            .collect();
            let iris = serve(webhook::router(Arc::new(WebhookState {
                gateway,
                store: store.clone(),
                routes,
                limiter: RateLimiter::new(u32::MAX),
                max_body_bytes: 1 << 20,
                sync_timeout: Duration::from_secs(120),
            })))
            .await;
            let base = drive(&format!("{bare}/hooks/bench"), concurrency, seconds).await;
            let probe = tokio::spawn(search_lag(
                format!("{iris}/hooks/bench"),
                store.clone(),
                seconds,
            ));
            let run = drive(&format!("{iris}/hooks/bench"), concurrency, seconds).await;
            let lag = probe.await.expect("probe");
            let rate = |r: &Run| r.turns as f64 / r.seconds;
            for (name, r) in [("bare axum", &base), ("iris", &run)] {
                println!(
                    "| {concurrency} | {name} | {} | {:.0} | {:.2} | {:.2} | {} |",
                    r.turns,
                    rate(r),
                    r.p50.as_secs_f64() * 1e3,
                    r.p99.as_secs_f64() * 1e3,
                    if name == "iris" { format!("{:.3}", rate(&run) / rate(&base)) } else { String::new() }
                );
            }
            lags.push((concurrency, lag));
        }
        println!();
        println!("| concurrent conversations | probes | sent → searchable: p50 ms | max ms |");
        println!("|---|---|---|---|");
        for (concurrency, mut lag) in lags {
            lag.sort();
            let at = |q: f64| {
                lag.get(((lag.len() as f64 * q) as usize).min(lag.len().saturating_sub(1)))
                    .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
            };
            println!("| {concurrency} | {} | {:.0} | {:.0} |", lag.len(), at(0.5), at(1.0));
        }
        if !idle {
            return;
        }

        // Memory of idle resident conversations: one answered message each, actors kept.
        let dir = tempfile::tempdir().expect("dir");
        let (gateway, _store) = gateway(dir.path()).await;
        let warm = 200;
        let count = 10_000;
        let submit = |n: usize| {
            let gateway = gateway.clone();
            async move {
                let inbound = Inbound {
                    source: "webhook".into(),
                    platform_message_id: format!("idle-{n}"),
                    conversation_key: format!("webhook:bench:idle-{n}"),
                    text: "hi".into(),
                    images: Vec::new(),
                    target: "webhook:bench".into(),
                    meta: serde_json::json!({}),
                    stream: None,
                };
                if let Ok(Submission::Accepted { reply, .. }) = gateway.submit(inbound).await {
                    let _ = reply.await;
                }
            }
        };
        for n in 0..warm {
            submit(n).await;
        }
        let before = rss_bytes();
        for chunk in (warm..warm + count).collect::<Vec<_>>().chunks(100) {
            futures_util::future::join_all(chunk.iter().map(|n| submit(*n))).await;
        }
        let after = rss_bytes();
        println!();
        println!(
            "idle resident conversations: {} (resident actors: {}); RSS {:.1} MiB → {:.1} MiB; {:.0} bytes per conversation",
            count,
            gateway.resident(),
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            after.saturating_sub(before) as f64 / count as f64
        );
    });
}
