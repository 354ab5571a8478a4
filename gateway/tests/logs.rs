//! `iris logs --follow` against the running binary: the follower gets the daemon's log lines
//! live (filtered by conversation, as JSON or for people), and says it is reconnecting when the
//! daemon goes away. Without the admin token the daemon refuses it and it says why.

#[path = "common/binary.rs"]
mod binary;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use testkit::Reply;
use testkit::openai::FakeOpenAi;

const HOOK: &str = "logs-hook-token-0123456789";
const ADMIN: &str = "logs-admin-token-0123456789";

/// `iris logs --follow …` with its stdout and stderr lines on channels.
fn follower(
    home: &std::path::Path,
    url: &str,
    token: &str,
    extra: &[&str],
) -> (
    std::process::Child,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iris"))
        .args(["logs", "--follow", "--url", url])
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("IRIS_HOME", home)
        .env("HOME", home)
        .env("IRIS_ADMIN_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iris logs");
    let lines = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(pipe) = pipe {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        rx
    };
    let out = lines(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = lines(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    (child, out, err)
}

/// Lines from `rx` until one contains `needle` (or ten seconds pass).
fn until(rx: &mpsc::Receiver<String>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains(needle);
                seen.push(line);
                if done {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_streams_filtered_lines_and_reconnects() {
    let fake = FakeOpenAi::start([Reply::text("one"), Reply::text("two")])
        .await
        .expect("model");
    let home = binary::home_with(&binary::webhook_config(&fake.base_url, "ops", ""));
    let iris = binary::start(
        home.path(),
        &[("HOOK_TOKEN", HOOK), ("IRIS_ADMIN_TOKEN", ADMIN)],
    )
    .await;
    let (mut json_follower, json_lines, _) = follower(
        home.path(),
        &iris.base,
        ADMIN,
        &["--conversation", "webhook:ops:alpha", "--json"],
    );
    let (mut human_follower, human_lines, human_err) =
        follower(home.path(), &iris.base, ADMIN, &["--level", "info"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for conversation in ["beta", "alpha"] {
        let status = reqwest::Client::new()
            .post(format!("{}/hooks/ops", iris.base))
            .bearer_auth(HOOK)
            .json(&json!({"conversation": conversation, "user": "u", "text": "hi"}))
            .send()
            .await
            .expect("send")
            .status();
        assert_eq!(status.as_u16(), 200);
    }
    let seen = until(&json_lines, "turn finished");
    assert!(
        seen.iter().any(|l| l.contains("\"turn finished\"")),
        "the alpha turn streamed: {seen:?}"
    );
    for line in &seen {
        let parsed: serde_json::Value = serde_json::from_str(line).expect("JSON lines");
        assert!(!line.contains("webhook:ops:beta"), "filtered out: {parsed}");
        if parsed["fields"]["message"] == "turn finished" {
            // In a turn span (session, source) inside the conversation's span.
            let mut spans = parsed["spans"].as_array().cloned().unwrap_or_default();
            spans.push(parsed["span"].clone());
            let named = |name: &str| {
                spans
                    .iter()
                    .find(|s| s["name"] == name)
                    .cloned()
                    .unwrap_or_else(|| panic!("no {name} span: {parsed}"))
            };
            assert_eq!(named("conversation")["conversation"], "webhook:ops:alpha");
            assert_eq!(named("turn")["source"], "webhook");
            assert!(named("turn")["session"].as_str().is_some(), "{parsed}");
        }
    }
    let human = until(&human_lines, "conversation=webhook:ops:alpha");
    assert!(
        human
            .iter()
            .any(|l| l.contains(" INFO ") && l.contains("turn finished")),
        "{human:?}"
    );
    assert!(
        !human.iter().any(|l| l.contains(HOOK) || l.contains(ADMIN)),
        "no secrets"
    );

    drop(iris);
    let err = until(&human_err, "reconnecting");
    assert!(err.iter().any(|l| l.contains("reconnecting")), "{err:?}");
    let _ = json_follower.kill();
    let _ = human_follower.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_with_a_reason() {
    let home = binary::home_with("[llm]\nbase_url = \"http://127.0.0.1:9\"\n");
    let iris = binary::start(home.path(), &[("IRIS_ADMIN_TOKEN", ADMIN)]).await;
    let output = Command::new(env!("CARGO_BIN_EXE_iris"))
        .args(["logs", "--follow", "--url", &iris.base])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("IRIS_HOME", home.path())
        .env("IRIS_ADMIN_TOKEN", "not-the-token")
        .output()
        .expect("iris logs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refused the admin token"), "{stderr}");
}
