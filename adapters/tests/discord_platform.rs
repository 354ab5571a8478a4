//! The Discord adapter through the `Platform` trait, against the fake Discord (real serenity
//! gateway client, real REST): messages arrive normalised and in order, a dropped connection
//! is resumed with nothing lost or repeated, sends are split at 2,000 characters in order across
//! a 429 and never mention anyone, and a failing `/gateway` fails loudly.

#![cfg(feature = "discord")]

use std::sync::Arc;
use std::time::Duration;

use adapters::discord::{DiscordPlatform, DiscordSettings};
use adapters::platform::{Address, Platform};
use testkit::discord::{Author, FakeDiscord};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "fake-discord-token";

fn settings(fake: &FakeDiscord) -> DiscordSettings {
    DiscordSettings {
        token: TOKEN.into(),
        api_url: fake.api_url(),
        allow_bots: false,
        max_file_bytes: 1024,
        shards: 1,
        auto_thread: false,
        reply_as_file_over: 0,
    }
}

/// The adapter running against `fake`, and what it hands over (each stored at once).
async fn running(
    fake: &FakeDiscord,
) -> (
    Arc<DiscordPlatform>,
    mpsc::Receiver<String>,
    CancellationToken,
) {
    let discord = Arc::new(
        DiscordPlatform::connect(settings(fake))
            .await
            .expect("connect"),
    );
    let (tx, mut arrived) = mpsc::channel(8);
    let (texts_tx, texts) = mpsc::channel(64);
    let stop = CancellationToken::new();
    tokio::spawn({
        let discord = discord.clone();
        let stop = stop.clone();
        async move { discord.run(tx, stop).await }
    });
    tokio::spawn(async move {
        while let Some(arrival) = arrived.recv().await {
            let m = &arrival.message;
            let _ = texts_tx
                .send(format!(
                    "{}|{}|{:?}|{}",
                    m.chat, m.text, m.origin, m.addressed
                ))
                .await;
            let _ = arrival.stored.send(Ok(()));
        }
    });
    for _ in 0..200 {
        if fake.sessions().0 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.sessions().0, 1, "identified once");
    (discord, texts, stop)
}

async fn text(texts: &mut mpsc::Receiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(15), texts.recv())
        .await
        .expect("a message in time")
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_and_a_dropped_connection_is_resumed() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let (_discord, mut texts, stop) = running(&fake).await;
    fake.message(&Author::dm(42), "hello", false);
    fake.message(&Author::guild(77, 42), "chatter", false);
    fake.message(&Author::guild(77, 42), "are you there?", true);
    let mut bot = Author::guild(77, 43);
    bot.bot = true;
    fake.message(&bot, "I am a bot", true);
    assert_eq!(
        text(&mut texts).await,
        format!("{}|hello|Private|true", 1_042)
    );
    assert_eq!(text(&mut texts).await, "77|chatter|Group|false");
    assert_eq!(text(&mut texts).await, "77|are you there?|Group|true");

    // The connection drops; what is sent meanwhile is replayed on Resume, once.
    fake.drop_connection();
    fake.message(&Author::dm(42), "while you were away", false);
    assert_eq!(
        text(&mut texts).await,
        "1042|while you were away|Private|true"
    );
    fake.message(&Author::dm(42), "after", false);
    assert_eq!(text(&mut texts).await, "1042|after|Private|true");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), texts.recv())
            .await
            .is_err(),
        "nothing repeated, the bot's message ignored"
    );
    assert_eq!(fake.sessions(), (1, 1), "resumed, not identified again");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_replies_are_split_in_order_across_a_429_and_mention_no_one() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let discord = DiscordPlatform::connect(settings(&fake))
        .await
        .expect("connect");
    let caps = discord.capabilities();
    let to = Address {
        chat: "77".into(),
        thread: None,
        reply_to: Some("555".into()),
    };
    let reply: String = (0..140)
        .map(|i| format!("Line {i:03} of the answer, @everyone and <@123> are just text.\n"))
        .collect();
    assert!(reply.chars().count() > 7_000);
    fake.rate_limit(2, 0.2);
    let ids = discord.send(&to, &reply).await.expect("sent");
    let sent = fake.sent(77);
    assert_eq!(ids.len(), sent.len());
    assert!(sent.len() >= 4);
    let texts: Vec<&str> = sent.iter().filter_map(|b| b["content"].as_str()).collect();
    assert!(texts.iter().all(|t| (caps.measure)(t) <= caps.max_message));
    let joined = texts.join("\n");
    let order: Vec<usize> = (0..140)
        .filter_map(|i| joined.find(&format!("Line {i:03} ")))
        .collect();
    assert_eq!(order.len(), 140, "every line delivered");
    assert!(order.windows(2).all(|w| w[0] < w[1]), "in order");
    assert!(
        sent.iter()
            .all(|b| b["allowed_mentions"] == serde_json::json!({"parse": []}))
    );
    assert_eq!(
        sent[0]["message_reference"]["message_id"], "555",
        "the first part answers"
    );
    assert!(sent[1].get("message_reference").is_none());
    let refused = fake
        .calls("POST", "/channels/77/messages")
        .iter()
        .filter(|c| !c.ok)
        .count();
    assert_eq!(refused, 2, "two 429s, waited out");

    discord.typing(&to).await.expect("typing");
    assert_eq!(fake.calls("POST", "/channels/77/typing").len(), 1);
    discord.edit(&to, &ids[0], "edited").await.expect("edit");
    let edit = fake
        .calls("PATCH", "/channels/77/messages/")
        .pop()
        .expect("edit");
    assert_eq!(edit.body["content"], "edited");
}

#[tokio::test]
async fn a_failing_gateway_url_fails_the_connection_loudly() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    fake.fail_gateway_url(true);
    let error = DiscordPlatform::connect(settings(&fake))
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("gateway URL"), "{error}");
    let mut wrong = settings(&fake);
    wrong.token = "wrong".into();
    fake.fail_gateway_url(false);
    assert!(
        DiscordPlatform::connect(wrong).await.is_err(),
        "a bad token is refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_request_resumes_the_session() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let (_discord, mut texts, stop) = running(&fake).await;
    fake.request_reconnect();
    fake.message(&Author::dm(42), "after the reconnect", false);
    assert_eq!(
        text(&mut texts).await,
        "1042|after the reconnect|Private|true"
    );
    for _ in 0..100 {
        if fake.sessions().1 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.sessions(), (1, 1), "resumed on opcode 7");
    stop.cancel();
}

#[tokio::test]
async fn a_long_reply_can_come_as_a_markdown_file() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let discord = DiscordPlatform::connect(DiscordSettings {
        reply_as_file_over: 3_000,
        ..settings(&fake)
    })
    .await
    .expect("connect");
    let to = Address {
        chat: "77".into(),
        thread: None,
        reply_to: Some("555".into()),
    };
    let reply = format!(
        "Summary first.\n\n```rust\n{}```",
        "let x = 1;\n".repeat(400)
    );
    fake.rate_limit(1, 0.1);
    let ids = discord.send(&to, &reply).await.expect("sent");
    assert_eq!(ids.len(), 1, "one message");
    let sent = fake.sent(77);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0]["content"],
        "Summary first.\n\n(The whole answer is attached as answer.md.)"
    );
    assert_eq!(
        sent[0]["_file"],
        reply.as_str(),
        "the whole answer, as written"
    );
    assert_eq!(sent[0]["attachments"][0]["filename"], "answer.md");
    assert_eq!(
        sent[0]["allowed_mentions"],
        serde_json::json!({"parse": []})
    );
    assert_eq!(sent[0]["message_reference"]["message_id"], "555");
    // Shorter replies are messages as usual.
    discord.send(&to, "short").await.expect("sent");
    assert_eq!(
        fake.sent_texts(77).last().map(String::as_str),
        Some("short")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidated_session_is_identified_again_and_messages_keep_coming() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let (_discord, mut texts, stop) = running(&fake).await;
    fake.invalidate_session(false);
    // Discord delivers only to an identified session: wait for the second one.
    for _ in 0..300 {
        if fake.sessions().0 == 2 && fake.connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.sessions(), (2, 0), "identified again, not resumed");
    fake.message(&Author::dm(42), "new session", false);
    assert_eq!(text(&mut texts).await, "1042|new session|Private|true");
    stop.cancel();
}

#[tokio::test]
async fn an_empty_bucket_is_waited_out_before_discord_has_to_refuse() {
    let fake = FakeDiscord::start(TOKEN).await.expect("fake");
    let discord = DiscordPlatform::connect(settings(&fake))
        .await
        .expect("connect");
    fake.bucket(2, 0.4);
    let to = Address {
        chat: "77".into(),
        thread: None,
        reply_to: None,
    };
    let started = std::time::Instant::now();
    for text in ["one", "two", "three", "four", "five"] {
        discord.send(&to, text).await.expect("sent");
    }
    assert_eq!(fake.sent_texts(77), ["one", "two", "three", "four", "five"]);
    let refused = fake
        .calls("POST", "/channels/77/messages")
        .iter()
        .filter(|c| !c.ok)
        .count();
    assert_eq!(refused, 0, "the headers were heeded: no 429");
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "two refills waited for"
    );
}
