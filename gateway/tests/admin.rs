//! The admin API on the running binary: closed without a token, refused with a wrong one;
//! sessions listed, shown with lineage and messages, searched, exported as JSON and Markdown;
//! conversations listed, and a conversation's current session ended through its actor.

#[path = "common/binary.rs"]
mod binary;

use serde_json::{Value, json};
use testkit::Reply;
use testkit::openai::FakeOpenAi;

const HOOK: &str = "admin-hook-token-0123456789";
const ADMIN: &str = "admin-token-0123456789abcdef";

async fn get(base: &str, path: &str, token: Option<&str>) -> (u16, String, Option<String>) {
    let mut request = reqwest::Client::new().get(format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let disposition = response
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, response.text().await.expect("body"), disposition)
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_lists_shows_searches_and_exports_behind_its_token() {
    let (_fake, _home, iris) = daemon(vec![Reply::text("Pelicans can hold three gallons.")]).await;
    let reply = hook(&iris.base, "birds", "Tell me about pelicans").await;
    let session = reply["session_id"].as_str().expect("session").to_owned();

    assert_eq!(get(&iris.base, "/admin/sessions", None).await.0, 401);
    assert_eq!(
        get(&iris.base, "/admin/sessions", Some("wrong")).await.0,
        401
    );

    let (status, body, _) = get(&iris.base, "/admin/sessions", Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["sessions"][0]["id"], session.as_str());

    let (status, body, _) = get(
        &iris.base,
        &format!("/admin/sessions/{session}"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 200);
    let shown = json_of(&body);
    assert_eq!(shown["lineage"].as_array().map(Vec::len), Some(1));
    let texts: Vec<&str> = shown["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["content"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        texts,
        ["Tell me about pelicans", "Pelicans can hold three gallons."]
    );

    let (status, body, _) = get(&iris.base, "/admin/search?q=gallons", Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["hits"][0]["session_id"], session.as_str());
    assert_eq!(get(&iris.base, "/admin/search", Some(ADMIN)).await.0, 400);

    let (status, body, disposition) = get(
        &iris.base,
        &format!("/admin/sessions/{session}/export?format=markdown"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.starts_with(&format!("# Session {session}")), "{body}");
    assert!(
        body.contains("**User**:\n\nTell me about pelicans"),
        "{body}"
    );
    assert!(
        body.contains("**Assistant**:\n\nPelicans can hold three gallons."),
        "{body}"
    );
    assert!(disposition.is_some_and(|d| d.contains(".md")));
    let (status, body, _) = get(
        &iris.base,
        &format!("/admin/sessions/{session}/export"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(
        (status, json_of(&body)["session"]["id"].as_str()),
        (200, Some(session.as_str()))
    );
    assert_eq!(
        get(
            &iris.base,
            &format!("/admin/sessions/{session}/export?format=xml"),
            Some(ADMIN)
        )
        .await
        .0,
        400
    );
    assert_eq!(
        get(&iris.base, "/admin/sessions/nope", Some(ADMIN)).await.0,
        404
    );
}

/// A daemon with the webhook route `ops` on a model that answers `replies`, and its home.
async fn daemon(replies: Vec<Reply>) -> (FakeOpenAi, tempfile::TempDir, binary::Iris) {
    let fake = FakeOpenAi::start(replies).await.expect("model");
    let home = binary::home_with(&binary::webhook_config(&fake.base_url, "ops", ""));
    let iris = binary::start(
        home.path(),
        &[("HOOK_TOKEN", HOOK), ("IRIS_ADMIN_TOKEN", ADMIN)],
    )
    .await;
    (fake, home, iris)
}

async fn post(base: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

async fn hook(base: &str, conversation: &str, text: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{base}/hooks/ops"))
        .bearer_auth(HOOK)
        .json(&json!({"conversation": conversation, "user": "ann", "text": text}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_listed_and_their_session_ended_through_the_actor() {
    let (fake, _home, iris) = daemon(vec![
        Reply::text("First answer."),
        Reply::text("Other answer."),
        Reply::text("Fresh answer."),
    ])
    .await;
    let first = hook(&iris.base, "birds", "Remember the word heron.").await;
    let old = first["session_id"].as_str().expect("session").to_owned();
    hook(&iris.base, "fish", "Something else.").await;

    let (status, body, _) = get(&iris.base, "/admin/conversations", Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    let listed = json_of(&body);
    let rows = listed["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rows.len(), 2, "{body}");
    let birds = rows
        .iter()
        .find(|c| c["current_session_id"] == old.as_str())
        .cloned()
        .expect("the birds conversation is listed");
    assert_eq!(birds["message_count"], 2);
    assert!(
        rows[0]["key"].as_str().unwrap_or_default().contains("fish"),
        "most recently active first: {body}"
    );
    let id = birds["id"].as_i64().expect("id");

    assert_eq!(
        post(&iris.base, &format!("/admin/conversations/{id}/end"), None)
            .await
            .0,
        401
    );
    assert_eq!(
        post(&iris.base, "/admin/conversations/999999/end", Some(ADMIN))
            .await
            .0,
        404
    );
    let (status, ended) = post(
        &iris.base,
        &format!("/admin/conversations/{id}/end"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 200, "{ended}");
    assert_eq!(ended["ended_session_id"], old.as_str());
    let new = ended["session_id"]
        .as_str()
        .expect("new session")
        .to_owned();
    assert_ne!(new, old);

    // The resident actor moved: the next message lands in the new session, without the old
    // context.
    let next = hook(&iris.base, "birds", "Which word?").await;
    assert_eq!(next["session_id"], new.as_str());
    let last = fake.requests().last().cloned().expect("a model request");
    assert!(
        !last.body.to_string().contains("heron"),
        "the old session's context is gone"
    );

    let (status, body, _) = get(
        &iris.base,
        &format!("/admin/sessions?conversation={id}"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let sessions = json_of(&body);
    let reasons: Vec<Value> = sessions["sessions"]
        .as_array()
        .map(|s| s.iter().map(|s| s["end_reason"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(reasons, [Value::Null, json!("user_reset")], "{body}");
    // By key too.
    let key = birds["key"].as_str().expect("key");
    let (status, _, _) = get(
        &iris.base,
        &format!("/admin/sessions?conversation={}", key.replace(':', "%3A")),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 200);
}

/// `iris` (the CLI) on the daemon's home, with `env`.
fn cli(
    home: &std::path::Path,
    base: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (i32, String, String) {
    let bind = base.trim_start_matches("http://");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_iris"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("IRIS_HOME", home)
        .env("NO_COLOR", "1")
        .env("IRIS__SERVER__BIND", bind)
        .envs(env.iter().copied())
        .output()
        .expect("run iris");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iris_sessions_goes_through_the_running_daemon() {
    let (_fake, home, iris) =
        daemon(vec![Reply::text("Noted."), Reply::text("Fresh start.")]).await;
    let first = hook(&iris.base, "plans", "Remember the word osprey.").await;
    let old = first["session_id"].as_str().expect("session").to_owned();
    let token = [("IRIS_ADMIN_TOKEN", ADMIN)];

    let (code, out, err) = cli(
        home.path(),
        &iris.base,
        &token,
        &["sessions", "conversations"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(":plans") && out.contains(&old), "{out}");
    let key = out
        .split_whitespace()
        .find(|word| word.ends_with(":plans"))
        .expect("the key")
        .to_owned();

    // Through the daemon: a wrong token is refused by it.
    let (code, _, err) = cli(
        home.path(),
        &iris.base,
        &[("IRIS_ADMIN_TOKEN", "wrong")],
        &["sessions", "list"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("refused the admin token"), "{err}");
    // A daemon without the token: reads go to the store, ending refuses.
    let (code, out, err) = cli(home.path(), &iris.base, &[], &["sessions", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&old) && err.contains("reading the store directly"),
        "{out}{err}"
    );
    let (code, _, err) = cli(home.path(), &iris.base, &[], &["sessions", "end", &key]);
    assert_eq!(code, 1);
    assert!(err.contains("IRIS_ADMIN_TOKEN"), "{err}");

    let (code, out, err) = cli(
        home.path(),
        &iris.base,
        &token,
        &["sessions", "end", &key, "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let ended: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(ended["ended_session_id"], old.as_str());
    let new = ended["session_id"].as_str().expect("new").to_owned();
    let next = hook(&iris.base, "plans", "Which word?").await;
    assert_eq!(next["session_id"], new.as_str(), "the live actor moved");

    let (code, out, err) = cli(
        home.path(),
        &iris.base,
        &token,
        &["sessions", "list", "--conversation", &key],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&new) && out.contains(&old) && out.contains("user_reset"),
        "{out}"
    );
    let (code, out, err) = cli(
        home.path(),
        &iris.base,
        &token,
        &["sessions", "export", &old],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Remember the word osprey."), "{out}");
    let (code, out, err) = cli(
        home.path(),
        &iris.base,
        &token,
        &["sessions", "search", "osprey"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&old), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_in_the_environment_the_admin_api_is_closed() {
    let home = tempfile::tempdir().expect("dir");
    std::fs::write(
        home.path().join("iris.toml"),
        "[llm]\nbase_url = \"http://127.0.0.1:9\"\n",
    )
    .expect("config");
    let iris = binary::start(home.path(), &[]).await;
    let (status, body, _) = get(&iris.base, "/admin/sessions", Some("")).await;
    assert_eq!(status, 401);
    assert_eq!(json_of(&body)["error"]["code"], "admin_closed");
}
