//! The daemon's HTTP surface (`daemon::start` + the server router) on a free port, with the
//! fake model behind it and a configuration the test extends.
#![allow(dead_code)] // each test crate uses its own part

use std::sync::Arc;

use agent_core::store::{SessionStore, SqliteStore};
use gateway::config::{self, Env};
use testkit::openai::FakeOpenAi;
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "hook-token-0123456789";
pub const SECRET: &str = "hook-secret-0123456789";
pub const API_KEY: &str = "iris-api-key-0123456789";

pub struct Daemon {
    pub base: String,
    pub client: reqwest::Client,
    pub stop: CancellationToken,
    pub home: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn daemon(fake: &FakeOpenAi, extra: &str) -> Daemon {
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[llm]
base_url = "{}"
model = "main"

[compression]
enabled = false
memory_flush = false

[webhook]
sync_timeout_secs = 2
{extra}

[webhook.routes.crm]
token_env = "HOOK_TOKEN"
secret_env = "HOOK_SECRET"

[webhook.routes.closed]
token_env = "UNSET_TOKEN"
"#,
            fake.base_url
        ),
    )
    .expect("write");
    let env: Env = [
        ("IRIS_HOME", home.path().display().to_string()),
        ("HOOK_TOKEN", TOKEN.to_owned()),
        ("HOOK_SECRET", SECRET.to_owned()),
        ("API_KEY", API_KEY.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let loaded = config::load_with(Some(&file), env).expect("config");
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(home.path().join("state.db"))
            .await
            .expect("store"),
    );
    let stop = CancellationToken::new();
    let readiness = gateway::readiness::Readiness::default();
    let mounted = gateway::daemon::start(&loaded, store.clone(), &readiness, stop.clone())
        .await
        .expect("start")
        .routes;
    let app = gateway::server::router(gateway::server::AppState { store, readiness }, mounted);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
    });
    Daemon {
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        stop,
        home,
    }
}
