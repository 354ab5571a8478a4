//! Configuration loading: layering, strictness, secrets read verbatim, the example file.

use std::path::{Path, PathBuf};

use gateway::config::{self, BusyMode, Config, Env, LogFormat};

fn env(pairs: &[(&str, &str)], home: &Path) -> Env {
    let mut env: Env = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.entry("IRIS_HOME".into())
        .or_insert_with(|| home.display().to_string());
    env
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/iris.example.toml")
}

#[test]
fn the_example_config_parses_and_documents_the_defaults() {
    let text = std::fs::read_to_string(example()).expect("read example");
    let parsed = config::toml_check(&text).expect("example parses");
    let mut expected = Config::default();
    expected.llm.api_key_env = Some("OPENAI_API_KEY".into());
    expected.webhook.routes.insert(
        "example".into(),
        config::WebhookRoute {
            token_env: Some("IRIS_HOOK_EXAMPLE_TOKEN".into()),
            secret_env: None,
        },
    );
    assert_eq!(parsed, expected, "the example must show the real defaults");
}

#[test]
fn defaults_then_file_then_environment() {
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("custom.toml");
    std::fs::write(
        &file,
        "[llm]\nmodel = \"from-file\"\ncontext_length = 1000\n[agent]\nbusy_mode = \"steer\"\n",
    )
    .expect("write");
    let loaded = config::load_with(
        Some(&file),
        env(
            &[
                ("IRIS__LLM__MODEL", "from-env"),
                ("IRIS__LOG__FORMAT", "json"),
            ],
            home.path(),
        ),
    )
    .expect("load");
    assert_eq!(
        loaded.config.llm.model, "from-env",
        "environment beats the file"
    );
    assert_eq!(
        loaded.config.llm.context_length, 1000,
        "the file beats the defaults"
    );
    assert_eq!(loaded.config.agent.busy_mode, BusyMode::Steer);
    assert_eq!(loaded.config.log.format, LogFormat::Json);
    assert_eq!(
        loaded.config.server.bind, "127.0.0.1:8787",
        "defaults fill the rest"
    );
    assert_eq!(loaded.file.as_deref(), Some(file.as_path()));
}

#[test]
fn iris_home_file_is_used_when_present_and_numbers_come_from_env() {
    let home = tempfile::tempdir().expect("dir");
    std::fs::write(
        home.path().join("iris.toml"),
        "[webhook]\nsync_timeout_secs = 5\n",
    )
    .expect("write");
    let loaded = config::load_with(
        None,
        env(&[("IRIS__LLM__MAX_OUTPUT_TOKENS", "512")], home.path()),
    )
    .expect("load");
    assert_eq!(loaded.config.webhook.sync_timeout_secs, 5);
    assert_eq!(loaded.config.llm.max_output_tokens, 512);
}

#[test]
fn an_empty_variable_does_not_override_the_file() {
    let home = tempfile::tempdir().expect("dir");
    std::fs::write(home.path().join("iris.toml"), "[llm]\nmodel = \"kept\"\n").expect("write");
    let loaded =
        config::load_with(None, env(&[("IRIS__LLM__MODEL", "")], home.path())).expect("load");
    assert_eq!(loaded.config.llm.model, "kept");
}

#[test]
fn unknown_keys_name_the_key_and_the_file() {
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(&file, "[server]\nbind = \"127.0.0.1:1\"\nbnid = \"oops\"\n").expect("write");
    let err = config::load_with(None, env(&[], home.path())).expect_err("must fail");
    let text = format!("{err:#}");
    assert!(
        text.contains("bnid") && text.contains(&file.display().to_string()),
        "{text}"
    );
    assert!(text.contains("line 3"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");

    let err = config::load_with(
        None,
        env(
            &[("IRIS__STORE__URLL", "x")],
            tempfile::tempdir().expect("dir").path(),
        ),
    )
    .expect_err("must fail");
    let text = format!("{err:#}");
    assert!(text.contains("urll") && text.contains("IRIS__"), "{text}");
}

#[test]
fn invalid_values_are_refused_with_the_key() {
    let home = tempfile::tempdir().expect("dir");
    for (toml, key) in [
        ("[llm]\nprovider = \"gemini\"\n", "llm.provider"),
        (
            "[compression]\nthreshold_percent = 1.5\n",
            "compression.threshold_percent",
        ),
        ("[server]\nbind = \"localhost\"\n", "server.bind"),
        ("[webhook.routes.open]\n", "webhook.routes.open"),
        ("[agent]\nbusy_mode = \"panic\"\n", "busy_mode"),
        ("[llm]\ninput_price_per_mtok = -1.0\n", "llm prices"),
        ("[llm]\nmax_output_tokens = 0\n", "llm.max_output_tokens"),
        ("[llm]\nidle_timeout_secs = 0\n", "llm timeouts"),
        (
            "[mcp.servers.x]\ncommand = \"a\"\nurl = \"http://b\"\n",
            "mcp.servers.x",
        ),
        ("[mcp.servers.y]\n", "mcp.servers.y"),
        (
            "[mcp.servers.\"a b\"]\ncommand = \"a\"\n",
            "mcp.servers.a b",
        ),
        ("[mcp.servers.z]\nurl = \"ftp://x\"\n", "mcp.servers.z.url"),
        (
            "[tools]\nsession_search = \"everyone\"\n",
            "`everyone`, expected one of `lineage`",
        ),
    ] {
        let file = home.path().join("bad.toml");
        std::fs::write(&file, toml).expect("write");
        let err = config::load_with(Some(&file), env(&[], home.path())).expect_err("must fail");
        let text = format!("{err:#}");
        assert!(
            text.contains(key) || text.contains("panic"),
            "{toml:?} gave {text}"
        );
    }
    let missing = home.path().join("missing.toml");
    let err = config::load_with(Some(&missing), env(&[], home.path())).expect_err("must fail");
    assert!(format!("{err:#}").contains("missing.toml"));
}

#[test]
fn secrets_are_read_verbatim_and_empty_means_unset() {
    let home = tempfile::tempdir().expect("dir");
    let loaded = config::load_with(
        None,
        env(
            &[
                ("TELEGRAM_BOT_TOKEN", "0012345"),
                ("OPENAI_API_KEY", ""),
                ("IRIS_API_KEY", " spaced "),
            ],
            home.path(),
        ),
    )
    .expect("load");
    assert_eq!(
        loaded.secret("TELEGRAM_BOT_TOKEN").as_deref(),
        Some("0012345")
    );
    assert_eq!(loaded.secret("OPENAI_API_KEY"), None);
    assert_eq!(loaded.secret("IRIS_API_KEY").as_deref(), Some(" spaced "));
    let values = loaded.secret_values();
    assert!(values.contains(&"0012345".to_owned()));
}

#[test]
fn store_url_prefers_config_then_database_url_then_iris_home() {
    let home = tempfile::tempdir().expect("dir");
    let loaded = config::load_with(None, env(&[], home.path())).expect("load");
    assert_eq!(
        loaded.store_url(),
        format!("sqlite://{}", home.path().join("state.db").display())
    );

    let pg = "postgres://iris:pw-from-env@db/iris";
    let loaded = config::load_with(None, env(&[("DATABASE_URL", pg)], home.path())).expect("load");
    assert_eq!(loaded.store_url(), pg);
    assert!(
        loaded.secret_values().contains(&"pw-from-env".to_owned()),
        "the DB password is redacted"
    );

    let loaded = config::load_with(
        None,
        env(
            &[
                ("DATABASE_URL", pg),
                ("IRIS__STORE__URL", "sqlite://$IRIS_HOME/other.db"),
            ],
            home.path(),
        ),
    )
    .expect("load");
    assert_eq!(
        loaded.store_url(),
        format!("sqlite://{}/other.db", home.path().display())
    );

    let loaded = config::load_with(
        None,
        env(
            &[
                ("IRIS__STORE__URL", "sqlite://~/x.db"),
                ("HOME", "/home/someone"),
            ],
            home.path(),
        ),
    )
    .expect("load");
    assert_eq!(loaded.store_url(), "sqlite:///home/someone/x.db");
}

#[test]
fn anthropic_defaults_to_its_own_key_variable() {
    let home = tempfile::tempdir().expect("dir");
    let loaded = config::load_with(
        None,
        env(
            &[
                ("IRIS__LLM__PROVIDER", "anthropic"),
                ("ANTHROPIC_API_KEY", "sk-ant-xyz-1234"),
            ],
            home.path(),
        ),
    )
    .expect("load");
    assert_eq!(loaded.config.llm.key_env(), "ANTHROPIC_API_KEY");
    assert!(
        loaded
            .secret_values()
            .contains(&"sk-ant-xyz-1234".to_owned())
    );
}

#[test]
fn providers_are_built_in_order_with_their_own_limits_prices_and_keys() {
    use agent_core::llm::Prices;
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(
        &file,
        r#"
[llm]
model = "main-model"
context_length = 32000
max_output_tokens = 1000
input_price_per_mtok = 0.5
output_price_per_mtok = 1.5
cache_read_price_per_mtok = 0.05

[[llm.fallback]]
provider = "anthropic"
base_url = "http://127.0.0.1:9"
model = "backup-model"
context_length = 200000
"#,
    )
    .expect("write");
    let loaded = config::load_with(
        Some(&file),
        env(
            &[("OPENAI_API_KEY", "sk-main"), ("ANTHROPIC_API_KEY", "")],
            home.path(),
        ),
    )
    .expect("load");
    let chain = gateway::providers::chain(&loaded, &loaded.config.llm).expect("providers");
    let seen: Vec<_> = chain
        .iter()
        .map(|p| (p.kind(), p.model().to_owned(), p.spec().context_length))
        .collect();
    assert_eq!(
        seen,
        [
            ("openai", "main-model".to_owned(), 32_000),
            ("anthropic", "backup-model".to_owned(), 200_000)
        ]
    );
    assert_eq!(chain[0].spec().max_output_tokens, 1000);
    assert_eq!(
        chain[0].spec().prices,
        Prices {
            input_per_mtok: 0.5,
            output_per_mtok: 1.5,
            cache_read_per_mtok: Some(0.05),
            cache_write_per_mtok: None,
        }
    );
    assert_eq!(chain[1].spec().prices, Prices::default());
}

#[test]
fn mcp_secrets_are_redacted_and_resolved_from_the_environment() {
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(
        &file,
        r#"
[mcp.servers.files]
command = "files-server"
env = { LEVEL = "warn" }
env_from = { GITHUB_TOKEN = "IRIS_GH" }

[mcp.servers.web]
url = "http://127.0.0.1:9/mcp"
bearer_token_env = "IRIS_WEB_TOKEN"

[mcp.servers.off]
enabled = false
command = "never"
"#,
    )
    .expect("write");
    let loaded = config::load_with(
        Some(&file),
        env(
            &[
                ("IRIS_GH", "ghp_child_secret"),
                ("IRIS_WEB_TOKEN", "web-token-value"),
            ],
            home.path(),
        ),
    )
    .expect("load");
    let secrets = loaded.secret_values();
    assert!(secrets.contains(&"ghp_child_secret".to_owned()));
    assert!(secrets.contains(&"web-token-value".to_owned()));

    use agent_core::tools::mcp::McpTransport;
    let servers: Vec<_> = gateway::tools::mcp_servers(&loaded)
        .into_iter()
        .map(|r| r.expect("resolved"))
        .collect();
    assert_eq!(servers.len(), 2, "disabled servers are left out");
    match &servers[0].transport {
        McpTransport::Stdio { command, env, .. } => {
            assert_eq!(command, "files-server");
            assert_eq!(env.get("LEVEL").map(String::as_str), Some("warn"));
            assert_eq!(
                env.get("GITHUB_TOKEN").map(String::as_str),
                Some("ghp_child_secret")
            );
        }
        other => panic!("expected stdio, got {other:?}"),
    }
    assert_eq!(
        servers[1].transport,
        McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            bearer_token: Some("web-token-value".into())
        }
    );

    // An unset secret fails that server, naming the variable.
    let loaded = config::load_with(Some(&file), env(&[], home.path())).expect("load");
    let errors: Vec<String> = gateway::tools::mcp_servers(&loaded)
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("IRIS_GH"), "{errors:?}");
    assert!(errors[1].contains("IRIS_WEB_TOKEN"), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_built_from_config_with_mcp_servers() {
    let home = tempfile::tempdir().expect("dir");
    let fixture = testkit::mcp::fixture_binary().expect("mcp-fixture");
    let file = home.path().join("iris.toml");
    std::fs::write(
        &file,
        format!(
            "[tools]\nclock = false\nsession_search = \"off\"\n\n[mcp.servers.fix]\ncommand = {:?}\ninclude = [\"add\"]\n\n[mcp.servers.gone]\ncommand = \"/nonexistent/server\"\n",
            fixture.display().to_string()
        ),
    )
    .expect("write");
    let loaded = config::load_with(Some(&file), env(&[], home.path())).expect("load");
    let store: std::sync::Arc<dyn agent_core::store::SessionStore> = std::sync::Arc::new(
        agent_core::store::SqliteStore::open(home.path().join("s.db"))
            .await
            .expect("store"),
    );
    let tools = gateway::tools::build(
        &loaded,
        store,
        std::sync::Arc::new(agent_core::redact::Redactor::default()),
    )
    .await;
    let names: Vec<String> = tools
        .registry
        .schemas()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["mcp_fix_add", "memory", "todo"]);
    assert!(tools.memory.is_some());
    assert_eq!(tools.problems.len(), 1, "{:?}", tools.problems);
    assert!(tools.problems[0].contains("gone"), "{:?}", tools.problems);
}

#[test]
fn vision_is_guessed_from_the_model_name_unless_set() {
    let with = |model: &str, vision: Option<bool>| {
        config::LlmConfig {
            model: model.into(),
            vision,
            ..config::LlmConfig::default()
        }
        .sees_images()
    };
    let guessed: Vec<bool> = [
        "gpt-4o-mini",
        "anthropic/claude-sonnet-4",
        "Qwen2.5-VL-7B-Instruct",
        "o4-mini",
        "gpt-3.5-turbo",
        "o3-mini",
        "deepseek-chat",
        "SmolLM2-135M-Instruct",
    ]
    .iter()
    .map(|m| with(m, None))
    .collect();
    assert_eq!(
        guessed,
        [true, true, true, true, false, false, false, false]
    );
    assert!(!with("gpt-4o", Some(false)), "the setting wins");
    assert!(with("my-finetune", Some(true)));
}
