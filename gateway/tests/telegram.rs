//! Telegram through the real `iris` binary: teloxide long-polls the fake Bot API, the turns run
//! against the fake model, replies come back as `sendMessage` calls.
//!
//! - a DM conversation over two messages, a duplicated update answered once, the offset
//!   confirmed, typing shown, commands published, `/start` greeted without a model call;
//! - a stranger gets a DM pairing code the operator approves with `iris pairing approve`; in a
//!   group, only allowed users' messages that address the bot are answered, threaded, except
//!   in an open group;
//! - SIGKILL in the middle of a turn: after the restart the message is answered exactly once;
//! - photos (an album as one turn, images to a model that sees them), voice and documents saved
//!   and noted; album parts and split messages joined in webhook mode too.

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
open_groups = [-3003]
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

const WEBHOOK_SECRET: &str = "hook-secret_0123456789";

/// Iris in webhook mode, with [`WEBHOOK_SECRET`].
async fn iris_webhook(home: &std::path::Path) -> Iris {
    let config = std::fs::read_to_string(home.join("iris.toml")).expect("config");
    std::fs::write(
        home.join("iris.toml"),
        config.replace(
            "[telegram]\n",
            "[telegram]\nmode = \"webhook\"\nwebhook_url = \"https://iris.example.com/telegram/webhook\"\n",
        ),
    )
    .expect("config");
    start(
        home,
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TELEGRAM_WEBHOOK_SECRET", WEBHOOK_SECRET),
        ],
    )
    .await
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
    binary::sent_at_least(count, home, || telegram.sent_texts(chat)).await
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
async fn strangers_get_a_pairing_code_and_groups_answer_only_when_addressed() {
    let (model, telegram, home) = fakes(vec![
        Reply::text("Group answer."),
        Reply::text("Open group answer."),
        Reply::text("Paired answer."),
    ])
    .await;
    let _iris = iris(home.path()).await;

    // A stranger in a DM gets a code (and nothing runs); asking again soon gets nothing.
    telegram.push_text(&From::dm(99), "let me in");
    let sent = replies(&telegram, 99, 1, home.path()).await;
    let code = sent[0]
        .split("approve telegram ")
        .nth(1)
        .and_then(|rest| rest.get(..8))
        .expect("a code in the reply")
        .to_owned();
    assert!(
        code.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()),
        "{code}"
    );
    telegram.push_text(&From::dm(99), "please?");

    let group = From::group(-1_005, 7);
    telegram.push_text(&group, "just chatting among ourselves");
    let mut stranger_in_group = From::group(-1_005, 555);
    stranger_in_group.username = None;
    telegram.push_text(&stranger_in_group, &format!("@{BOT_USERNAME} me too"));
    telegram.push_text(&group, &format!("@{BOT_USERNAME} what's up?"));
    let sent = replies(&telegram, -1_005, 1, home.path()).await;
    assert_eq!(sent, ["Group answer."]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        telegram.sent_texts(99).len(),
        1,
        "one code per user per 10 minutes"
    );
    assert_eq!(
        telegram.sent_texts(-1_005).len(),
        1,
        "strangers in groups get nothing"
    );
    assert_eq!(
        model.requests().len(),
        1,
        "only the addressed, allowed message ran"
    );
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
    let log = binary::log(home.path());
    assert!(log.contains("not in telegram.allowed_users"), "{log}");
    assert!(!log.contains(&code), "the code is not logged");

    // An open group answers everyone, addressed or not.
    telegram.push_text(&From::group(-3_003, 777), "anyone here?");
    let sent = replies(&telegram, -3_003, 1, home.path()).await;
    assert_eq!(sent, ["Open group answer."]);

    // A wrong code is refused; the right one (any case) pairs the user.
    let approve = |code: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_iris"))
            .args(["pairing", "approve", "telegram", code])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("IRIS_HOME", home.path())
            .output()
            .expect("iris pairing")
    };
    let wrong = approve("AAAA2222");
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("no pending telegram pairing request"));
    let right = approve(&code.to_lowercase());
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    assert!(String::from_utf8_lossy(&right.stdout).contains("@user99"));
    telegram.push_text(&From::dm(99), "hello now");
    let sent = replies(&telegram, 99, 2, home.path()).await;
    assert_eq!(sent[1], "Paired answer.");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_formatting_rate_limits_and_conflicts_lose_nothing() {
    let (_model, telegram, home) = fakes(vec![
        Reply::text("**bold** answer"),
        Reply::text("after the rate limit"),
        Reply::text("after the conflict"),
    ])
    .await;
    let _iris = iris(home.path()).await;

    telegram.reject_entities(true);
    telegram.push_text(&From::dm(42), "one");
    let sent = replies(&telegram, 42, 1, home.path()).await;
    assert_eq!(sent, ["**bold** answer"], "resent as the plain Markdown");
    telegram.reject_entities(false);

    telegram.rate_limit(3, 1);
    telegram.push_text(&From::dm(42), "two");
    let sent = replies(&telegram, 42, 2, home.path()).await;
    assert_eq!(sent[1], "after the rate limit");
    let limited = telegram
        .calls("sendMessage")
        .iter()
        .filter(|c| c.params["_ok"] == false)
        .count();
    assert!(limited >= 3, "the 429s were met ({limited} refused sends)");

    telegram.conflict(2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    telegram.push_text(&From::dm(42), "three");
    let sent = replies(&telegram, 42, 3, home.path()).await;
    assert_eq!(sent[2], "after the conflict");
    assert_eq!(telegram.sent_texts(42).len(), 3);
    let log = binary::log(home.path());
    assert!(
        log.contains("409 Conflict"),
        "the conflict is reported: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_arrives_in_parts_and_topics_are_separate_conversations() {
    let mut long = String::new();
    for i in 0..14 {
        long.push_str(&format!(
            "## Step {i}\n\n{}\n\n```rust\n",
            "Some prose here. ".repeat(30)
        ));
        for j in 0..10 {
            long.push_str(&format!("let value_{j} = compute({i}, {j});\n"));
        }
        long.push_str("```\n\n");
    }
    assert!(long.chars().count() > 10_000);
    let (model, telegram, home) = fakes(vec![
        Reply::text(long.clone()),
        Reply::text("topic two answer"),
    ])
    .await;
    let _iris = iris(home.path()).await;

    let mut topic_one = From::group(-2_002, 42);
    topic_one.thread_id = Some(11);
    let mut topic_two = topic_one.clone();
    topic_two.thread_id = Some(22);
    telegram.push_text(&topic_one, &format!("@{BOT_USERNAME} write it all"));
    // Wait for the whole first reply before asking in the other topic.
    let mut parts = Vec::new();
    for _ in 0..200 {
        parts = telegram.sent_texts(-2_002);
        if parts.last().is_some_and(|p| {
            let n = parts.len();
            p.ends_with(&format!("({n}/{n})"))
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for (i, part) in parts.iter().enumerate() {
        assert!(part.encode_utf16().count() <= 4096, "part {i} fits");
        assert!(
            part.ends_with(&format!("({}/{})", i + 1, parts.len())),
            "part {i} marker"
        );
        assert_eq!(
            part.matches("<pre").count(),
            part.matches("</pre>").count(),
            "code blocks whole in part {i}"
        );
    }
    let threads: Vec<i64> = telegram
        .calls("sendMessage")
        .iter()
        .filter_map(|c| c.params["message_thread_id"].as_i64())
        .collect();
    assert!(
        threads.iter().all(|t| *t == 11),
        "sent into topic 11: {threads:?}"
    );

    telegram.push_text(&topic_two, &format!("@{BOT_USERNAME} hello"));
    let sent = replies(&telegram, -2_002, parts.len() + 1, home.path()).await;
    assert_eq!(sent.last().map(String::as_str), Some("topic two answer"));
    let second = model.requests()[1].body["messages"].to_string();
    assert!(
        !second.contains("write it all"),
        "topic two does not see topic one: {second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_mode_registers_checks_the_secret_and_runs_each_update_once() {
    let (model, telegram, home) = fakes(vec![Reply::text("Webhook answer.")]).await;
    let secret = WEBHOOK_SECRET;
    let iris = iris_webhook(home.path()).await;
    assert_eq!(
        telegram.webhook().as_deref(),
        Some("https://iris.example.com/telegram/webhook")
    );
    let registered = telegram.calls("setWebhook");
    assert_eq!(registered[0].params["secret_token"], secret);
    assert!(
        telegram.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );

    let url = format!("{}/telegram/webhook", iris.base);
    let client = reqwest::Client::new();
    let update = telegram.text_update(&From::dm(42), "via webhook");
    let post = |secret: Option<&str>, body: String| {
        let mut request = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        request.send()
    };
    let refused = post(Some("wrong"), update.to_string()).await.expect("post");
    assert_eq!(refused.status().as_u16(), 401);
    let missing = post(None, update.to_string()).await.expect("post");
    assert_eq!(missing.status().as_u16(), 401);
    let garbage = post(Some(secret), "{\"nope\":1}".into())
        .await
        .expect("post");
    assert_eq!(garbage.status().as_u16(), 400);
    assert!(model.requests().is_empty(), "nothing ran yet");

    for _ in 0..2 {
        let accepted = post(Some(secret), update.to_string()).await.expect("post");
        assert_eq!(
            accepted.status().as_u16(),
            200,
            "Telegram may deliver twice"
        );
    }
    let sent = replies(&telegram, 42, 1, home.path()).await;
    assert_eq!(sent, ["Webhook answer."]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        telegram.sent_texts(42).len(),
        1,
        "the redelivered update ran once"
    );
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_a_turn_runs_is_acknowledged_then_answered() {
    let (_model, telegram, home) = fakes(vec![
        Reply::text("slow first answer").delay(Duration::from_millis(1_500)),
        Reply::text("second answer"),
    ])
    .await;
    let _iris = iris(home.path()).await;
    telegram.push_text(&From::dm(42), "first");
    tokio::time::sleep(Duration::from_millis(500)).await;
    telegram.push_text(&From::dm(42), "second");
    let sent = replies(&telegram, 42, 3, home.path()).await;
    assert!(
        sent[0].starts_with("Got it"),
        "queued acknowledgement first: {sent:?}"
    );
    assert_eq!(&sent[1..], ["slow first answer", "second answer"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_message_the_client_split_is_one_turn() {
    let (model, telegram, home) =
        fakes(vec![Reply::text("read it all"), Reply::text("short one")]).await;
    let _iris = iris(home.path()).await;
    let first = format!("{} END-OF-PART-ONE", "word ".repeat(810));
    assert!(first.len() >= 4000 && first.len() <= 4096);
    telegram.push_text(&From::dm(42), &first);
    // The second part arrives a moment later, in another getUpdates batch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    telegram.push_text(&From::dm(42), "PART-TWO tail");
    let sent = replies(&telegram, 42, 1, home.path()).await;
    assert_eq!(sent, ["read it all"]);
    telegram.push_text(&From::dm(42), "unrelated");
    replies(&telegram, 42, 2, home.path()).await;
    let asked = model.requests()[0].body["messages"].to_string();
    assert!(
        asked.contains("END-OF-PART-ONE") && asked.contains("PART-TWO tail"),
        "one turn with both parts"
    );
    assert_eq!(model.requests().len(), 2, "two turns, not three");
}

/// A photo part of album `album` (file `id`, `bytes` served by the fake).
fn photo(id: &str, bytes: usize, album: &str) -> serde_json::Value {
    serde_json::json!({
        "photo": [
            {"file_id": format!("{id}-small"), "file_unique_id": format!("{id}s"), "width": 90, "height": 60, "file_size": 10},
            {"file_id": id, "file_unique_id": format!("{id}u"), "width": 1280, "height": 720, "file_size": bytes},
        ],
        "media_group_id": album,
    })
}

/// Sets `[llm] vision` in the home's config.
fn with_vision(home: &std::path::Path, on: bool) {
    let path = home.join("iris.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    let config = config.replace(
        "model = \"main\"\n",
        &format!("model = \"main\"\nvision = {on}\n"),
    );
    std::fs::write(path, config).expect("config");
}

/// The image parts of the last user message of the `n`-th model request.
fn image_urls(model: &FakeOpenAi, n: usize) -> Vec<String> {
    let messages = &model.requests()[n].body["messages"];
    let user = messages
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .cloned()
        .unwrap_or_default();
    user["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_album_is_one_turn_with_its_images_and_files_are_saved_and_noted() {
    let (model, telegram, home) = fakes(vec![
        Reply::text("Two photos."),
        Reply::text("Heard it."),
        Reply::text("Read it."),
    ])
    .await;
    with_vision(home.path(), true);
    let _iris = iris(home.path()).await;
    let jpeg = |tag: u8| [0xFF, 0xD8, 0xFF, 0xE0, tag, tag, tag].to_vec();
    telegram.add_file("p1", jpeg(1));
    telegram.add_file("p2", jpeg(2));
    let csv = b"city,temp\nParis,21\n".to_vec();
    telegram.add_file("d1", csv.clone());
    telegram.add_file("v1", b"OggS-voice".to_vec());

    // An album: two messages, the caption on the first.
    let dm = From::dm(42);
    telegram.push_update(telegram.media_update(
        &dm,
        Some("what are these?"),
        photo("p1", 7, "alb-1"),
    ));
    telegram.push_update(telegram.media_update(&dm, None, photo("p2", 7, "alb-1")));
    let sent = replies(&telegram, 42, 1, home.path()).await;
    assert_eq!(sent, ["Two photos."]);
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    assert_eq!(
        image_urls(&model, 0),
        [
            format!("data:image/jpeg;base64,{}", b64(&jpeg(1))),
            format!("data:image/jpeg;base64,{}", b64(&jpeg(2)))
        ],
        "one turn, both images, the largest size of each"
    );
    let saved = home.path().join("media/telegram/42");
    assert_eq!(
        std::fs::read(saved.join("p1u.jpg")).expect("saved"),
        jpeg(1)
    );
    assert!(telegram.calls("getFile").iter().all(|c| {
        !c.params["file_id"]
            .as_str()
            .unwrap_or_default()
            .ends_with("-small")
    }));

    // A voice message, then a text document, then a stranger's photo (never fetched).
    telegram.push_update(telegram.media_update(
        &dm,
        None,
        serde_json::json!({"voice": {"file_id": "v1", "file_unique_id": "vo1", "duration": 3, "mime_type": "audio/ogg", "file_size": 10}}),
    ));
    replies(&telegram, 42, 2, home.path()).await;
    telegram.push_update(telegram.media_update(
        &dm,
        Some("and this table"),
        serde_json::json!({"document": {"file_id": "d1", "file_unique_id": "do1", "file_name": "weather.csv", "mime_type": "text/csv", "file_size": csv.len()}}),
    ));
    telegram.push_update(telegram.media_update(&From::dm(99), None, photo("p9", 7, "alb-9")));
    let sent = replies(&telegram, 42, 3, home.path()).await;
    assert_eq!(&sent[1..], ["Heard it.", "Read it."]);
    let heard = model.requests()[1].body["messages"].to_string();
    assert!(
        heard.contains("[voice message 0:03, audio/ogg, 10 B: media/telegram/42/vo1.ogg]"),
        "{heard}"
    );
    assert!(
        heard.contains(
            "what are these?\\n[photo 1280×720, 7 B: media/telegram/42/p1u.jpg]\\n[photo 1280×720"
        ),
        "the album's notes stay in the history: {heard}"
    );
    assert!(
        image_urls(&model, 1).is_empty(),
        "images go with their own turn only"
    );
    assert!(
        !heard.contains(&b64(&jpeg(1))),
        "no image bytes in the history"
    );
    let read = model.requests()[2].body["messages"].to_string();
    assert!(
        read.contains("and this table\\n[document \\\"weather.csv\\\" text/csv, 19 B: media/telegram/42/do1.csv]\\n```\\ncity,temp\\nParis,21\\n```"),
        "a small text document is read into the message: {read}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        telegram
            .calls("getFile")
            .iter()
            .all(|c| c.params["file_id"] != "p9"),
        "a stranger's file is not downloaded"
    );
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_mode_joins_album_parts_and_split_messages() {
    let (model, telegram, home) = fakes(vec![
        Reply::text("An album."),
        Reply::text("A long message."),
    ])
    .await;
    with_vision(home.path(), false);
    let secret = WEBHOOK_SECRET;
    let iris = iris_webhook(home.path()).await;
    telegram.add_file("p1", vec![0xFF, 0xD8, 1]);
    telegram.add_file("p2", vec![0xFF, 0xD8, 2]);
    let url = format!("{}/telegram/webhook", iris.base);
    let client = reqwest::Client::new();
    let post = |update: serde_json::Value| {
        client
            .post(&url)
            .header("X-Telegram-Bot-Api-Secret-Token", secret)
            .json(&update)
            .send()
    };
    let dm = From::dm(42);
    // The album's parts arrive as two requests at once; both are held until the album is
    // stored, then both answered 200.
    let (a, b) = tokio::join!(
        post(telegram.media_update(&dm, Some("look"), photo("p1", 3, "alb-w"))),
        post(telegram.media_update(&dm, None, photo("p2", 3, "alb-w"))),
    );
    assert_eq!(
        [
            a.expect("post").status().as_u16(),
            b.expect("post").status().as_u16()
        ],
        [200, 200]
    );
    assert_eq!(replies(&telegram, 42, 1, home.path()).await, ["An album."]);
    let asked = model.requests()[0].body["messages"].to_string();
    assert_eq!(asked.matches("[photo 1280×720").count(), 2, "{asked}");
    assert!(
        asked.contains("[2 images attached, not shown: this model does not take images]"),
        "a model without vision is told: {asked}"
    );

    // A long message in two pieces, one request after the other.
    let first = format!("{} END-OF-PART-ONE", "word ".repeat(810));
    let one = post(telegram.text_update(&dm, &first));
    let two = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        post(telegram.text_update(&dm, "PART-TWO tail")).await
    };
    let (one, two) = tokio::join!(one, two);
    assert_eq!(one.expect("post").status().as_u16(), 200);
    assert_eq!(two.expect("post").status().as_u16(), 200);
    let sent = replies(&telegram, 42, 2, home.path()).await;
    assert_eq!(sent[1], "A long message.");
    let asked = model.requests()[1].body["messages"].to_string();
    assert!(asked.contains("END-OF-PART-ONE\\nPART-TWO tail"), "{asked}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(model.requests().len(), 2, "two turns for four updates");
}

/// `/readyz` until `check` says so (or ten seconds pass); the last body.
async fn readiness_until(
    iris: &Iris,
    check: impl Fn(u16, &serde_json::Value) -> bool,
) -> (u16, serde_json::Value) {
    let mut last = (0, serde_json::Value::Null);
    for _ in 0..200 {
        let response = reqwest::get(format!("{}/readyz", iris.base))
            .await
            .expect("readyz");
        let status = response.status().as_u16();
        last = (status, response.json().await.unwrap_or_default());
        if check(last.0, &last.1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_says_when_telegram_is_not_receiving() {
    let (_model, telegram, home) = fakes(vec![Reply::text("ok")]).await;
    let iris = iris(home.path()).await;
    let (status, body) = readiness_until(&iris, |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["checks"]["telegram"], "ok");
    assert_eq!(body["checks"]["store"], "ok");

    // Another poller takes the token: not ready, and the body says why; then ready again.
    telegram.conflict(3);
    telegram.push_text(&From::dm(42), "wake the poll");
    let (status, body) = readiness_until(&iris, |s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    let reason = body["checks"]["telegram"].as_str().unwrap_or_default();
    assert!(reason.contains("409"), "{body}");
    let (status, body) = readiness_until(&iris, |s, _| s == 200).await;
    assert_eq!(status, 200, "ready again once the conflict is over: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_allowlist_and_the_model_and_names_what_needs_a_restart() {
    let (model, telegram, home) = fakes(vec![Reply::text("Now I know you.")]).await;
    let iris = iris(home.path()).await;
    let group = From::group(-1_005, 555);
    telegram.push_text(&group, "@iris_test_bot hello?");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(model.requests().is_empty(), "user 555 is not allowed yet");

    let path = home.path().join("iris.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    let config = config
        .replace(
            "allowed_users = [\"42\", \"@User7\"]",
            "allowed_users = [\"42\", \"555\"]",
        )
        .replace("model = \"main\"", "model = \"other\"")
        .replace(
            "[telegram]",
            "[server]\nshutdown_grace_secs = 7\n\n[telegram]",
        );
    std::fs::write(&path, config).expect("config");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &iris.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let mut log = String::new();
    for _ in 0..100 {
        log = binary::log(home.path());
        if log.contains("configuration reloaded") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        log.contains("configuration reloaded")
            && log.contains("telegram access")
            && log.contains("the agent (models"),
        "{log}"
    );
    let restart = log
        .lines()
        .find(|l| l.contains("need a restart"))
        .unwrap_or_default();
    assert!(
        restart.contains("server") && !restart.contains("llm"),
        "{log}"
    );

    telegram.push_text(&group, "@iris_test_bot and now?");
    let sent = replies(&telegram, -1_005, 1, home.path()).await;
    assert_eq!(sent, ["Now I know you."]);
    assert_eq!(
        model.requests()[0].body["model"],
        "other",
        "the new model answers without a restart"
    );
}
