//! The summary calls: the update of a previous summary, the focus topic, the compression model
//! falling back to the main model once, the cooldown, the honest fallback digest, and secrets
//! redacted from what the summariser reads and from what it writes.

use agent_core::compress::summary::{FALLBACK_NOTE, SECTIONS, budget};

use super::*;

fn conversation(newest: &str) -> Vec<ChatMessage> {
    vec![
        u("hi"),
        a("hello"),
        u("let us plan the trip"),
        a(&long(3000)),
        u("the budget is 900 euros"),
        a(&long(3000)),
        u("ok"),
        a("noted"),
        u(newest),
    ]
}

async fn compress_with(
    c: &Compressor,
    messages: &[ChatMessage],
    focus: Option<&str>,
) -> agent_core::compress::Compacted {
    c.compress(
        messages,
        CONTEXT,
        false,
        focus,
        None,
        &CancellationToken::new(),
    )
    .await
    .expect("not cancelled")
    .expect("compressed")
}

#[test]
fn the_budget_follows_the_formula() {
    assert_eq!(budget(1_000, 200_000), 2_000, "floor");
    assert_eq!(budget(40_000, 200_000), 8_000, "a fifth of the middle");
    assert_eq!(budget(100_000, 200_000), 10_000, "5 % of the context");
    assert_eq!(budget(1_000_000, 1_000_000), 12_000, "cap");
}

#[tokio::test]
async fn the_template_and_focus_are_asked_for() {
    let model = Model::answering("main", "## Active Task\nplan the trip");
    let c = compressor(settings(3, 10), model.clone());
    compress_with(&c, &conversation("book it"), Some("the budget")).await;
    let asked = model.asked();
    let system = asked[0].system.clone().unwrap_or_default();
    for section in SECTIONS {
        assert!(
            system.contains(&format!("## {section}")),
            "{section} missing: {system}"
        );
    }
    assert!(system.contains("Focus topic: the budget"), "{system}");
    assert_eq!(asked[0].max_tokens, 2_000);
}

#[tokio::test]
async fn a_previous_summary_is_updated_not_summarised_again() {
    let model = Model::answering("main", "FIRST SUMMARY: budget 900 euros");
    let c = compressor(settings(3, 10), model.clone());
    let first = compress_with(&c, &conversation("book it"), None).await;
    let mut next = first.messages.clone();
    next.push(a(&long(3000)));
    next.push(u("and the hotel?"));
    next.push(a(&long(3000)));
    next.push(u("newest"));
    compress_with(&c, &next, None).await;
    let asked = model.asked();
    let second = asked[1].messages[0].content.clone().unwrap_or_default();
    assert!(
        second.starts_with("EARLIER SUMMARY:\nFIRST SUMMARY: budget 900 euros"),
        "{second}"
    );
    assert!(
        !second.contains("[CONTEXT SUMMARY]"),
        "the old summary is not re-read as conversation"
    );
    assert!(
        asked[1]
            .system
            .as_deref()
            .is_some_and(|s| s.contains("UPDATE it"))
    );
}

#[tokio::test]
async fn the_main_model_stands_in_once_then_the_digest_says_what_it_is() {
    let small = Model::failing("small", ErrorClass::ServerError);
    let main = Model::failing("main", ErrorClass::Overloaded);
    let c = Compressor::new(
        settings(3, 10),
        Some(small.clone()),
        main.clone(),
        Arc::new(Redactor::default()),
    );
    let out = compress_with(&c, &conversation("book it"), None).await;
    assert_eq!((small.asked().len(), main.asked().len()), (1, 1));
    assert!(out.summary.starts_with(FALLBACK_NOTE), "{}", out.summary);
    assert!(
        out.summary.contains("the budget is 900 euros"),
        "the digest keeps the user's words"
    );
    assert!(
        out.fallback_reason
            .as_deref()
            .is_some_and(|r| r.contains("main is down"))
    );

    // Cooling down: the next compression does not call any model.
    let out = compress_with(&c, &conversation("again"), None).await;
    assert_eq!((small.asked().len(), main.asked().len()), (1, 1));
    assert!(
        out.fallback_reason
            .as_deref()
            .is_some_and(|r| r.contains("cooling down"))
    );
}

#[tokio::test]
async fn the_main_model_summarises_when_the_compression_model_fails() {
    let small = Model::failing("small", ErrorClass::Auth);
    let main = Model::answering("main", "summary by the main model");
    let c = Compressor::new(
        settings(3, 10),
        Some(small.clone()),
        main.clone(),
        Arc::new(Redactor::default()),
    );
    let out = compress_with(&c, &conversation("book it"), None).await;
    assert_eq!(out.summary, "summary by the main model");
    assert!(out.fallback_reason.is_none());
}

#[test]
fn cooldowns_depend_on_the_error() {
    use agent_core::compress::engine::cooldown_for;
    use std::time::Duration;
    assert_eq!(cooldown_for(ErrorClass::RateLimit), Duration::from_secs(30));
    assert_eq!(
        cooldown_for(ErrorClass::ServerError),
        Duration::from_secs(60)
    );
    assert_eq!(cooldown_for(ErrorClass::Auth), Duration::from_secs(600));
}

#[tokio::test]
async fn secrets_are_redacted_before_and_after_summarising() {
    let key = "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
    let model = Model::answering("main", &format!("The user shared the key {key} earlier."));
    let c = compressor(settings(3, 10), model.clone());
    let mut messages = conversation("book it");
    messages[3] = a(&format!("{} use OPENAI_API_KEY={key}", long(3000)));
    let out = compress_with(&c, &messages, None).await;
    let asked = model.asked()[0].messages[0]
        .content
        .clone()
        .unwrap_or_default();
    assert!(
        !asked.contains(key),
        "the summariser never reads the secret"
    );
    assert!(
        !out.summary.contains(key),
        "nor is it stored if the model repeats it"
    );
    assert!(
        out.messages
            .iter()
            .all(|m| !m.content.as_deref().unwrap_or("").contains(key))
    );
}
