//! Nothing is lost and nothing is said twice across a crash: the daemon is SIGKILLed in the
//! middle of a turn (the model call in flight), started again, and the message is answered
//! exactly once — one callback delivery, one reply for a repeated message id, one copy of the
//! user's message in the conversation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use binary::{Iris, start};
use serde_json::{Value, json};
use testkit::Reply;
use testkit::openai::FakeOpenAi;

#[path = "common/binary.rs"]
mod binary;

const TOKEN: &str = "durable-token-0123456789";

async fn post(iris: &Iris, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/hooks/durable", iris.base))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_turn_loses_nothing_and_answers_once() {
    let fake = FakeOpenAi::start([Reply::hang(), Reply::text("answer after the restart")])
        .await
        .expect("fake");
    // The callback receiver counts deliveries.
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/cb",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let sink = sink.clone();
            async move {
                sink.lock().expect("lock").push(body);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let callback = format!("http://{}/cb", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let home = binary::home_with(&binary::webhook_config(
        &fake.base_url,
        "durable",
        "\n[compression]\nmemory_flush = false",
    ));
    let message = json!({
        "conversation": "crash", "user": "alice", "text": "please remember this",
        "message_id": "k-1", "wait": false, "callback_url": callback,
    });

    let first = start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    let (status, body) = post(&first, &message).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")));
    for _ in 0..200 {
        if !fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fake.requests().len(),
        1,
        "the turn is in the middle of its model call"
    );
    drop(first); // SIGKILL: no shutdown path runs.

    let second = start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    for _ in 0..150 {
        if !received.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deliveries = received.lock().expect("lock").clone();
    assert_eq!(deliveries.len(), 1, "exactly one delivery: {deliveries:?}");
    assert_eq!(deliveries[0]["reply"], "answer after the restart");
    assert_eq!(deliveries[0]["message_id"], "k-1");

    // The client retrying the same message gets the same answer; nothing runs again.
    let (status, again) = post(&second, &json!({
        "conversation": "crash", "user": "alice", "text": "please remember this", "message_id": "k-1",
    }))
    .await;
    assert_eq!(
        (status, again["reply"].as_str()),
        (200, Some("answer after the restart"))
    );
    assert_eq!(
        fake.requests().len(),
        2,
        "one interrupted call, one resumed"
    );

    let turns = transcript(&second, "crash").await;
    assert_eq!(
        turns,
        [
            ("user".to_owned(), "please remember this".to_owned()),
            (
                "assistant".to_owned(),
                "answer after the restart".to_owned()
            )
        ]
    );
}

/// The conversation's messages as (role, content), through the webhook's messages endpoint.
async fn transcript(iris: &Iris, conversation: &str) -> Vec<(String, String)> {
    let listed: Value = reqwest::Client::new()
        .get(format!(
            "{}/hooks/durable/conversations/{conversation}/messages",
            iris.base
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    listed["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or_default().to_owned(),
                        m["content"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_turn_finish_and_leaves_the_queue_for_the_restart() {
    let fake = FakeOpenAi::start([
        Reply::text("first answer").delay(Duration::from_millis(1_500)),
        Reply::text("second answer"),
    ])
    .await
    .expect("fake");
    let home = binary::home_with(&binary::webhook_config(
        &fake.base_url,
        "durable",
        "\n[compression]\nmemory_flush = false",
    ));
    let mut first = start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    let say = |text: &str, id: &str| json!({"conversation": "drain", "user": "bob", "text": text, "message_id": id, "wait": false});
    assert_eq!(post(&first, &say("one", "d-1")).await.0, 202);
    for _ in 0..200 {
        if !fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.requests().len(), 1, "the first turn is running");
    assert_eq!(post(&first, &say("two", "d-2")).await.0, 202, "queued");

    let pid = first.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let mut exited = None;
    for _ in 0..300 {
        if let Some(status) = first.child.try_wait().expect("wait") {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exited = exited.expect("iris exits after SIGTERM");
    assert!(exited.success(), "exit 0, not {exited:?}");
    let log = binary::log(home.path());
    assert!(log.contains("draining") && log.contains("drained"), "{log}");
    assert_eq!(fake.requests().len(), 1, "the queued message did not start");

    let second = start(home.path(), &[("HOOK_TOKEN", TOKEN)]).await;
    let mut turns = Vec::new();
    for _ in 0..200 {
        turns = transcript(&second, "drain").await;
        if turns.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let expected = [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]
    .map(|(r, c)| (r.to_owned(), c.to_owned()));
    assert_eq!(
        turns, expected,
        "the first finished before the exit, the second after the restart"
    );
    assert_eq!(fake.requests().len(), 2, "nothing ran twice");
}
