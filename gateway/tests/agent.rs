//! The agent built from configuration: the main model answers turns, the configured
//! compression model writes summaries, the configured system prompt opens each session, and
//! the built-in tools are offered.

use std::path::Path;
use std::sync::Arc;

use agent_core::agent::ConversationState;
use agent_core::redact::Redactor;
use agent_core::store::{
    NewConversation, NewMessage, Role, SessionSpec, SessionStore, SqliteStore,
};
use gateway::config::{self, Env};
use testkit::Reply;
use testkit::openai::FakeOpenAi;
use tokio_util::sync::CancellationToken;

fn env(home: &Path) -> Env {
    [
        ("IRIS_HOME".to_owned(), home.display().to_string()),
        ("MAIN_KEY".to_owned(), "sk-main-key-0123456789".to_owned()),
        ("SMALL_KEY".to_owned(), "sk-small-key-0123456789".to_owned()),
    ]
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_models_answer_and_summarise() {
    let main = FakeOpenAi::start([Reply::text("Hello from main.")])
        .await
        .expect("fake");
    let small = FakeOpenAi::start([Reply::text("SUMMARY from the small model")])
        .await
        .expect("fake");
    let home = tempfile::tempdir().expect("dir");
    let file = home.path().join("iris.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[llm]
base_url = "{}"
model = "main-model"
api_key_env = "MAIN_KEY"

[compression]
memory_flush = false

[compression.model]
base_url = "{}"
model = "small-model"
api_key_env = "SMALL_KEY"

[agent]
system_prompt = "You are Iris, terse."
"#,
            main.base_url, small.base_url
        ),
    )
    .expect("write");
    let loaded = config::load_with(Some(&file), env(home.path())).expect("load");
    let store: Arc<dyn SessionStore> = Arc::new(
        SqliteStore::open(home.path().join("s.db"))
            .await
            .expect("store"),
    );
    let built = gateway::agent::build(&loaded, store.clone(), Arc::new(Redactor::default()))
        .await
        .expect("agent");
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    let agent = built.agent;

    let c = store
        .conversation(&NewConversation::new("api:cfg", "api"))
        .await
        .expect("conv");
    let s = store
        .start_session(c.id, &SessionSpec::default())
        .await
        .expect("session");
    let long = "words ".repeat(500);
    let seeded: Vec<NewMessage> = (0..6)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            NewMessage::text(role, format!("{i} {long}"))
        })
        .collect();
    store.append_messages(&s.id, &seeded).await.expect("seed");

    let mut state = ConversationState::new(c.id, s.id.clone());
    let cancel = CancellationToken::new();
    let outcome = agent
        .run_turn(&mut state, "hi", &|_| {}, &cancel)
        .await
        .expect("turn");
    assert_eq!(outcome.text, "Hello from main.");
    let asked = &main.requests()[0];
    assert_eq!(asked.body["model"], "main-model");
    assert_eq!(
        asked.authorization.as_deref(),
        Some("Bearer sk-main-key-0123456789")
    );
    assert_eq!(asked.body["messages"][0]["content"], "You are Iris, terse.");
    let tools: Vec<&str> = asked.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(tools, ["clock", "memory", "session_search", "todo"]);

    let report = agent
        .compress_now(&mut state, None, &|_| {}, &cancel)
        .await
        .expect("compress")
        .expect("compressed");
    assert!(!report.fallback);
    assert_eq!(
        small.requests().len(),
        1,
        "the compression model summarised"
    );
    assert_eq!(small.requests()[0].body["model"], "small-model");
    assert_eq!(
        main.requests().len(),
        1,
        "the main model was not asked to summarise"
    );
}
