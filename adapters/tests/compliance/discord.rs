//! The Discord fake as a [`Harness`].

use std::sync::Arc;

use adapters::discord::{DiscordPlatform, DiscordSettings};
use adapters::platform::{Address, Platform};
use testkit::discord::{Author, FakeDiscord};

use super::Harness;

const TOKEN: &str = "compliance-token";
const CHANNEL: u64 = 777;

pub struct DiscordHarness {
    fake: FakeDiscord,
}

#[async_trait::async_trait]
impl Harness for DiscordHarness {
    async fn start() -> Self {
        Self {
            fake: FakeDiscord::start(TOKEN).await.expect("fake"),
        }
    }

    async fn platform(&self) -> Arc<dyn Platform> {
        Arc::new(
            DiscordPlatform::connect(DiscordSettings {
                token: TOKEN.into(),
                api_url: self.fake.api_url(),
                allow_bots: false,
                max_file_bytes: 1 << 20,
                shards: 1,
                auto_thread: false,
                reply_as_file_over: 0,
            })
            .await
            .expect("connect"),
        )
    }

    async fn receiving(&self) {
        // Discord delivers only to a connected, identified bot.
        for _ in 0..300 {
            if self.fake.sessions().0 > 0 && self.fake.connected() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the bot never connected to the fake gateway");
    }

    fn dm(&self, user: u64, text: &str) {
        self.fake.message(&Author::dm(user), text, false);
    }

    fn group(&self, user: u64, text: &str, mention: bool) {
        self.fake
            .message(&Author::guild(CHANNEL, user), text, mention);
    }

    fn other_bot(&self, text: &str) {
        let mut bot = Author::guild(CHANNEL, 555);
        bot.bot = true;
        self.fake.message(&bot, text, true);
    }

    fn dm_address(&self, user: u64) -> Address {
        Address {
            chat: Author::dm(user).channel_id.to_string(),
            thread: None,
            reply_to: None,
        }
    }

    fn group_address(&self) -> Address {
        Address {
            chat: CHANNEL.to_string(),
            thread: None,
            reply_to: None,
        }
    }

    fn sent(&self, to: &Address) -> Vec<String> {
        self.fake.sent_texts(to.chat.parse().unwrap_or(0))
    }

    fn typing_shown(&self, to: &Address) -> usize {
        self.fake
            .calls("POST", &format!("/channels/{}/typing", to.chat))
            .len()
    }

    fn rate_limit(&self, count: u32) {
        self.fake.rate_limit(count, 0.2);
    }

    fn reject_formatting(&self) -> bool {
        // Discord renders Markdown as sent; there is nothing it rejects.
        false
    }
}
