//! Five successive compressions in one conversation through the loop: a fact planted in the
//! first turn still reaches the fifth summary request (each summary is updated from the one
//! before), every compression rotates the session with its parent link, and search still finds
//! the first message and resolves it to the lineage root.

use agent_core::agent::{Agent, ConversationState, PromptBuilder, TurnConfig, TurnEvent};
use agent_core::store::SearchQuery;
use agent_core::tools::ToolRegistry;

use super::*;

/// A summariser that keeps what it is given, as a good model would: every line of the earlier
/// summary, and the first words of every new user message.
fn echo_summary(request: &ChatRequest) -> Result<String, LlmError> {
    let text = request.messages[0].content.clone().unwrap_or_default();
    let mut lines: Vec<String> = Vec::new();
    let turns = match text.split_once("NEW TURNS SINCE THEN:\n") {
        Some((earlier, turns)) => {
            let earlier = earlier.trim_start_matches("EARLIER SUMMARY:\n");
            lines.extend(
                earlier
                    .lines()
                    .filter(|l| l.starts_with("- "))
                    .map(str::to_owned),
            );
            turns
        }
        None => text.trim_start_matches("CONVERSATION TO SUMMARISE:\n"),
    };
    let mut blocks = turns.split("[user]\n").skip(1);
    for block in blocks.by_ref() {
        let first: String = block
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        lines.push(format!("- the user said: {first}"));
    }
    Ok(format!("## Critical Context\n{}", lines.join("\n")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_fact_survives_five_compressions() {
    let fresh = super::common::fresh_session("api:lineage").await;
    let (store, first_id) = (fresh.store.clone(), fresh.session_id.clone());

    let summariser = Model::with("small", echo_summary);
    let main = Arc::new(Model {
        spec: ModelSpec {
            context_length: 3_000,
            ..ModelSpec::default()
        },
        ..Arc::into_inner(Model::answering("main", "noted")).expect("fresh")
    });
    let settings = CompressionSettings {
        enabled: true,
        threshold_percent: 0.5,
        min_threshold_tokens: 500,
        protect_first_n: 0,
        summary_target_ratio: 0.2,
    };
    let agent = Agent {
        providers: vec![main.clone()],
        tools: ToolRegistry::new(),
        store: store.clone(),
        prompt: PromptBuilder::new("You are terse."),
        compressor: Some(Arc::new(Compressor::new(
            settings,
            Some(summariser.clone()),
            main.clone(),
            Arc::new(Redactor::default()),
        ))),
        todo: None,
        config: TurnConfig {
            memory_flush: false,
            ..TurnConfig::default()
        },
    };
    let mut state = ConversationState::new(fresh.conversation_id, first_id.clone());
    let compressions = Mutex::new(0u32);
    let on_event = |e: TurnEvent| {
        if matches!(e, TurnEvent::Compressed(_)) {
            *compressions.lock().expect("lock") += 1;
        }
    };
    let cancel = CancellationToken::new();
    let mut turn = 0;
    while *compressions.lock().expect("lock") < 5 {
        turn += 1;
        assert!(turn < 60, "five compressions should not take 60 turns");
        let text = if turn == 1 {
            format!("My locker code is 4417. {}", long(1_500))
        } else {
            format!("Turn {turn}: {}", long(1_500))
        };
        agent
            .run_turn(&mut state, &text, &on_event, &cancel)
            .await
            .expect("turn");
    }

    let asked = summariser.asked();
    assert_eq!(asked.len(), 5, "one summary per compression");
    let first_request = asked[0].messages[0].content.clone().unwrap_or_default();
    assert!(
        first_request.contains("My locker code is 4417"),
        "the first summary reads the turn itself"
    );
    for (n, request) in asked.iter().enumerate().skip(1) {
        let text = request.messages[0].content.clone().unwrap_or_default();
        let (earlier, _) = text
            .split_once("NEW TURNS SINCE THEN:")
            .expect("an update request");
        assert!(
            earlier.contains("the user said: My locker code is 4417"),
            "summary request {} lost the fact: {earlier}",
            n + 1
        );
    }

    // Five rotations, each linked to the one before, back to the first session.
    let lineage = store.lineage(&state.session_id).await.expect("lineage");
    assert_eq!(lineage.len(), 6, "{lineage:?}");
    assert_eq!(lineage[0].id, first_id);
    assert_eq!(lineage.last().map(|s| s.compression_count), Some(5));
    assert!(
        lineage[..5]
            .iter()
            .all(|s| s.end_reason.as_deref() == Some("compression"))
    );

    store.sync_search_index().await.expect("index");
    let hits = store
        .search(&SearchQuery {
            text: "locker 4417".into(),
            ..SearchQuery::default()
        })
        .await
        .expect("search");
    assert!(hits.iter().any(|h| h.session_id == first_id), "{hits:?}");
    assert!(
        hits.iter().all(|h| h.root_session_id == first_id),
        "{hits:?}"
    );
}
