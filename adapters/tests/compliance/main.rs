//! One compliance suite for every chat adapter: the same tests, run against the Telegram and
//! the Discord adapter through the `Platform` trait, each against its fake. A third platform
//! implements [`Harness`] for its fake and adds one line to [`for_every_platform!`].
//!
//! What every adapter must do: hand over DMs as private and addressed; hand over group or guild
//! messages, addressed only when the bot was mentioned; never hand over the bot's own messages
//! or other bots'; keep every sent part within the platform's limit, in order, one id per part;
//! deliver through a rate limit; deliver readable text when the platform rejects formatting;
//! show typing where asked.

#![cfg(all(feature = "telegram", feature = "discord"))]

mod discord;
mod telegram;

use std::sync::Arc;
use std::time::Duration;

use adapters::platform::{Address, Arrival, InboundMessage, Origin, Platform};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A platform's fake, driven the same way for every platform.
#[async_trait::async_trait]
pub trait Harness: Sized {
    async fn start() -> Self;
    async fn platform(&self) -> Arc<dyn Platform>;
    /// Waits until the running adapter receives what is sent (a gateway connected).
    async fn receiving(&self);
    /// A DM from `user`.
    fn dm(&self, user: u64, text: &str);
    /// A message from `user` in a group (guild channel), mentioning the bot or not.
    fn group(&self, user: u64, text: &str, mention: bool);
    /// A message from another bot in the group, mentioning this bot.
    fn other_bot(&self, text: &str);
    /// Where a DM to `user` goes, and where group messages go.
    fn dm_address(&self, user: u64) -> Address;
    fn group_address(&self) -> Address;
    /// Texts the bot sent to `to`, in order, as the user sees them (formatting markup aside).
    fn sent(&self, to: &Address) -> Vec<String>;
    /// Typing indicators shown in `to`.
    fn typing_shown(&self, to: &Address) -> usize;
    /// The next `count` sends are refused with a rate limit.
    fn rate_limit(&self, count: u32);
    /// The platform rejects formatted text from now on; `false` when it has no formatting to
    /// reject (Markdown is sent as written).
    fn reject_formatting(&self) -> bool;
}

/// The adapter running, and what it hands over (each stored at once).
async fn run(platform: Arc<dyn Platform>) -> (mpsc::Receiver<InboundMessage>, CancellationToken) {
    let (tx, mut arrivals) = mpsc::channel::<Arrival>(16);
    let (out, messages) = mpsc::channel(16);
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move { platform.run(tx, stop).await }
    });
    tokio::spawn(async move {
        while let Some(arrival) = arrivals.recv().await {
            let _ = out.send(arrival.message).await;
            let _ = arrival.stored.send(Ok(()));
        }
    });
    (messages, stop)
}

async fn next(messages: &mut mpsc::Receiver<InboundMessage>) -> InboundMessage {
    tokio::time::timeout(Duration::from_secs(15), messages.recv())
        .await
        .expect("a message in time")
        .expect("open")
}

async fn messages_are_normalised<H: Harness>() {
    let h = H::start().await;
    let (mut messages, stop) = run(h.platform().await).await;
    h.receiving().await;
    h.dm(42, "hello there");
    let dm = next(&mut messages).await;
    assert_eq!(
        (dm.origin, dm.addressed, dm.user_id.as_str()),
        (Origin::Private, true, "42")
    );
    assert!(dm.text.contains("hello there"), "{}", dm.text);
    assert_eq!(dm.reply_address().chat, h.dm_address(42).chat);

    h.group(43, "just chatting", false);
    let chatter = next(&mut messages).await;
    assert_eq!((chatter.origin, chatter.addressed), (Origin::Group, false));
    h.other_bot("beep boop");
    h.group(43, "a question", true);
    let asked = next(&mut messages).await;
    assert!(
        asked.addressed && asked.text.contains("a question"),
        "{asked:?}"
    );
    assert_eq!(asked.reply_address().chat, h.group_address().chat);
    assert!(
        asked.reply_address().reply_to.is_some(),
        "group answers are replies"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), messages.recv())
            .await
            .is_err(),
        "another bot's message is not handed over"
    );
    stop.cancel();
}

async fn sends_fit_the_limit_in_order_through_a_rate_limit<H: Harness>() {
    let h = H::start().await;
    let platform = h.platform().await;
    let caps = platform.capabilities();
    let to = h.dm_address(42);
    let long: String = (0..300)
        .map(|i| format!("Sentence {i:03} of a long reply with `code` and **bold**.\n"))
        .collect();
    h.rate_limit(1);
    let ids = platform.send(&to, &long).await.expect("sent");
    let sent = h.sent(&to);
    assert_eq!(ids.len(), sent.len(), "one id per part");
    assert!(sent.len() >= 2);
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "ids are distinct");
    assert!(ids.iter().all(|id| !id.is_empty()));
    for part in &sent {
        assert!(
            (caps.measure)(part) <= caps.max_message,
            "{} over the limit",
            caps.name
        );
    }
    let joined = sent.join("\n");
    let at: Vec<usize> = (0..300)
        .filter_map(|i| joined.find(&format!("Sentence {i:03} ")))
        .collect();
    assert_eq!(at.len(), 300, "{}: every sentence delivered", caps.name);
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "{}: in order",
        caps.name
    );
}

async fn rejected_formatting_still_delivers_and_typing_shows<H: Harness>() {
    let h = H::start().await;
    let platform = h.platform().await;
    let to = h.group_address();
    let has_formatting = h.reject_formatting();
    let ids = platform
        .send(&to, "Some **bold** and `code`.")
        .await
        .expect("sent");
    assert_eq!(ids.len(), 1);
    let sent = h.sent(&to);
    let last = sent.last().cloned().unwrap_or_default();
    assert!(
        last.contains("bold") && last.contains("code"),
        "readable text arrives (formatting {has_formatting}): {last:?}"
    );
    let before = h.typing_shown(&to);
    platform.typing(&to).await.expect("typing");
    assert_eq!(h.typing_shown(&to), before + 1);
}

/// Runs each test against each platform's harness.
macro_rules! for_every_platform {
    ($($test:ident),* $(,)?) => {
        mod on_telegram {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test::<super::telegram::TelegramHarness>().await;
                }
            )*
        }
        mod on_discord {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test::<super::discord::DiscordHarness>().await;
                }
            )*
        }
    };
}

for_every_platform!(
    messages_are_normalised,
    sends_fit_the_limit_in_order_through_a_rate_limit,
    rejected_formatting_still_delivers_and_typing_shows,
);
