//! `GET /metrics` on the running binary: turns, model calls with latency, tokens, cost,
//! failures by class and the resident-conversation gauge appear in the Prometheus text format,
//! and no conversation or user id appears in it.

#[path = "common/binary.rs"]
mod binary;

use serde_json::json;
use testkit::Reply;
use testkit::openai::FakeOpenAi;

const TOKEN: &str = "metrics-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_turns_calls_tokens_and_failures_without_ids() {
    let fake = FakeOpenAi::start([
        Reply::text("Hello!").usage(120, 30),
        Reply::error(401, r#"{"error": {"message": "bad key"}}"#),
    ])
    .await
    .expect("model");
    let home = binary::home_with(&binary::webhook_config(
        &fake.base_url,
        "ops",
        "input_price_per_mtok = 1.0\noutput_price_per_mtok = 2.0",
    ));
    let iris = binary::start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    let client = reqwest::Client::new();
    for (conversation, text) in [
        ("secret-conversation-a", "hi"),
        ("secret-conversation-b", "again"),
    ] {
        let response = client
            .post(format!("{}/hooks/ops", iris.base))
            .bearer_auth(TOKEN)
            .json(&json!({"conversation": conversation, "user": "user-4242", "text": text}))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status().as_u16(), 200);
    }
    let response = client
        .get(format!("{}/metrics", iris.base))
        .send()
        .await
        .expect("scrape");
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain; version=0.0.4"))
    );
    let text = response.text().await.expect("body");
    for line in [
        "iris_messages_received_total{source=\"webhook\"} 2",
        "iris_turns_total{source=\"webhook\",outcome=\"ok\"} 1",
        "iris_turns_total{source=\"webhook\",outcome=\"error\"} 1",
        "iris_errors_total{class=\"auth\"} 1",
        "iris_model_calls_total{provider=\"openai\",outcome=\"ok\"} 1",
        "iris_model_calls_total{provider=\"openai\",outcome=\"auth\"} 1",
        "iris_model_call_duration_seconds_count{provider=\"openai\"} 2",
        "iris_tokens_total{direction=\"in\"} 120",
        "iris_tokens_total{direction=\"out\"} 30",
        "iris_estimated_cost_usd_total 0.00018",
        "iris_conversations_resident 2",
        "iris_conversations_active 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    assert!(text.contains("iris_queue_depth "));
    for id in ["secret-conversation", "user-4242"] {
        assert!(!text.contains(id), "an id leaked into the metrics: {id}");
    }
}
