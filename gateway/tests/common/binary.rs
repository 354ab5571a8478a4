//! The real `iris` binary on a free port with a clean environment, killed (SIGKILL) on drop.
#![allow(dead_code)] // each test crate uses its own part

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Iris {
    pub child: Child,
    pub base: String,
}

impl Drop for Iris {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits (up to 15 s) until `sent()` holds `count` messages and returns them; otherwise fails
/// with what was sent and the daemon's log.
pub async fn sent_at_least(
    count: usize,
    home: &Path,
    sent: impl Fn() -> Vec<String>,
) -> Vec<String> {
    for _ in 0..300 {
        let texts = sent();
        if texts.len() >= count {
            return texts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "got {:?}, expected {count} messages; log:\n{}",
        sent(),
        log(home)
    );
}

/// A fresh `$IRIS_HOME` whose `iris.toml` is `config`.
pub fn home_with(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join("iris.toml"), config).expect("config");
    home
}

/// The config of a daemon on `model_url` with webhook route `route`, its token in
/// `$HOOK_TOKEN`, and `extra` appended.
pub fn webhook_config(model_url: &str, route: &str, extra: &str) -> String {
    format!(
        "[llm]\nbase_url = \"{model_url}\"\nmodel = \"main\"\n{extra}\n\n[webhook.routes.{route}]\ntoken_env = \"HOOK_TOKEN\"\n"
    )
}

/// Spawns `iris serve` on `port` with `$IRIS_HOME = home`, a clean environment plus `env`, its
/// stdout to `stdout` and its log appended to `home/iris.log` (`log(home)`).
pub fn spawn(home: &Path, port: u16, env: &[(&str, &str)], stdout: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_iris"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("IRIS_HOME", home)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdout(stdout)
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(home.join("iris.log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .expect("start iris")
}

/// Starts `iris serve` with `$IRIS_HOME = home` (its `iris.toml` is the test's) and `env`, and
/// waits until it answers `/healthz`.
pub async fn start(home: &Path, env: &[(&str, &str)]) -> Iris {
    let port = free_port();
    let child = spawn(home, port, env, Stdio::null());
    let iris = Iris {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    for _ in 0..200 {
        if reqwest::get(format!("{}/healthz", iris.base))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return iris;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("iris did not come up");
}

/// What the daemon logged so far.
pub fn log(home: &Path) -> String {
    std::fs::read_to_string(home.join("iris.log")).unwrap_or_default()
}
