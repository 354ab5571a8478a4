//! The `iris` binary as an operator uses it: exit codes, one-line errors, `doctor`,
//! `migrate`, `sessions`, and `serve` with health endpoints, redacted logs and a clean stop.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_core::store::{NewConversation, NewMessage, Role, SessionSpec, SqliteStore};

/// `iris` with a clean environment: only what a test passes, plus PATH.
fn iris(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_iris"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("IRIS_HOME", home)
        .env("NO_COLOR", "1")
        // A configured model: these tests are not about the keyless first run.
        .env("IRIS__LLM__BASE_URL", "http://127.0.0.1:9/v1");
    cmd
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run iris");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn version_and_bad_arguments() {
    let home = tempfile::tempdir().expect("dir");
    let (code, out, _) = run(iris(home.path()).arg("--version"));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("iris {}", env!("CARGO_PKG_VERSION")));

    let (code, _, err) = run(iris(home.path()).args(["serve", "--no-such-flag"]));
    assert_eq!(code, 2);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn bad_config_is_one_line_naming_key_and_file() {
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(&file, "[telegram]\nenabeld = true\n").expect("write");
    let (code, out, _) = run(iris(home.path()).arg("doctor"));
    assert_eq!(code, 1);
    assert!(
        out.starts_with("FAIL config") && out.contains("enabeld"),
        "doctor reports it as a check: {out}"
    );
    let (code, _, err) = run(iris(home.path()).arg("migrate"));
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("enabeld") && err.contains(&file.display().to_string()),
        "{err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_check_and_migrate_fixes_the_store() {
    // Each doctor run asks the model once.
    let model = testkit::openai::FakeOpenAi::start([
        testkit::Reply::text("OK"),
        testkit::Reply::text("OK"),
    ])
    .await
    .expect("model");
    let home = tempfile::tempdir().expect("dir");
    let iris = |home: &Path| {
        let mut cmd = iris(home);
        cmd.env("IRIS__LLM__BASE_URL", &model.base_url);
        cmd
    };
    let (code, out, _) = run(iris(home.path()).arg("doctor"));
    assert_eq!(code, 1, "an unmigrated store fails: {out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains("config")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains("data dir")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("iris migrate")),
        "{out}"
    );

    let (code, out, err) = run(iris(home.path()).arg("migrate"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("all applied"), "{out}");

    let (code, out, _) = run(iris(home.path()).arg("doctor"));
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok")).count(),
        4,
        "config, data dir, store, model: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains("model") && l.contains("answered in")),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_model_and_each_platform_token() {
    let model = testkit::openai::FakeOpenAi::start([testkit::Reply::error(
        401,
        r#"{"error": {"message": "Incorrect API key provided"}}"#,
    )])
    .await
    .expect("model");
    let telegram = testkit::telegram::FakeTelegram::start("123:tg-token")
        .await
        .expect("telegram");
    let discord = testkit::discord::FakeDiscord::start("dc-token")
        .await
        .expect("discord");
    let home = tempfile::tempdir().expect("dir");
    std::fs::write(
        home.path().join("iris.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\n\n[telegram]\nenabled = true\napi_url = \"{}\"\n\n[discord]\nenabled = true\napi_url = \"{}\"\n",
            model.base_url,
            telegram.api_url(),
            discord.api_url()
        ),
    )
    .expect("config");
    let (code, _, _) = run(iris(home.path()).arg("migrate"));
    assert_eq!(code, 0);
    let (code, out, _) = run(iris(home.path())
        .arg("doctor")
        .env("IRIS__LLM__BASE_URL", &model.base_url)
        .env("TELEGRAM_BOT_TOKEN", "123:tg-token")
        .env("DISCORD_BOT_TOKEN", "wrong-token"));
    assert_eq!(code, 1, "{out}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in {out}"))
            .to_owned()
    };
    let model_line = line("model");
    assert!(
        model_line.starts_with("FAIL") && model_line.contains("(auth)"),
        "{out}"
    );
    assert!(line("telegram").starts_with("ok") && line("telegram").contains("@iris_test_bot"));
    let discord_line = line("discord");
    assert!(
        discord_line.starts_with("FAIL") && discord_line.contains("401"),
        "{out}"
    );
    assert!(
        telegram.calls("deleteWebhook").is_empty(),
        "the doctor changes nothing"
    );

    // A hosted model without a key is skipped, not failed.
    let (_, out, _) = run(iris(home.path())
        .arg("doctor")
        .env("IRIS__LLM__BASE_URL", "https://api.openai.com/v1"));
    assert!(
        out.lines()
            .any(|l| l.starts_with("skip") && l.contains("OPENAI_API_KEY")),
        "{out}"
    );
}

#[test]
fn doctor_fails_on_an_unwritable_data_dir() {
    let dir = tempfile::tempdir().expect("dir");
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").expect("write");
    let (code, out, _) = run(iris(&not_a_dir).arg("doctor"));
    assert_eq!(code, 1);
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("data dir")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("store")),
        "{out}"
    );
}

#[test]
fn sessions_list_show_and_search_read_the_store() {
    let home = tempfile::tempdir().expect("dir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (root, child) = runtime.block_on(async {
        let store = SqliteStore::open(home.path().join("state.db"))
            .await
            .expect("open");
        use agent_core::store::SessionStore;
        let c = store
            .conversation(&NewConversation::new("telegram:dm:1", "telegram"))
            .await
            .expect("conv");
        let spec = SessionSpec {
            title: Some("Trip planning".into()),
            ..Default::default()
        };
        let root = store.start_session(c.id, &spec).await.expect("session");
        store
            .append_messages(
                &root.id,
                &[
                    NewMessage::text(Role::User, "book the ferry to Hydra"),
                    NewMessage::text(Role::Assistant, "done"),
                ],
            )
            .await
            .expect("append");
        let child = store.branch(&root.id, None).await.expect("branch");
        (root.id, child.id)
    });

    let (code, out, err) = run(iris(home.path()).args(["sessions", "list"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&root) && out.contains(&child) && out.contains("Trip planning (2)"),
        "{out}"
    );

    let (code, out, err) = run(iris(home.path()).args(["sessions", "show", &child]));
    assert_eq!(code, 0, "{err}");
    let root_line = out.find(&root).expect("lineage shows the root");
    let child_line = out.find(&child).expect("lineage shows the session");
    assert!(root_line < child_line, "root first: {out}");
    assert!(out.contains("book the ferry to Hydra"), "{out}");

    let (code, out, err) = run(iris(home.path()).args(["sessions", "export", &child]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("# Session {child}")), "{out}");
    assert!(
        out.contains(&format!("- lineage: {root} → {child}")),
        "{out}"
    );
    assert!(out.contains("book the ferry to Hydra"), "{out}");
    let (code, out, _) =
        run(iris(home.path()).args(["sessions", "export", &child, "--format", "json"]));
    assert_eq!(code, 0);
    let exported: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(exported["session"]["id"], child.as_str());
    let (code, _, err) =
        run(iris(home.path()).args(["sessions", "export", &child, "--format", "pdf"]));
    assert_eq!(code, 1);
    assert!(err.contains("markdown or json"), "{err}");

    let (code, out, err) = run(iris(home.path()).args(["sessions", "search", "ferry", "(hydra"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().count(),
        2,
        "the original and the branch copy: {out}"
    );
    assert!(
        out.contains("[ferry]") && out.contains(&format!("(root {root})")),
        "{out}"
    );

    let (code, out, _) = run(iris(home.path()).args(["sessions", "search", "--json", "ferry"]));
    assert_eq!(code, 0);
    let hits: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(hits.as_array().map(Vec::len), Some(2));

    let (code, _, err) =
        run(iris(home.path()).args(["sessions", "show", "19990101_000000_000000"]));
    assert_eq!(code, 1);
    assert!(err.contains("no session"), "{err}");

    // No daemon runs (nothing listens at server.bind): ending goes to the store.
    let nobody = format!("127.0.0.1:{}", free_port());
    let offline = |args: &[&str]| {
        run(iris(home.path())
            .env("IRIS__SERVER__BIND", &nobody)
            .args(args))
    };
    let (code, out, err) = offline(&["sessions", "conversations"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("telegram:dm:1") && out.contains(&child),
        "{out}"
    );
    let (code, out, err) = offline(&["sessions", "end", "telegram:dm:1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("ended {child}")), "{out}");
    let (code, out, _) = offline(&[
        "sessions",
        "list",
        "--conversation",
        "telegram:dm:1",
        "--json",
    ]);
    assert_eq!(code, 0);
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    let reasons: Vec<&str> = listed
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["end_reason"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(reasons, ["user_reset", "branched"], "{out}");
    let (code, _, err) = offline(&["sessions", "end", "telegram:dm:404"]);
    assert_eq!(code, 1);
    assert!(err.contains("no conversation"), "{err}");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn get(port: u16, path: &str) -> Option<(u16, serde_json::Value)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let response = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.ok()?))
    })
}

#[test]
fn serve_answers_health_logs_without_secrets_and_stops_on_sigterm() {
    let home = tempfile::tempdir().expect("dir");
    let port = free_port();
    let bot_token = "987654321:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw";
    let child = iris(home.path())
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env("TELEGRAM_BOT_TOKEN", bot_token)
        .env("OPENAI_API_KEY", "sk-test-abcdefghijklmnopqrstuvwxyz")
        .env("RUST_LOG", "debug")
        .env("IRIS__LOG__FILE", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut health = None;
    for _ in 0..100 {
        health = get(port, "/healthz");
        if health.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        health.map(|(s, b)| (s, b["status"].clone())),
        Some((200, "ok".into()))
    );
    let (status, body) = get(port, "/readyz").expect("readyz");
    assert_eq!(status, 200);
    assert_eq!(body["checks"]["store"], "ok");
    let (status, body) = get(port, "/no/such/path").expect("404");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0), "a clean stop exits 0");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("SIGTERM") && stderr.contains("iris stopped"),
        "{stderr}"
    );

    let logs = std::fs::read_dir(home.path().join("logs")).expect("log dir");
    let mut file_text = String::new();
    for entry in logs.flatten() {
        file_text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    assert!(
        file_text.contains("iris listening"),
        "the log file gets the same lines: {file_text}"
    );
    for text in [stderr.as_ref(), file_text.as_str()] {
        assert!(
            !text.contains("AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"),
            "bot token leaked"
        );
        assert!(
            !text.contains("abcdefghijklmnopqrstuvwxyz"),
            "API key leaked"
        );
    }
}

#[test]
fn a_store_error_never_shows_the_database_password() {
    let home = tempfile::tempdir().expect("dir");
    let port = free_port();
    let (code, out, err) = run(iris(home.path())
        .arg("serve")
        .env(
            "DATABASE_URL",
            format!("postgres://iris:hunter2-secret@127.0.0.1:{port}/iris"),
        )
        .env("IRIS__SERVER__BIND", format!("127.0.0.1:{}", free_port())));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("cannot open the store"), "{err}");
    assert!(
        !err.contains("hunter2-secret") && !out.contains("hunter2-secret"),
        "{err}"
    );
}

#[test]
fn doctor_checks_each_mcp_server() {
    let home = tempfile::tempdir().expect("dir");
    let fixture = testkit::mcp::fixture_binary().expect("mcp-fixture");
    std::fs::write(
        home.path().join("iris.toml"),
        format!(
            "[mcp.servers.fix]\ncommand = {:?}\n\n[mcp.servers.gone]\ncommand = \"/nonexistent/server\"\n",
            fixture.display().to_string()
        ),
    )
    .expect("write");
    let (code, out, _) = run(iris(home.path()).arg("migrate"));
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(iris(home.path()).arg("doctor"));
    assert_eq!(
        code, 1,
        "a server that cannot start fails the doctor: {out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("ok")
            && l.contains("mcp fix")
            && l.contains("connected, 6 tools")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("FAIL")
            && l.contains("mcp gone")
            && l.contains("/nonexistent/server")),
        "{out}"
    );
}
