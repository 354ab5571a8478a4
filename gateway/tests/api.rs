//! The OpenAI-compatible API against an OpenAI client — agent-core's own provider, the one
//! Iris uses to talk to OpenAI — pointed at Iris: non-streamed and streamed answers with usage,
//! server-side history with `X-Iris-Conversation` or `user`, stateless calls that carry their
//! history, `X-Iris-Session-Id`, `/v1/models`, and the key check.

#[path = "common/daemon.rs"]
mod daemon_kit;

use std::sync::{Arc, Mutex};

use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{ChatMessage, ChatRequest, StreamEvent};
use agent_core::store::Role;
use daemon_kit::{API_KEY, daemon};
use serde_json::{Value, json};
use testkit::Reply;
use testkit::openai::FakeOpenAi;
use tokio_util::sync::CancellationToken;

const API: &str = "[api]\nenabled = true\nkey_env = \"API_KEY\"\n";

fn client(base: &str, stream: bool) -> OpenAiProvider {
    let mut config = OpenAiConfig::new(format!("{base}/v1"), "whatever");
    config.api_key = Some(API_KEY.into());
    config.stream = stream;
    OpenAiProvider::new(config).expect("client")
}

fn ask(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        system: None,
        messages,
        tools: Vec::new(),
        max_tokens: 100,
        temperature: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_client_gets_whole_and_streamed_answers_with_usage() {
    let fake = FakeOpenAi::start([
        Reply::text("The whole answer.").usage(40, 5),
        Reply::text("A streamed answer in pieces.")
            .chunks(4)
            .usage(60, 7),
    ])
    .await
    .expect("fake");
    let d = daemon(&fake, API).await;
    let whole = client(&d.base, false)
        .complete(
            &ask(vec![ChatMessage::text(Role::User, "hi")]),
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("answer");
    assert_eq!(whole.content, "The whole answer.");
    assert_eq!(
        whole.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((40, 5))
    );

    let deltas = Arc::new(Mutex::new(Vec::new()));
    let sink = deltas.clone();
    let on_event = move |e: StreamEvent| {
        if let StreamEvent::TextDelta(t) = e {
            sink.lock().expect("lock").push(t);
        }
    };
    let streamed = client(&d.base, true)
        .complete(
            &ask(vec![ChatMessage::text(Role::User, "again")]),
            &on_event,
            &CancellationToken::new(),
        )
        .await
        .expect("answer");
    assert_eq!(streamed.content, "A streamed answer in pieces.");
    assert!(
        deltas.lock().expect("lock").len() >= 4,
        "the model's deltas came through as it wrote"
    );
    assert_eq!(streamed.usage.map(|u| u.completion_tokens), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_conversation_keeps_its_history_on_the_server() {
    let fake = FakeOpenAi::start([Reply::text("Noted: blue."), Reply::text("You said blue.")])
        .await
        .expect("fake");
    let d = daemon(&fake, API).await;
    let post = |body: Value| {
        d.client
            .post(format!("{}/v1/chat/completions", d.base))
            .bearer_auth(API_KEY)
            .header("x-iris-conversation", "alice")
            .json(&body)
            .send()
    };
    let first =
        post(json!({"model": "m", "messages": [{"role": "user", "content": "my colour is blue"}]}))
            .await
            .expect("send");
    let session = first
        .headers()
        .get("x-iris-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("session header");
    // The client resends its whole history; only the new trailing message is taken.
    let second: Value = post(json!({"model": "m", "messages": [
        {"role": "user", "content": "my colour is blue"},
        {"role": "assistant", "content": "Noted: blue."},
        {"role": "user", "content": [{"type": "text", "text": "what colour?"}]},
    ]}))
    .await
    .expect("send")
    .json()
    .await
    .expect("json");
    assert_eq!(second["choices"][0]["message"]["content"], "You said blue.");
    assert_eq!(second["object"], "chat.completion");
    let sent = fake.requests()[1].body["messages"].to_string();
    assert_eq!(
        sent.matches("my colour is blue").count(),
        1,
        "history is Iris's own, not the client's copy: {sent}"
    );
    assert!(sent.contains("what colour?"));
    assert_eq!(session.len(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_call_brings_its_own_history() {
    let fake = FakeOpenAi::start([Reply::text("Paris.")])
        .await
        .expect("fake");
    let d = daemon(&fake, API).await;
    let answer: Value = d
        .client
        .post(format!("{}/v1/chat/completions", d.base))
        .bearer_auth(API_KEY)
        .json(&json!({"messages": [
            {"role": "system", "content": "client system prompts are not the deployment's"},
            {"role": "user", "content": "Let us talk about France."},
            {"role": "assistant", "content": "Gladly."},
            {"role": "user", "content": "Its capital?"},
        ]}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(answer["choices"][0]["message"]["content"], "Paris.");
    let roles: Vec<String> = fake.requests()[0].body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    format!(
                        "{}:{}",
                        m["role"].as_str().unwrap_or(""),
                        m["content"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        roles[1..],
        [
            "user:Let us talk about France.",
            "assistant:Gladly.",
            "user:Its capital?"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_the_key_check() {
    let fake = FakeOpenAi::start([]).await.expect("fake");
    let d = daemon(&fake, API).await;
    let models: Value = d
        .client
        .get(format!("{}/v1/models", d.base))
        .bearer_auth(API_KEY)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], "main");
    for key in [None, Some("wrong-key")] {
        let mut request = d
            .client
            .post(format!("{}/v1/chat/completions", d.base))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}]}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("send");
        assert_eq!(response.status().as_u16(), 401);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["error"]["code"], "invalid_api_key");
    }
    let bad = d
        .client
        .post(format!("{}/v1/chat/completions", d.base))
        .bearer_auth(API_KEY)
        .json(&json!({"messages": [{"role": "assistant", "content": "no user message"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(bad.status().as_u16(), 400);
    assert!(fake.requests().is_empty());
}
