//! The fake Bot API against the real teloxide client: what teloxide sends and parses, so the
//! adapter's tests meet a fake that a real client accepts.

#![cfg(feature = "telegram")]

use std::time::Duration;

use teloxide_core::prelude::*;
use teloxide_core::types::{ChatAction, ParseMode, UpdateKind};
use teloxide_core::{ApiError, RequestError};
use testkit::telegram::{FakeTelegram, From};

const TOKEN: &str = "123456:TEST-token";

fn bot(fake: &FakeTelegram) -> Bot {
    let url = fake.api_url().parse().expect("url");
    Bot::new(TOKEN).set_api_url(url)
}

#[tokio::test]
async fn teloxide_reads_get_me_updates_and_sent_messages() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let bot = bot(&fake);
    let me = bot.get_me().await.expect("getMe");
    assert_eq!(
        me.username.as_deref(),
        Some(testkit::telegram::BOT_USERNAME)
    );

    let first = fake.push_text(&From::dm(42), "hello");
    fake.push_text(&From::group(-1_005, 7), "hi all");
    let updates = bot.get_updates().timeout(1).await.expect("getUpdates");
    assert_eq!(updates.len(), 2);
    assert_eq!(i64::from(updates[0].id.0), first);
    match &updates[0].kind {
        UpdateKind::Message(m) => {
            assert_eq!(m.text(), Some("hello"));
            assert_eq!(m.chat.id.0, 42);
        }
        other => panic!("not a message: {other:?}"),
    }
    // Confirming with an offset drops what came before it.
    let next = updates[1].id.0 + 1;
    let none = bot
        .get_updates()
        .offset(i32::try_from(next).expect("offset"))
        .timeout(0)
        .await
        .expect("confirm");
    assert!(none.is_empty());
    assert_eq!(fake.pending_updates(), 0);
    assert_eq!(fake.confirmed_offset(), i64::from(next));

    let sent = bot
        .send_message(ChatId(42), "<b>hi</b>")
        .parse_mode(ParseMode::Html)
        .await
        .expect("send");
    assert_eq!(sent.chat.id.0, 42);
    bot.send_chat_action(ChatId(42), ChatAction::Typing)
        .await
        .expect("typing");
    assert_eq!(fake.sent_texts(42), ["<b>hi</b>"]);
    assert_eq!(fake.calls("sendChatAction").len(), 1);
}

#[tokio::test]
async fn faults_reach_teloxide_as_its_own_errors() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let bot = bot(&fake);

    fake.reject_entities(true);
    let err = bot
        .send_message(ChatId(1), "*x")
        .parse_mode(ParseMode::MarkdownV2)
        .await
        .expect_err("rejected");
    assert!(
        matches!(err, RequestError::Api(ApiError::CantParseEntities(_))),
        "{err:?}"
    );
    bot.send_message(ChatId(1), "*x")
        .await
        .expect("plain text is accepted");

    fake.rate_limit(1, 2);
    let err = bot.send_message(ChatId(1), "x").await.expect_err("429");
    assert!(
        matches!(err, RequestError::RetryAfter(s) if s.duration() == Duration::from_secs(2)),
        "{err:?}"
    );

    fake.conflict(1);
    let err = bot.get_updates().timeout(0).await.expect_err("409");
    assert!(
        matches!(
            err,
            RequestError::Api(ApiError::TerminatedByOtherGetUpdates)
        ),
        "{err:?}"
    );
    assert_eq!(fake.sent_texts(1), ["*x"], "only the accepted send counts");
}

#[tokio::test]
async fn long_polling_returns_when_an_update_arrives() {
    let fake = FakeTelegram::start(TOKEN).await.expect("fake");
    let bot = bot(&fake);
    let poll = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(10).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!poll.is_finished(), "waits while there is nothing");
    fake.push_text(&From::dm(5), "late");
    let updates = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("returns on arrival")
        .expect("join")
        .expect("getUpdates");
    assert_eq!(updates.len(), 1);
    fake.duplicate_last_update();
    let again = bot.get_updates().timeout(0).await.expect("getUpdates");
    assert_eq!(again.len(), 2, "the duplicate is served with the same id");
    assert_eq!(again[0].id, again[1].id);
}
