//! Properties over random transcripts: whatever the shape, a compressed list is accepted by
//! both providers (alternation, tool pairs), keeps every call's arguments valid JSON, keeps the
//! newest user message verbatim, carries exactly one summary, and is smaller than its input.

use std::collections::HashSet;

use agent_core::agent::estimate;
use proptest::prelude::*;

use super::*;

/// One user message and the assistant's reaction to it.
#[derive(Debug, Clone)]
struct Exchange {
    user_len: usize,
    image: bool,
    /// Tool rounds; each is a list of (argument length, result length, duplicate result).
    rounds: Vec<Vec<(usize, usize, bool)>>,
    answer_len: usize,
}

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        1usize..2_000,
        prop::bool::weighted(0.1),
        prop::collection::vec(
            prop::collection::vec((0usize..1_500, 0usize..3_000, any::<bool>()), 1..4),
            0..4,
        ),
        0usize..2_500,
    )
        .prop_map(|(user_len, image, rounds, answer_len)| Exchange {
            user_len,
            image,
            rounds,
            answer_len,
        })
}

/// A valid transcript: exchanges, then possibly a newest user message not yet answered, or a
/// turn stopped after tool results.
fn transcript(exchanges: &[Exchange], ending: u8) -> Vec<ChatMessage> {
    let mut out = Vec::new();
    let mut id = 0;
    let count = exchanges.len();
    for (n, ex) in exchanges.iter().enumerate() {
        let mut text = format!("question {n}: {}", long(ex.user_len));
        if ex.image {
            text.push_str(&format!(" data:image/png;base64,{}", "Q".repeat(4_000)));
        }
        out.push(u(&text));
        let open_turn = n + 1 == count && ending == 1;
        for round in &ex.rounds {
            let mut list = Vec::new();
            for (args_len, _, _) in round {
                id += 1;
                list.push((
                    format!("call_{id}"),
                    "search".to_owned(),
                    serde_json::json!({ "q": long(*args_len) }).to_string(),
                ));
            }
            out.push(ChatMessage {
                content: None,
                tool_calls: list
                    .iter()
                    .map(|(id, name, args)| ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: args.clone(),
                    })
                    .collect(),
                ..a("")
            });
            for ((call_id, _, _), (_, result_len, duplicate)) in list.iter().zip(round) {
                let content = if *duplicate {
                    "the same result every time".repeat(20)
                } else {
                    format!("{call_id}: {}", long(*result_len))
                };
                out.push(tool(call_id, &content));
            }
        }
        if !open_turn || ex.rounds.is_empty() {
            out.push(a(&format!("answer {n}: {}", long(ex.answer_len))));
        }
    }
    if ending == 2 {
        out.push(u("the newest question, verbatim"));
    }
    out
}

/// Every tool result sits in the block right after its call; every call is answered once.
fn openai_valid(messages: &[ChatMessage]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let Some(pos) = open.iter().position(|o| *o == id) else {
                    return Err(format!("message {i}: result {id} without an open call"));
                };
                open.remove(pos);
            }
            _ => {
                if !open.is_empty() {
                    return Err(format!("message {i}: calls {open:?} left unanswered"));
                }
                open = m.tool_calls.iter().map(|c| c.id.clone()).collect();
            }
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls {open:?} unanswered at the end"))
    }
}

/// User side first, then strictly alternating once consecutive tool results are merged (as the
/// Anthropic provider sends them, in one user turn).
fn anthropic_valid(messages: &[ChatMessage]) -> Result<(), String> {
    let mut last: Option<Role> = None;
    for (i, m) in messages.iter().enumerate() {
        let side = if m.role == Role::Assistant {
            Role::Assistant
        } else {
            Role::User
        };
        if m.role == Role::Tool && i > 0 && messages[i - 1].role == Role::Tool {
            continue;
        }
        if last.is_none() && side != Role::User {
            return Err("opens on the assistant side".into());
        }
        if last == Some(side) {
            return Err(format!("message {i}: two {side:?} turns in a row"));
        }
        last = Some(side);
    }
    Ok(())
}

fn check(input: &[ChatMessage], out: &[ChatMessage]) -> Result<(), String> {
    openai_valid(out)?;
    anthropic_valid(out)?;
    for call in out.iter().flat_map(|m| &m.tool_calls) {
        serde_json::from_str::<serde_json::Value>(&call.arguments)
            .map_err(|e| format!("call {} has invalid JSON arguments: {e}", call.id))?;
    }
    let newest = input
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(|m| m.content.clone())
        .unwrap_or_default();
    if !out
        .iter()
        .any(|m| m.role == Role::User && m.content.as_deref().is_some_and(|c| c.ends_with(&newest)))
    {
        return Err("the newest user message is not kept verbatim".into());
    }
    let summaries = out
        .iter()
        .filter(|m| {
            m.content
                .as_deref()
                .is_some_and(|c| c.contains("[CONTEXT SUMMARY]"))
        })
        .count();
    if summaries != 1 {
        return Err(format!("{summaries} summary messages"));
    }
    let ids: HashSet<&str> = out
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| c.id.as_str())
        .collect();
    if out.iter().filter(|m| m.role == Role::Tool).count() != ids.len() {
        return Err("results and calls do not pair up".into());
    }
    if estimate::messages(out) >= estimate::messages(input) {
        return Err("the output is not smaller".into());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn compressed_transcripts_stay_valid_and_smaller(
        exchanges in prop::collection::vec(exchange(), 1..10),
        ending in 0u8..3,
        protect_first_n in 0usize..5,
        tail in 10u64..3_000,
        summary_len in 1usize..4_000,
    ) {
        let input = transcript(&exchanges, ending);
        prop_assert!(openai_valid(&input).is_ok() && anthropic_valid(&input).is_ok(), "generator: {:?}", openai_valid(&input));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let summary = long(summary_len);
        let model = Model::with("main", move |_| Ok(summary.clone()));
        let out = runtime.block_on(
            compressor(settings(protect_first_n, tail), model)
                .compress(&input, CONTEXT, false, None, None, &CancellationToken::new()),
        ).expect("not cancelled");
        if let Some(out) = out
            && let Err(why) = check(&input, &out.messages)
        {
            prop_assert!(false, "{why}\ninput: {}\noutput: {}", shape(&input), shape(&out.messages));
        }
    }
}

#[test]
fn the_generator_produces_compressible_transcripts() {
    // The property above would pass vacuously if nothing ever compressed.
    let ex = Exchange {
        user_len: 1_500,
        image: false,
        rounds: vec![vec![(100, 2_000, false)]],
        answer_len: 2_000,
    };
    let input = transcript(&[ex.clone(), ex.clone(), ex], 2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = runtime
        .block_on(
            compressor(settings(3, 100), Model::answering("main", "short")).compress(
                &input,
                CONTEXT,
                false,
                None,
                None,
                &CancellationToken::new(),
            ),
        )
        .expect("not cancelled")
        .expect("compressed");
    assert_eq!(check(&input, &out.messages), Ok(()));
}
