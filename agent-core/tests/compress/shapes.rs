//! The table of transcripts: each shape with the exact structure compression must produce.

use agent_core::compress::assemble::{STUB_RESULT, sanitize_tool_pairs};
use agent_core::compress::boundary;
use agent_core::compress::prune::{DUPLICATE_OUTPUT, IMAGE_REMOVED};
use agent_core::compress::{END_MARKER, SUMMARY_PREFIX};

use super::*;

async fn run(
    messages: &[ChatMessage],
    protect_first_n: usize,
    tail: u64,
) -> (Option<agent_core::compress::Compacted>, Arc<Model>) {
    let model = Model::answering("main", "Everything so far: the user is testing.");
    let out = compressor(settings(protect_first_n, tail), model.clone())
        .compress(
            messages,
            CONTEXT,
            false,
            None,
            None,
            &CancellationToken::new(),
        )
        .await
        .expect("not cancelled");
    (out, model)
}

#[tokio::test]
async fn a_cut_inside_a_tool_pair_moves_to_the_call_and_both_neighbours_block() {
    // The tail budget reaches back into the tool result; the call comes with it. Head ends
    // on a user message and the tail starts with the assistant's call: no role fits between,
    // so the summary is merged into the call message.
    let messages = vec![
        u("hi"),
        a("hello"),
        u("first question"),
        a(&long(3000)),
        u("second question"),
        a(&long(3000)),
        calls(&[("c1", "clock", "{}")]),
        tool("c1", &long(1400)),
        a("it is noon"),
        u("thanks, and now?"),
    ];
    let (out, _) = run(&messages, 3, 200).await;
    let out = out.expect("compressed");
    assert_eq!(shape(&out.messages), "u a u cS t a u");
    let merged = &out.messages[3];
    assert!(
        merged
            .content
            .as_deref()
            .is_some_and(|c| c.starts_with(SUMMARY_PREFIX) && c.ends_with(END_MARKER))
    );
    assert_eq!(merged.tool_calls[0].id, "c1");
    assert_eq!(out.messages[4].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(out.summarised, 3);
    assert!(out.after_tokens < out.before_tokens);
}

#[tokio::test]
async fn the_newest_user_message_stays_in_the_tail_however_far_back() {
    let messages = vec![
        u("hi"),
        a("hello"),
        u("set up the project"),
        a(&long(4000)),
        u("now run every check"),
        calls(&[("c1", "check", r#"{"n":1}"#)]),
        tool("c1", &long(900)),
        calls(&[("c2", "check", r#"{"n":2}"#)]),
        tool("c2", &long(900)),
        calls(&[("c3", "check", r#"{"n":3}"#)]),
        tool("c3", &long(900)),
    ];
    let (out, _) = run(&messages, 3, 100).await;
    let out = out.expect("compressed");
    assert_eq!(shape(&out.messages), "u a u aS u c t c t c t");
    assert_eq!(
        out.messages[4].content.as_deref(),
        Some("now run every check")
    );
}

#[tokio::test]
async fn one_huge_message_in_the_middle_is_replaced() {
    let messages = vec![
        u("hi"),
        a("hello"),
        u("summarise this"),
        a(&long(40_000)),
        u("shorter please"),
        a("ok"),
        u("thanks"),
    ];
    let (out, model) = run(&messages, 3, 30).await;
    let out = out.expect("compressed");
    assert_eq!(shape(&out.messages), "u a u aS u a u");
    assert!(
        out.before_tokens > 10_000 && out.after_tokens < 1_000,
        "{out:?}"
    );
    assert_eq!(model.asked().len(), 1);
}

#[tokio::test]
async fn a_huge_newest_exchange_cannot_be_compressed() {
    // The 3-message floor keeps the huge answer in the tail: nothing is left to summarise.
    let messages = vec![
        u("hi"),
        a("hello"),
        u("write it all"),
        a(&long(40_000)),
        u("more"),
    ];
    let (out, model) = run(&messages, 3, 30).await;
    assert!(out.is_none());
    assert!(
        model.asked().is_empty(),
        "no summary call when there is no middle"
    );
}

#[tokio::test]
async fn head_ending_on_assistant_and_tail_on_user_merges_into_the_user_message() {
    let messages = vec![
        u("hi"),
        a(&long(2000)),
        u(&long(3000)),
        a(&long(3000)),
        u("the newest question"),
        calls(&[("c1", "clock", "{}")]),
        tool("c1", "noon"),
    ];
    let (out, _) = run(&messages, 2, 5).await;
    let out = out.expect("compressed");
    assert_eq!(shape(&out.messages), "u a uS c t");
    let last = out.messages[2].content.as_deref().unwrap_or("");
    assert!(last.starts_with(SUMMARY_PREFIX), "{last}");
    assert!(
        last.ends_with("the newest question"),
        "the user's words stay verbatim: {last}"
    );
}

#[tokio::test]
async fn without_a_head_the_summary_opens_on_the_user_side() {
    let messages = vec![
        u(&long(3000)),
        a(&long(3000)),
        u(&long(3000)),
        a("short answer"),
        u("newest"),
        a("reply"),
    ];
    let (out, _) = run(&messages, 0, 10).await;
    let out = out.expect("compressed");
    // The tail starts on the assistant side, so the summary is a user message, first.
    assert_eq!(shape(&out.messages), "uS a u a");
}

#[tokio::test]
async fn tool_heavy_middles_are_pruned_before_the_summariser_sees_them() {
    let same = long(600);
    let big_args = format!(r#"{{"path":"/srv/a.txt","content":"{}"}}"#, long(2000));
    let b_text = format!("line one of b\n{}", long(900));
    let messages = vec![
        u("hi"),
        a("hello"),
        u("read the files and write one"),
        calls(&[("c1", "read_file", r#"{"path":"/srv/a.txt"}"#)]),
        tool("c1", &same),
        calls(&[("c4", "read_file", r#"{"path":"/srv/b.txt"}"#)]),
        tool("c4", &b_text),
        calls(&[("c2", "read_file", r#"{"path":"/srv/a.txt"}"#)]),
        tool("c2", &same),
        calls(&[("c3", "write_file", &big_args)]),
        tool("c3", "written"),
        calls(&[("c5", "clock", "{}")]),
        tool("c5", "noon"),
        a("done"),
        u("what next?"),
    ];
    let (out, model) = run(&messages, 3, 10).await;
    assert_eq!(shape(&out.expect("compressed").messages), "u a u cS t a u");
    let asked = model.asked();
    let transcript = asked[0].messages[0].content.clone().unwrap_or_default();
    assert_eq!(
        transcript.matches(DUPLICATE_OUTPUT).count(),
        1,
        "{transcript}"
    );
    assert!(
        transcript.contains("[read_file] {\"path\":\"/srv/a.txt\"} → lorem ipsum"),
        "long results become one line: {transcript}"
    );
    let b_line = format!(
        "[read_file] {{\"path\":\"/srv/b.txt\"}} → line one of b ({} chars)",
        b_text.chars().count()
    );
    assert!(transcript.contains(&b_line), "{transcript}");
    assert!(
        !transcript.contains(&long(300)),
        "no long output reaches the summariser"
    );
    let args_line = transcript
        .lines()
        .find(|l| l.starts_with("[assistant called write_file]"))
        .expect("write_file call");
    let args = args_line.trim_start_matches("[assistant called write_file] ");
    let parsed: serde_json::Value = serde_json::from_str(args).expect("arguments stay valid JSON");
    assert_eq!(parsed["path"], "/srv/a.txt");
    assert!(args.len() < 400, "{args}");
}

#[tokio::test]
async fn images_are_stripped_before_summarising() {
    let image = format!("data:image/png;base64,{}", "A".repeat(20_000));
    let messages = vec![
        u("hi"),
        a("hello"),
        u("look"),
        u(&format!("here is a screenshot {image} of the bug")),
        a(&long(2000)),
        u("and now?"),
        a("fixed"),
        u("thanks"),
    ];
    let (out, model) = run(&messages, 3, 10).await;
    assert!(out.is_some());
    let transcript = model.asked()[0].messages[0]
        .content
        .clone()
        .unwrap_or_default();
    assert!(
        transcript.contains(&format!("here is a screenshot {IMAGE_REMOVED} of the bug")),
        "{transcript}"
    );
    assert!(!transcript.contains("AAAAAAAAAA"));
}

#[test]
fn orphan_results_are_dropped_and_missing_results_stubbed() {
    let messages = vec![
        u("hi"),
        tool("gone", "a result whose call was summarised"),
        calls(&[("c1", "clock", "{}"), ("c2", "todo", "{}")]),
        tool("c2", "listed"),
        a("done"),
    ];
    let out = sanitize_tool_pairs(messages);
    assert_eq!(shape(&out), "u c t t a");
    assert_eq!(out[2].tool_call_id.as_deref(), Some("c2"));
    assert_eq!(out[3].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(out[3].content.as_deref(), Some(STUB_RESULT));
}

#[test]
fn boundaries_follow_the_budget_soft_cap_and_floor() {
    // Six messages of ~29 tokens (100 chars + framing).
    let m = |i: usize| {
        if i.is_multiple_of(2) {
            u(&long(100))
        } else {
            a(&long(100))
        }
    };
    let messages: Vec<ChatMessage> = (0..10).map(m).collect();
    // Budget 60: two fit, the floor takes a third.
    assert_eq!(boundary::find(&messages, 2, 60).tail_start, 7);
    // Budget 100: three fit (87), a fourth would make 116 ≤ 150 (soft cap): taken.
    assert_eq!(boundary::find(&messages, 2, 100).tail_start, 6);
    // Budget 70: two fit (58); the floor adds a third (87); a fourth (116) > 105: not taken.
    assert_eq!(boundary::find(&messages, 2, 70).tail_start, 7);
    // Head alignment: a head ending inside a tool block takes the results.
    let with_tools = vec![
        u("q"),
        calls(&[("c", "clock", "{}")]),
        tool("c", "x"),
        a("y"),
        u("z"),
    ];
    assert_eq!(boundary::find(&with_tools, 2, 1).head_end, 3);
}
