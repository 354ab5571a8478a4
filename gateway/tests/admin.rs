//! The admin API on the running binary: closed without a token, refused with a wrong one;
//! sessions listed, shown with lineage and messages, searched, exported as JSON and Markdown.

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
    let fake = FakeOpenAi::start([Reply::text("Pelicans can hold three gallons.")])
        .await
        .expect("model");
    let home = binary::home_with(&binary::webhook_config(&fake.base_url, "ops", ""));
    let iris = binary::start(
        home.path(),
        &[("HOOK_TOKEN", HOOK), ("IRIS_ADMIN_TOKEN", ADMIN)],
    )
    .await;
    let reply: Value = reqwest::Client::new()
        .post(format!("{}/hooks/ops", iris.base))
        .bearer_auth(HOOK)
        .json(&json!({"conversation": "birds", "user": "ann", "text": "Tell me about pelicans"}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
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
