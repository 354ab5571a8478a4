//! The Telegram adapter through the `Platform` trait, against the fake Bot API: what the
//! gateway relies on of any platform — messages handed over and confirmed only once stored,
//! parts joined, sends split to the limit with their ids, typing, edits, file fetches.

#![cfg(feature = "telegram")]

use std::time::Duration;

use adapters::platform::{Address, Arrival, Origin, Platform};
use adapters::telegram::{Intake, TelegramPlatform};
use testkit::telegram::{FakeTelegram, From};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "123456:TEST-token";

async fn platform(fake: &FakeTelegram) -> TelegramPlatform {
    TelegramPlatform::connect(TOKEN, &fake.api_url(), Intake::Polling, 1024)
        .await
        .expect("connect")
}

async fn next(arrived: &mut mpsc::Receiver<Arrival>) -> Arrival {
    tokio::time::timeout(Duration::from_secs(10), arrived.recv())
        .await
        .expect("an arrival in time")
        .expect("open")
}

#[tokio::test]
async fn messages_are_confirmed_only_once_stored_and_albums_come_as_one() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let telegram = std::sync::Arc::new(platform(&fake).await);
    assert_eq!(telegram.capabilities().name, "telegram");
    let (tx, mut arrived) = mpsc::channel(8);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let telegram = telegram.clone();
        let stop = stop.clone();
        async move { telegram.run(tx, stop).await }
    });

    let first = fake.push_text(&From::group(-100, 7), "hello @iris_test_bot");
    let arrival = next(&mut arrived).await;
    assert_eq!(
        (
            arrival.message.chat.as_str(),
            arrival.message.user_id.as_str(),
            arrival.message.origin,
            arrival.message.addressed
        ),
        ("-100", "7", Origin::Group, true)
    );
    // Not stored: Telegram must send it again, so the offset stays.
    let _ = arrival.stored.send(Err("database down".into()));
    let again = next(&mut arrived).await;
    assert_eq!(
        again.message.id, arrival.message.id,
        "the same message again"
    );
    assert!(fake.confirmed_offset() <= first);
    let _ = again.stored.send(Ok(()));

    let photo = |id: &str, caption: Option<&str>| {
        fake.media_update(
            &From::dm(42),
            caption,
            serde_json::json!({
                "photo": [{"file_id": id, "file_unique_id": format!("u{id}"), "width": 4, "height": 4, "file_size": 10}],
                "media_group_id": "album",
            }),
        )
    };
    fake.push_update(photo("a", Some("both")));
    let last = fake.push_update(photo("b", None));
    let album = next(&mut arrived).await;
    assert_eq!(album.message.text, "both");
    assert_eq!(album.message.files.len(), 2, "one message for the album");
    assert_eq!(album.message.origin, Origin::Private);
    let _ = album.stored.send(Ok(()));
    for _ in 0..100 {
        if fake.confirmed_offset() > last {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fake.confirmed_offset() > last, "confirmed once stored");
    stop.cancel();
    running.await.expect("run ends on stop");
}

#[tokio::test]
async fn sends_split_at_the_limit_and_return_every_id() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let telegram = platform(&fake).await;
    let caps = telegram.capabilities();
    let to = Address {
        chat: "-100".into(),
        thread: Some("5".into()),
        reply_to: Some("9".into()),
    };
    let long = "A sentence of the reply. ".repeat(700);
    let ids = telegram.send(&to, &long).await.expect("sent");
    let sent = fake.sent_texts(-100);
    assert_eq!(ids.len(), sent.len());
    assert!(sent.len() >= 4, "{} parts", sent.len());
    assert!(sent.iter().all(|t| (caps.measure)(t) <= caps.max_message));
    let calls = fake.calls("sendMessage");
    assert!(calls.iter().all(|c| c.params["message_thread_id"] == 5));

    // Rejected formatting falls back to plain text, for sends and edits alike.
    fake.reject_entities(true);
    let ids = telegram.send(&to, "**bold**").await.expect("sent");
    assert_eq!(
        fake.sent_texts(-100).last().map(String::as_str),
        Some("**bold**")
    );
    telegram
        .edit(&to, &ids[0], "**edited**")
        .await
        .expect("edited");
    let edit = fake.calls("editMessageText").pop().expect("edit call");
    assert_eq!(edit.params["text"], "**edited**");
    assert!(
        telegram.edit(&to, &ids[0], &long).await.is_err(),
        "too long for one message"
    );

    telegram.typing(&to).await.expect("typing");
    let typing = fake.calls("sendChatAction").pop().expect("typing call");
    assert_eq!(
        (
            typing.params["action"].as_str(),
            typing.params["message_thread_id"].as_i64()
        ),
        (Some("typing"), Some(5))
    );
    let bad = Address {
        chat: "not-a-chat".into(),
        thread: None,
        reply_to: None,
    };
    assert!(telegram.send(&bad, "hi").await.is_err());
}

#[tokio::test]
async fn files_are_fetched_whole_and_large_ones_refused() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let telegram = platform(&fake).await;
    fake.add_file("f1", b"file bytes".to_vec());
    fake.add_file("big", vec![0; 2048]);
    let dir = tempfile::tempdir().expect("dir");
    let file = |id: &str, bytes: u64| adapters::platform::FileRef {
        fetch_id: id.into(),
        unique_id: format!("u{id}"),
        info: adapters::media::FileInfo {
            kind: adapters::media::MediaKind::Document,
            media_type: "text/plain".into(),
            bytes,
            name: None,
            duration_secs: None,
            dimensions: None,
        },
    };
    let path = dir.path().join("f1.txt");
    telegram
        .fetch(&file("f1", 10), &path)
        .await
        .expect("fetched");
    assert_eq!(std::fs::read(&path).expect("read"), b"file bytes");
    // Too large by what the message said, or by what getFile says.
    let refused = telegram
        .fetch(&file("big", 2048), &dir.path().join("a"))
        .await;
    assert!(refused.is_err_and(|e| e.contains("limit")));
    let refused = telegram.fetch(&file("big", 0), &dir.path().join("b")).await;
    assert!(refused.is_err_and(|e| e.contains("limit")));
    let unknown = telegram
        .fetch(&file("nope", 1), &dir.path().join("c"))
        .await;
    assert!(unknown.is_err());
    assert!(!dir.path().join("b").exists() && !dir.path().join("c").exists());
}
