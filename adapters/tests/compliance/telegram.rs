//! The Telegram fake as a [`Harness`].

use std::sync::Arc;

use adapters::platform::{Address, Platform};
use adapters::telegram::{Intake, TelegramPlatform};
use testkit::telegram::{FakeTelegram, From};

use super::Harness;

const TOKEN: &str = "123456:compliance";
const GROUP: i64 = -100_777;

pub struct TelegramHarness {
    fake: FakeTelegram,
}

#[async_trait::async_trait]
impl Harness for TelegramHarness {
    async fn start() -> Self {
        Self {
            fake: FakeTelegram::start(TOKEN).await.expect("fake"),
        }
    }

    async fn platform(&self) -> Arc<dyn Platform> {
        Arc::new(
            TelegramPlatform::connect(TOKEN, &self.fake.api_url(), Intake::Polling, 1 << 20)
                .await
                .expect("connect"),
        )
    }

    async fn receiving(&self) {
        // Updates wait in the fake until polled.
    }

    fn dm(&self, user: u64, text: &str) {
        self.fake.push_text(&From::dm(user as i64), text);
    }

    fn group(&self, user: u64, text: &str, mention: bool) {
        let text = if mention {
            format!("@{} {text}", testkit::telegram::BOT_USERNAME)
        } else {
            text.to_owned()
        };
        self.fake.push_text(&From::group(GROUP, user as i64), &text);
    }

    fn other_bot(&self, text: &str) {
        let mut update = self.fake.text_update(
            &From::group(GROUP, 555),
            &format!("@{} {text}", testkit::telegram::BOT_USERNAME),
        );
        update["message"]["from"]["is_bot"] = serde_json::json!(true);
        self.fake.push_update(update);
    }

    fn dm_address(&self, user: u64) -> Address {
        Address {
            chat: user.to_string(),
            thread: None,
            reply_to: None,
        }
    }

    fn group_address(&self) -> Address {
        Address {
            chat: GROUP.to_string(),
            thread: None,
            reply_to: None,
        }
    }

    fn sent(&self, to: &Address) -> Vec<String> {
        self.fake
            .sent_texts(to.chat.parse().unwrap_or(0))
            .iter()
            .map(|html| visible(html))
            .collect()
    }

    fn typing_shown(&self, to: &Address) -> usize {
        let chat: i64 = to.chat.parse().unwrap_or(0);
        self.fake
            .calls("sendChatAction")
            .iter()
            .filter(|c| c.params["chat_id"] == chat)
            .count()
    }

    fn rate_limit(&self, count: u32) {
        self.fake.rate_limit(count, 1);
    }

    fn reject_formatting(&self) -> bool {
        self.fake.reject_entities(true);
        true
    }
}

/// What a Telegram user sees of an HTML message: the text without tags, entities decoded
/// (Telegram's length limit counts this, not the markup).
fn visible(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}
