//! Telegram through the real `iris` binary: teloxide long-polls the fake Bot API, the turns run
//! against the fake model, replies come back as `sendMessage` calls.
//!
//! - a DM conversation over two messages, a duplicated update answered once, the offset
//!   confirmed, typing shown, commands published, `/start` greeted without a model call;
//! - a user outside `allowed_users` refused silently; in a group, only messages that address
//!   the bot are answered, threaded to the message;
//! - SIGKILL in the middle of a turn: after the restart the message is answered exactly once.

use std::time::Duration;

use binary::{Iris, start};
use testkit::Reply;
use testkit::openai::FakeOpenAi;
use testkit::telegram::{BOT_USERNAME, FakeTelegram, From};

#[path = "common/binary.rs"]
mod binary;

const TOKEN: &str = "123456:fake-telegram-token";

fn configure(home: &std::path::Path, model: &FakeOpenAi, telegram: &FakeTelegram) {
    std::fs::write(
        home.join("iris.toml"),
        format!(
            r#"
[llm]
base_url = "{}"
model = "main"

[compression]
enabled = false
memory_flush = false

[telegram]
enabled = true
api_url = "{}"
allowed_users = ["42", "@User7"]
"#,
            model.base_url,
            telegram.api_url()
        ),
    )
    .expect("config");
}

async fn iris(home: &std::path::Path) -> Iris {
    start(home, &[("TELEGRAM_BOT_TOKEN", TOKEN)]).await
}

/// The fake model with `script`, the fake Bot API, and a home configured for both.
async fn fakes(script: Vec<Reply>) -> (FakeOpenAi, FakeTelegram, tempfile::TempDir) {
    let model = FakeOpenAi::start(script).await.expect("model");
    let telegram = FakeTelegram::start(TOKEN).await.expect("telegram");
    let home = tempfile::tempdir().expect("home");
    configure(home.path(), &model, &telegram);
    (model, telegram, home)
}

/// Waits until `chat` has received `count` messages; returns them.
async fn replies(
    telegram: &FakeTelegram,
    chat: i64,
    count: usize,
    home: &std::path::Path,
) -> Vec<String> {
    for _ in 0..200 {
        let sent = telegram.sent_texts(chat);
        if sent.len() >= count {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "chat {chat} got {:?}, expected {count} messages; log:\n{}",
        telegram.sent_texts(chat),
        binary::log(home)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dm_conversation_runs_once_per_message() {
    let (model, telegram, home) = fakes(vec![
        Reply::text("Hello **there**!"),
        Reply::text("Second answer."),
    ])
    .await;
    let _iris = iris(home.path()).await;

    telegram.push_text(&From::dm(42), "/start");
    assert_eq!(replies(&telegram, 42, 1, home.path()).await.len(), 1);
    assert!(model.requests().is_empty(), "/start needs no model call");

    let first = telegram.push_text(&From::dm(42), "hi");
    telegram.duplicate_last_update();
    let sent = replies(&telegram, 42, 2, home.path()).await;
    assert_eq!(
        sent[1], "Hello <b>there</b>!",
        "Markdown arrives as Telegram HTML"
    );
    let second = telegram.push_text(&From::dm(42), "and again");
    let sent = replies(&telegram, 42, 3, home.path()).await;
    assert_eq!(sent[2], "Second answer.");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(telegram.sent_texts(42).len(), 3, "the duplicate ran once");
    assert_eq!(model.requests().len(), 2);
    // The second request carries the first exchange: one conversation.
    let history = model.requests()[1].body["messages"].to_string();
    assert!(
        history.contains("hi") && history.contains("Hello **there**!"),
        "{history}"
    );
    assert!(
        second > first && telegram.confirmed_offset() > second,
        "the batch was confirmed"
    );
    assert!(
        !telegram.calls("sendChatAction").is_empty(),
        "typing was shown"
    );
    assert_eq!(telegram.calls("setMyCommands").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_refused_and_groups_answer_only_when_addressed() {
    let (model, telegram, home) = fakes(vec![Reply::text("Group answer.")]).await;
    let _iris = iris(home.path()).await;

    telegram.push_text(&From::dm(99), "let me in");
    let group = From::group(-1_005, 7);
    telegram.push_text(&group, "just chatting among ourselves");
    let addressed = telegram.push_text(&group, &format!("@{BOT_USERNAME} what's up?"));
    let sent = replies(&telegram, -1_005, 1, home.path()).await;
    assert_eq!(sent, ["Group answer."]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        telegram.sent_texts(99).is_empty(),
        "a stranger gets nothing"
    );
    assert_eq!(model.requests().len(), 1, "only the addressed message ran");
    let call = telegram
        .calls("sendMessage")
        .into_iter()
        .find(|c| c.params["chat_id"] == -1_005)
        .expect("group send");
    assert!(
        call.params["reply_parameters"]["message_id"].is_i64(),
        "threaded to the user's message: {}",
        call.params
    );
    assert!(addressed > 0);
    let log = binary::log(home.path());
    assert!(log.contains("not in telegram.allowed_users"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_turn_answers_exactly_once() {
    let (model, telegram, home) = fakes(vec![
        Reply::hang(),
        Reply::text("Answer after the restart."),
    ])
    .await;
    let first = iris(home.path()).await;
    telegram.push_text(&From::dm(42), "are you there?");
    for _ in 0..200 {
        if !model.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(model.requests().len(), 1, "the turn is in flight");
    drop(first); // SIGKILL
    let _second = iris(home.path()).await;
    let sent = replies(&telegram, 42, 1, home.path()).await;
    assert_eq!(sent, ["Answer after the restart."]);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(telegram.sent_texts(42).len(), 1, "no second reply");
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert_eq!(
        asked[1].matches("are you there?").count(),
        1,
        "the user's message is in the history once: {}",
        asked[1]
    );
}
