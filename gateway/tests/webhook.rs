//! The webhook contract (DESIGN.md §8) over real HTTP against the daemon's own routes, with the
//! fake model behind it: the 200 and 202 shapes, idempotency, bearer and HMAC authentication,
//! every listed error status with its JSON body and Retry-After, the messages endpoint, and
//! signed, retried callbacks.

#[path = "common/daemon.rs"]
mod daemon_kit;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use daemon_kit::{Daemon, SECRET, TOKEN, daemon};
use gateway::webhook::auth::sign;
use serde_json::{Value, json};
use testkit::Reply;
use testkit::openai::FakeOpenAi;

/// A callback as received: its signature header and raw body.
type Delivery = (Option<String>, Vec<u8>);

impl Daemon {
    async fn post(&self, route: &str, body: Value) -> (u16, HeaderMap, Value) {
        let response = self
            .client
            .post(format!("{}/hooks/{route}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("send");
        read(response).await
    }

    async fn messages(&self, conversation: &str, after: i64) -> (u16, Value) {
        let response = self
            .client
            .get(format!(
                "{}/hooks/crm/conversations/{conversation}/messages?after={after}",
                self.base
            ))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("send");
        let (status, _, body) = read(response).await;
        (status, body)
    }
}

async fn read(response: reqwest::Response) -> (u16, HeaderMap, Value) {
    let status = response.status().as_u16();
    let mut headers = HeaderMap::new();
    for (k, v) in response.headers() {
        headers.insert(k.clone(), v.clone());
    }
    let body = response.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

fn message(conversation: &str, text: &str) -> Value {
    json!({"conversation": conversation, "user": "alice", "text": text})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_the_reply_and_a_repeat_gets_the_same_one() {
    let fake = FakeOpenAi::start([Reply::text("Hello, Alice."), Reply::text("Keyed reply.")])
        .await
        .expect("fake");
    let d = daemon(&fake, "").await;
    let body =
        json!({"conversation": "ticket-7", "user": "alice", "text": "hi", "message_id": "m-1"});
    let (status, _, first) = d.post("crm", body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["reply"], "Hello, Alice.");
    assert_eq!(first["conversation"], "ticket-7");
    assert_eq!(first["message_id"], "m-1");
    assert!(
        first["session_id"].as_str().is_some_and(|s| s.len() == 22),
        "{first}"
    );

    let (status, _, again) = d.post("crm", body).await;
    assert_eq!(
        (status, &again),
        (200, &first),
        "the original outcome, not a second turn"
    );
    // Idempotency-Key works the same way.
    let keyed = |key: &'static str| {
        d.client
            .post(format!("{}/hooks/crm", d.base))
            .bearer_auth(TOKEN)
            .header("idempotency-key", key)
            .json(&message("ticket-7", "hi"))
            .send()
    };
    let (status, _, _) = read(keyed("k-1").await.expect("send")).await;
    assert_eq!(status, 200);
    let (_, _, repeat) = read(keyed("k-1").await.expect("send")).await;
    assert_eq!(repeat["message_id"], "k-1");
    assert_eq!(fake.requests().len(), 2, "m-1 once and k-1 once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmac_signatures_authenticate_and_bad_credentials_get_401() {
    let fake = FakeOpenAi::start([Reply::text("signed ok")])
        .await
        .expect("fake");
    let d = daemon(&fake, "").await;
    let body = serde_json::to_vec(&message("c", "hi")).expect("json");
    let signed = |signature: String| {
        d.client
            .post(format!("{}/hooks/crm", d.base))
            .header("content-type", "application/json")
            .header("x-iris-signature", signature)
            .body(body.clone())
            .send()
    };
    let (status, _, reply) = read(signed(sign(SECRET, &body)).await.expect("send")).await;
    assert_eq!((status, reply["reply"].as_str()), (200, Some("signed ok")));
    let (status, _, refused) = read(signed(sign("wrong", &body)).await.expect("send")).await;
    assert_eq!(status, 401);
    assert_eq!(refused["error"]["code"], "unauthorized");

    let anonymous = d
        .client
        .post(format!("{}/hooks/crm", d.base))
        .json(&message("c", "hi"))
        .send()
        .await
        .expect("send");
    assert_eq!(anonymous.status().as_u16(), 401);
    // A route whose token variable is unset refuses everything.
    let (status, _, _) = d.post("closed", message("c", "hi")).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_json_body() {
    let fake = FakeOpenAi::start([]).await.expect("fake");
    let d = daemon(&fake, "max_body_bytes = 2048").await;
    let (status, _, body) = d.post("nope", message("c", "hi")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_route"))
    );

    let plain = d
        .client
        .post(format!("{}/hooks/crm", d.base))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .expect("send");
    let (status, _, body) = read(plain).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );

    let (status, _, body) = d.post("crm", message("c", &"x".repeat(5000))).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );

    for bad in [
        json!({"conversation": "c", "user": "alice"}),
        json!({"conversation": "", "user": "alice", "text": "hi"}),
        json!({"conversation": "c", "user": "alice", "text": "hi", "wiat": false}),
        json!({"conversation": "c", "user": "alice", "text": "hi", "callback_url": "ftp://x"}),
    ] {
        let (status, _, body) = d.post("crm", bad.clone()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_body")),
            "{bad}"
        );
    }
    let broken = d
        .client
        .post(format!("{}/hooks/crm", d.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("send");
    assert_eq!(broken.status().as_u16(), 400);
    assert!(
        fake.requests().is_empty(),
        "no refused call reached the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_counts_only_authenticated_calls() {
    let fake = FakeOpenAi::start([Reply::text("one"), Reply::text("two")])
        .await
        .expect("fake");
    let d = daemon(&fake, "rate_limit_per_minute = 2").await;
    for _ in 0..5 {
        let anonymous = d
            .client
            .post(format!("{}/hooks/crm", d.base))
            .json(&message("c", "hi"))
            .send()
            .await
            .expect("send");
        assert_eq!(anonymous.status().as_u16(), 401);
    }
    assert_eq!(d.post("crm", message("c", "one")).await.0, 200);
    assert_eq!(d.post("crm", message("c", "two")).await.0, 200);
    let (status, headers, body) = d.post("crm", message("c", "three")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (429, Some("rate_limited"))
    );
    let wait: u64 = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=30).contains(&wait), "{wait}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_and_timed_out_calls_get_202_and_the_reply_lands_in_the_conversation() {
    let fake = FakeOpenAi::start([
        Reply::text("quick reply"),
        Reply::text("slow reply").delay(Duration::from_secs(4)),
    ])
    .await
    .expect("fake");
    let d = daemon(&fake, "").await;
    let (status, _, body) = d
        .post("crm", json!({"conversation": "async", "user": "alice", "text": "no wait", "wait": false, "message_id": "a-1"}))
        .await;
    assert_eq!(
        (status, &body),
        (202, &json!({"status": "accepted", "message_id": "a-1"}))
    );
    // The sync timeout is 2 s; this reply takes 4.
    let (status, _, body) = d.post("crm", json!({"conversation": "async", "user": "alice", "text": "slow one", "message_id": "a-2"})).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("accepted")));

    let mut replies = Vec::new();
    for _ in 0..100 {
        let (status, listed) = d.messages("async", 0).await;
        assert_eq!(status, 200, "{listed}");
        replies = listed["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["role"] == "assistant")
                    .filter_map(|m| m["content"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if replies.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(replies, ["quick reply", "slow reply"]);
    let (_, listed) = d.messages("async", 0).await;
    let first_id = listed["messages"][0]["id"].as_i64().expect("id");
    let (_, later) = d.messages("async", first_id).await;
    assert_eq!(
        later["messages"].as_array().map(Vec::len),
        Some(3),
        "after= skips what was read"
    );
    let (status, _) = d.messages("never-seen", 0).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_503_with_retry_after() {
    let fake = FakeOpenAi::start([
        Reply::text("busy for a while").delay(Duration::from_secs(3)),
        Reply::text("queued"),
    ])
    .await
    .expect("fake");
    let d = daemon_with_agent(&fake, "queue_cap = 1").await;
    let first = d.post_nowait("q", "1");
    let first = tokio::spawn(first);
    for _ in 0..200 {
        if !fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, _) = d
        .post(
            "crm",
            json!({"conversation": "q", "user": "a", "text": "2", "wait": false}),
        )
        .await;
    assert_eq!(status, 202, "one may wait");
    let (status, headers, body) = d
        .post(
            "crm",
            json!({"conversation": "q", "user": "a", "text": "3", "wait": false}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("queue_full"))
    );
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let _ = first.await;
}

/// A daemon whose `[agent]` table has `agent` in it.
async fn daemon_with_agent(fake: &FakeOpenAi, agent: &str) -> Daemon {
    daemon(fake, &format!("\n[agent]\n{agent}\n")).await
}

impl Daemon {
    fn post_nowait(
        &self,
        conversation: &str,
        text: &str,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let request = self
            .client
            .post(format!("{}/hooks/crm", self.base))
            .bearer_auth(TOKEN)
            .json(&json!({"conversation": conversation, "user": "a", "text": text, "wait": false}));
        async move {
            let _ = request.send().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_are_signed_and_retried_until_accepted() {
    let fake = FakeOpenAi::start([Reply::text("called back")])
        .await
        .expect("fake");
    let d = daemon(&fake, "").await;
    // A receiver that fails the first delivery.
    let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/cb",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let mut seen = sink.lock().expect("lock");
                seen.push((
                    headers
                        .get("x-iris-signature")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                    body.to_vec(),
                ));
                if seen.len() == 1 {
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/cb", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let (status, _, _) = d
        .post("crm", json!({"conversation": "cb", "user": "alice", "text": "call me", "wait": false, "message_id": "cb-1", "callback_url": url}))
        .await;
    assert_eq!(status, 202);
    for _ in 0..150 {
        if received.lock().expect("lock").len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = received.lock().expect("lock").clone();
    assert_eq!(
        seen.len(),
        2,
        "one failure, one retry that succeeded, nothing more"
    );
    let (signature, body) = &seen[1];
    assert_eq!(signature.as_deref(), Some(sign(SECRET, body).as_str()));
    let body: Value = serde_json::from_slice(body).expect("json");
    assert_eq!(body["reply"], "called back");
    assert_eq!(body["message_id"], "cb-1");
    assert_eq!(body["conversation"], "cb");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        received.lock().expect("lock").len(),
        2,
        "delivered rows are not sent again"
    );
}
