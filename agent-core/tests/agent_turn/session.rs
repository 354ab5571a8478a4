//! What a turn leaves on the session row: the frozen system prompt with its memory snapshot,
//! the estimated cost at the answering provider's prices, and the context size (real or
//! estimated).

use std::time::Duration;

use agent_core::agent::{ConversationState, PromptBuilder, UserInput};
use agent_core::llm::openai::{OpenAiConfig, OpenAiProvider};
use agent_core::llm::{ModelSpec, Prices};
use agent_core::store::SessionSpec;
use agent_core::tools::memory::MemoryStore;
use agent_core::tools::{Tool, ToolContext};
use serde_json::json;

use super::*;

async fn remember(memory: &MemoryStore, conversation_id: i64, text: &str) {
    let ctx = ToolContext {
        session_id: "any".into(),
        conversation_id,
    };
    let out = memory
        .call(
            json!({"op": "add", "file": "memory", "text": text}),
            &ctx,
            &CancellationToken::new(),
        )
        .await;
    assert!(!out.is_error, "{out:?}");
}

fn system_sent(fake: &FakeOpenAi, request: usize) -> String {
    let body = &fake.requests()[request].body;
    assert_eq!(body["messages"][0]["role"], "system");
    body["messages"][0]["content"]
        .as_str()
        .expect("system text")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_prompt_is_frozen_with_the_memory_of_session_start() {
    let fake = FakeOpenAi::start([Reply::text("one"), Reply::text("two"), Reply::text("three")])
        .await
        .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let memory = Arc::new(MemoryStore::new(s.dir.path().join("memory")));
    s.agent.prompt = PromptBuilder::new("You are terse.").with_memory(memory.clone());
    s.state.system_prompt = None;
    let conv = s.state.conversation_id;
    remember(&memory, conv, "The user's cat is called Miso.").await;

    let cancel = CancellationToken::new();
    s.agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect("turn 1");
    let first = system_sent(&fake, 0);
    assert!(first.starts_with("You are terse."), "{first}");
    assert!(first.contains("Miso"), "{first}");

    // Memory written mid-session does not change this session's prompt: byte-identical.
    remember(&memory, conv, "The user prefers metric units.").await;
    s.agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect("turn 2");
    assert_eq!(system_sent(&fake, 1), first);
    let row = s
        .agent
        .store
        .session(&s.state.session_id)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(row.system_prompt.as_deref(), Some(first.as_str()));

    // A new session takes a new snapshot.
    let next = s
        .agent
        .store
        .start_session(conv, &SessionSpec::default())
        .await
        .expect("session");
    // A new session is a new state (the actor starts one on /new, resume or rotation).
    s.state = ConversationState::new(conv, next.id);
    s.agent
        .run_turn(&mut s.state, USER, &|_| {}, &cancel)
        .await
        .expect("turn 3");
    let third = system_sent(&fake, 2);
    assert!(
        third.contains("Miso") && third.contains("metric units"),
        "{third}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_is_estimated_at_the_prices_of_the_provider_that_answered() {
    let main = FakeOpenAi::start([Reply::error(401, r#"{"error":{"message":"bad key"}}"#)])
        .await
        .expect("fake");
    let backup = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]).usage(2_000, 100),
        Reply::text("noon").usage(3_000, 50),
    ])
    .await
    .expect("fake");
    let priced = |fake: &FakeOpenAi, model: &str, input: f64, output: f64| {
        let mut config = OpenAiConfig::new(&fake.base_url, model);
        config.first_byte_timeout = Duration::from_secs(10);
        config.spec = ModelSpec {
            prices: Prices {
                input_per_mtok: input,
                output_per_mtok: output,
                ..Prices::default()
            },
            ..ModelSpec::default()
        };
        Arc::new(OpenAiProvider::new(config).expect("client")) as Arc<dyn ChatProvider>
    };
    let mut s = setup(
        vec![
            priced(&main, "main", 1_000.0, 1_000.0),
            priced(&backup, "backup", 2.0, 10.0),
        ],
        90,
    )
    .await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    let row = s
        .agent
        .store
        .session(&s.state.session_id)
        .await
        .expect("load")
        .expect("exists");
    // (2,000 + 3,000) × $2/M + (100 + 50) × $10/M; the failed main call costs nothing.
    let expected = 5_000.0 * 2.0 / 1e6 + 150.0 * 10.0 / 1e6;
    assert!(
        (outcome.cost_usd - expected).abs() < 1e-12,
        "the turn reports its cost"
    );
    assert!(
        (row.usage.estimated_cost_usd - expected).abs() < 1e-12,
        "{} != {expected}",
        row.usage.estimated_cost_usd
    );
    assert_eq!(row.usage.api_call_count, 3);
    assert_eq!(
        (row.usage.input_tokens, row.usage.output_tokens),
        (5_000, 150)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_usage_the_context_size_is_estimated() {
    let fake = FakeOpenAi::start([Reply::text("ok")]).await.expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let outcome = s
        .agent
        .run_turn(&mut s.state, USER, &|_| {}, &CancellationToken::new())
        .await
        .expect("turn");
    assert!(outcome.context_estimated);
    // System prompt, one user message and two tool schemas: more than the text alone, far
    // less than a real context.
    let schemas: u64 = s
        .agent
        .tools
        .schemas()
        .iter()
        .map(|t| (t.description.len() + t.parameters.to_string().len()) as u64 / 4)
        .sum();
    assert!(
        outcome.context_tokens > schemas && outcome.context_tokens < schemas + 100,
        "{} vs schemas {schemas}",
        outcome.context_tokens
    );
}

/// The history a state keeps between turns is exactly what a fresh read of the store gives,
/// through tool rounds; a second state on the same session starts with none; after messages
/// are deactivated and the history forgotten, the next turn sends what the store now holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_history_is_what_the_store_holds() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]).usage(100, 10),
        Reply::text("It is noon.").usage(150, 5),
        Reply::text("Second answer.").usage(160, 5),
        Reply::tool_calls([("clock", "{}")]).usage(170, 5),
        Reply::text("Third answer.").usage(180, 5),
        Reply::text("After the undo.").usage(120, 5),
    ])
    .await
    .expect("fake");
    let mut s = setup(vec![provider(&fake, "main")], 90).await;
    let cancel = CancellationToken::new();
    let from_store = |stored: &[agent_core::store::Message]| -> Vec<agent_core::llm::ChatMessage> {
        stored
            .iter()
            .filter_map(agent_core::agent::history::to_chat)
            .collect()
    };
    for text in ["first", "second", "third"] {
        s.agent
            .run_message(
                &mut s.state,
                UserInput::platform(text, text),
                &|_| {},
                &cancel,
            )
            .await
            .expect("turn");
        let now = stored(&s).await;
        assert_eq!(
            s.state.kept_history(),
            Some(from_store(&now).as_slice()),
            "after the {text} turn"
        );
    }
    assert_eq!(
        s.state.kept_history().map(<[_]>::len),
        Some(10),
        "3 user messages, 2 tool rounds, 3 answers"
    );

    // A second state on the same session (a restored actor) starts from the store.
    let other = ConversationState::new(s.state.conversation_id, s.state.session_id.clone());
    assert_eq!(other.kept_history(), None);

    // Forget the last exchange in the store; the next turn must not send it.
    let now = stored(&s).await;
    let from_third: Vec<i64> = now
        .iter()
        .skip_while(|m| m.body.content.as_deref() != Some("third"))
        .map(|m| m.id)
        .collect();
    assert_eq!(from_third.len(), 4, "third, its tool round and its answer");
    s.agent
        .store
        .deactivate_messages(&s.state.session_id, &from_third)
        .await
        .expect("deactivate");
    s.state.forget_history();
    s.agent
        .run_message(
            &mut s.state,
            UserInput::platform("fourth", "fourth"),
            &|_| {},
            &cancel,
        )
        .await
        .expect("turn");
    let sent = &fake.requests()[5].body["messages"];
    let contents: Vec<&str> = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        !contents.contains(&"third")
            && contents.contains(&"second")
            && contents.last() == Some(&"fourth"),
        "the turn after the undo sent {contents:?}"
    );
    let now = stored(&s).await;
    assert_eq!(s.state.kept_history(), Some(from_store(&now).as_slice()));
}

#[tokio::test]
async fn images_reach_the_model_for_their_turn_but_never_the_store() {
    let fake = FakeOpenAi::start([
        Reply::tool_calls([("clock", "{}")]),
        Reply::text("A cat, at noon."),
        Reply::text("Still a cat."),
    ])
    .await
    .expect("fake");
    let mut config = OpenAiConfig::new(&fake.base_url, "vision-model");
    config.first_byte_timeout = Duration::from_secs(10);
    config.spec.vision = true;
    let seeing: Arc<dyn ChatProvider> = Arc::new(OpenAiProvider::new(config).expect("client"));
    let mut s = setup(vec![seeing], 90).await;
    let cancel = CancellationToken::new();
    let input = UserInput {
        images: vec![agent_core::llm::ImagePart {
            media_type: "image/jpeg".into(),
            data: "SU1BR0VEQVRB".into(),
        }],
        ..UserInput::platform("What is this? [photo: media/cat.jpg]", "tg:1")
    };
    s.agent
        .run_message(&mut s.state, input, &|_| {}, &cancel)
        .await
        .expect("turn");
    s.agent
        .run_turn(&mut s.state, "And now?", &|_| {}, &cancel)
        .await
        .expect("turn");
    let requests = fake.requests();
    let image_parts = |i: usize| {
        requests[i].body["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["content"].is_array()).count())
            .unwrap_or_default()
    };
    // Both calls of the tool loop see the image; the next turn only its note.
    assert_eq!([image_parts(0), image_parts(1), image_parts(2)], [1, 1, 0]);
    assert_eq!(
        requests[0].body["messages"][1]["content"][1]["image_url"]["url"],
        "data:image/jpeg;base64,SU1BR0VEQVRB"
    );
    let stored = s
        .agent
        .store
        .messages(&s.state.session_id)
        .await
        .expect("messages");
    let everything =
        serde_json::to_string(&stored.iter().map(|m| &m.body.content).collect::<Vec<_>>())
            .expect("json");
    assert!(
        !everything.contains("SU1BR0VEQVRB"),
        "image data stored: {everything}"
    );
    assert!(everything.contains("[photo: media/cat.jpg]"));
}
