//! Discord through the real `iris` binary: serenity connects to the fake Discord's gateway,
//! the turns run against the fake model, replies come back as message creates.
//!
//! - a DM conversation; a stranger gets a pairing code; in a guild channel only messages that
//!   mention the bot are answered, as replies; a duplicated dispatch runs once; no reply ever
//!   mentions anyone; typing shown; slash commands registered and answered like typed ones;
//! - a 7,000-character reply split in order across 429s; a dropped gateway connection resumed
//!   with nothing lost or repeated.

use std::time::Duration;

use binary::{Iris, start};
use testkit::Reply;
use testkit::discord::{Author, FakeDiscord};
use testkit::openai::FakeOpenAi;

#[path = "common/binary.rs"]
mod binary;

const TOKEN: &str = "fake-discord-token";

async fn fakes(script: Vec<Reply>) -> (FakeOpenAi, FakeDiscord, tempfile::TempDir) {
    let model = FakeOpenAi::start(script).await.expect("model");
    let discord = FakeDiscord::start(TOKEN).await.expect("discord");
    let home = tempfile::tempdir().expect("home");
    std::fs::write(
        home.path().join("iris.toml"),
        format!(
            r#"
[llm]
base_url = "{}"
model = "main"

[compression]
enabled = false
memory_flush = false

[discord]
enabled = true
api_url = "{}"
allowed_users = ["42", "@user43"]
"#,
            model.base_url,
            discord.api_url()
        ),
    )
    .expect("config");
    (model, discord, home)
}

async fn iris(home: &std::path::Path, discord: &FakeDiscord) -> Iris {
    let iris = start(home, &[("DISCORD_BOT_TOKEN", TOKEN)]).await;
    for _ in 0..200 {
        if discord.sessions().0 > 0 {
            return iris;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the bot never identified; log:\n{}", binary::log(home));
}

/// Waits until `channel` has `count` messages from the bot; returns their texts.
async fn replies(
    discord: &FakeDiscord,
    channel: u64,
    count: usize,
    home: &std::path::Path,
) -> Vec<String> {
    binary::sent_at_least(count, home, || discord.sent_texts(channel)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dms_and_mentioned_guild_messages_are_answered_once_and_never_ping() {
    let (model, discord, home) = fakes(vec![
        Reply::text("Hello from Iris, @everyone."),
        Reply::text("Guild answer."),
    ])
    .await;
    let iris = iris(home.path(), &discord).await;
    let ready: serde_json::Value = reqwest::get(format!("{}/readyz", iris.base))
        .await
        .expect("readyz")
        .json()
        .await
        .expect("json");
    assert_eq!(ready["checks"]["discord"], "ok", "{ready}");

    let dm = Author::dm(42);
    discord.message(&dm, "hi", false);
    discord.duplicate_last_dispatch();
    assert_eq!(
        replies(&discord, dm.channel_id, 1, home.path()).await,
        ["Hello from Iris, @everyone."]
    );

    // A slash command runs like the typed one: acknowledged at once, answered in the channel.
    let command = discord.command(&dm, "title", Some("Greetings"));
    let sent = replies(&discord, dm.channel_id, 2, home.path()).await;
    assert!(sent[1].contains("Greetings"), "{sent:?}");
    let ack = discord.calls("POST", &format!("/interactions/{command}/"));
    assert_eq!(ack.len(), 1, "acknowledged");
    assert_eq!(
        ack[0].body["data"]["flags"], 64,
        "only the user sees the acknowledgement"
    );

    // A guild channel: chatter is ignored, a mention is answered as a reply.
    let guild = Author::guild(77, 43);
    discord.message(&guild, "just chatting", false);
    let asked = discord.message(&guild, "what is 2+2?", true);
    assert_eq!(
        replies(&discord, 77, 1, home.path()).await,
        ["Guild answer."]
    );
    let sent = discord.sent(77);
    assert_eq!(
        sent[0]["message_reference"]["message_id"],
        asked.to_string()
    );
    let question = model.requests()[1].body["messages"].to_string();
    assert!(
        question.contains("what is 2+2?") && !question.contains("<@"),
        "the mention is not part of the text: {question}"
    );

    // A stranger's DM gets a pairing code; nothing runs.
    let stranger = Author::dm(99);
    discord.message(&stranger, "let me in", false);
    let code = replies(&discord, stranger.channel_id, 1, home.path()).await;
    assert!(
        code[0].contains("iris pairing approve discord "),
        "{code:?}"
    );

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(model.requests().len(), 2, "the duplicate ran once");
    assert_eq!(discord.sent_texts(dm.channel_id).len(), 2);
    for channel in [dm.channel_id, 77, stranger.channel_id] {
        for body in discord.sent(channel) {
            assert_eq!(body["allowed_mentions"], serde_json::json!({"parse": []}));
        }
    }
    assert!(
        !discord
            .calls("POST", &format!("/channels/{}/typing", dm.channel_id))
            .is_empty()
    );
    let commands = discord.calls("PUT", "/applications/");
    assert_eq!(commands.len(), 1, "slash commands registered");
    assert!(commands[0].body.to_string().contains("\"name\":\"new\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_across_429s_and_a_dropped_connection_lose_nothing() {
    let long: String = (0..140)
        .map(|i| format!("Line {i:03} of a long answer with `code` and **bold** words.\n"))
        .collect();
    assert!(long.chars().count() > 7_000);
    let (model, discord, home) = fakes(vec![Reply::text(&long), Reply::text("Back again.")]).await;
    let _iris = iris(home.path(), &discord).await;
    let dm = Author::dm(42);
    discord.rate_limit(2, 0.3);
    discord.message(&dm, "write a lot", false);
    // Every part arrived once the last one, `(n/n)`, did.
    let mut sent = replies(&discord, dm.channel_id, 4, home.path()).await;
    for _ in 0..200 {
        let n = sent.len();
        if sent
            .last()
            .is_some_and(|t| t.ends_with(&format!("({n}/{n})")))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        sent = discord.sent_texts(dm.channel_id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sent,
        discord.sent_texts(dm.channel_id),
        "no more parts after the last"
    );
    assert!(sent.iter().all(|t| t.chars().count() <= 2_000));
    assert!(
        sent.last()
            .is_some_and(|t| t.ends_with(&format!("({n}/{n})", n = sent.len())))
    );
    let joined = sent.join("\n");
    let positions: Vec<usize> = (0..140)
        .filter_map(|i| joined.find(&format!("Line {i:03} ")))
        .collect();
    assert_eq!(positions.len(), 140, "every line arrived");
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "in order");

    // The gateway connection drops; a message sent meanwhile is answered exactly once.
    let parts = sent.len();
    discord.drop_connection();
    discord.message(&dm, "are you back?", false);
    let sent = replies(&discord, dm.channel_id, parts + 1, home.path()).await;
    assert_eq!(sent[parts], "Back again.");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(discord.sent_texts(dm.channel_id).len(), parts + 1);
    assert_eq!(model.requests().len(), 2);
    assert_eq!(discord.sessions(), (1, 1), "resumed, not identified again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_are_saved_noted_and_images_shown_to_a_vision_model() {
    let (model, discord, home) = fakes(vec![
        Reply::text("A tiny image."),
        Reply::text("Read the notes."),
    ])
    .await;
    let path = home.path().join("iris.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    std::fs::write(
        &path,
        config.replace("model = \"main\"\n", "model = \"main\"\nvision = true\n"),
    )
    .expect("config");
    let _iris = iris(home.path(), &discord).await;
    let dm = Author::dm(42);
    let png = b"\x89PNG\r\n\x1a\nfake".to_vec();
    discord.message_with_file(
        &dm,
        "what is this?",
        false,
        Some(("dot.png", "image/png", png.clone())),
    );
    replies(&discord, dm.channel_id, 1, home.path()).await;
    let first = model.requests()[0].body["messages"].to_string();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
    assert!(
        first.contains(&format!("data:image/png;base64,{encoded}")),
        "{first}"
    );
    assert!(
        first.contains("[photo \\\"dot.png\\\" 4×4, 12 B: media/discord/1042/"),
        "{first}"
    );

    discord.message_with_file(
        &dm,
        "",
        false,
        Some((
            "notes.md",
            "text/markdown; charset=utf-8",
            b"# Notes\n- one\n".to_vec(),
        )),
    );
    replies(&discord, dm.channel_id, 2, home.path()).await;
    let second = model.requests()[1].body["messages"].to_string();
    assert!(
        second.contains("# Notes\\n- one"),
        "a text file is read in: {second}"
    );
    assert!(
        !second.contains(&encoded),
        "the image went with its own turn only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_shared_answered_once_joined_and_started_from_mentions() {
    let (model, discord, home) = fakes(vec![
        Reply::text("In the thread."),
        Reply::text("Still here."),
        Reply::text("Thread started."),
    ])
    .await;
    let path = home.path().join("iris.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    std::fs::write(
        &path,
        config.replace("[discord]\n", "[discord]\nauto_thread = true\n"),
    )
    .expect("config");
    let _iris = iris(home.path(), &discord).await;

    // An existing thread the bot is not in: only a mention brings it in.
    discord.add_thread(500, 77);
    let in_thread = |user| {
        let mut author = Author::guild(500, user);
        author.channel_id = 500;
        author
    };
    discord.message(&in_thread(43), "nobody asked you", false);
    discord.message(&in_thread(43), "what do you think?", true);
    assert_eq!(
        replies(&discord, 500, 1, home.path()).await,
        ["In the thread."]
    );
    // Now a member: another user's message there is answered without a mention, in the same
    // (shared) conversation.
    discord.message(&in_thread(42), "and me?", false);
    assert_eq!(
        replies(&discord, 500, 2, home.path()).await[1],
        "Still here."
    );
    let shared = model.requests()[1].body["messages"].to_string();
    assert!(
        shared.contains("what do you think?") && shared.contains("and me?"),
        "{shared}"
    );
    assert!(
        !shared.contains("nobody asked you"),
        "the unaddressed message did not run"
    );

    // A mention in a channel starts a thread, and the answer goes there.
    let asked = discord.message(&Author::guild(77, 43), "Plan a trip\nto Lisbon", true);
    let started = loop {
        let started = discord.started_threads();
        if !started.is_empty() {
            break started;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        started[0],
        ("77".to_owned(), asked.to_string(), "Plan a trip".to_owned())
    );
    // The channel the answer was posted in.
    let mut thread = None;
    for _ in 0..300 {
        thread = discord
            .calls("POST", "/channels/")
            .iter()
            .filter(|c| c.ok && c.body["content"] == "Thread started.")
            .find_map(|c| {
                c.path
                    .split('/')
                    .nth(2)
                    .and_then(|id| id.parse::<u64>().ok())
            });
        if thread.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let thread = thread.expect("the answer was posted");
    assert_ne!(thread, 77, "answered in the new thread, not the channel");
    assert_eq!(discord.sent_texts(77).len(), 0);
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_let_members_in_and_channel_lists_keep_the_bot_out() {
    let (model, discord, home) =
        fakes(vec![Reply::text("Role answer."), Reply::text("DM answer.")]).await;
    let path = home.path().join("iris.toml");
    let config = std::fs::read_to_string(&path).expect("config");
    std::fs::write(
        &path,
        config.replace(
            "[discord]\n",
            "[discord]\nallowed_roles = [\"7\"]\nallowed_channels = [\"77\", \"88\"]\nignored_channels = [\"88\"]\n",
        ),
    )
    .expect("config");
    let _iris = iris(home.path(), &discord).await;

    let mut member = Author::guild(77, 60);
    member.roles = vec![7];
    discord.message(&Author::guild(77, 61), "no role, no answer", true);
    discord.message(&member, "role answer please", true);
    assert_eq!(
        replies(&discord, 77, 1, home.path()).await,
        ["Role answer."]
    );
    // An allowed user, but in an ignored channel and in one not on the list.
    discord.message(&Author::guild(88, 42), "ignored channel", true);
    discord.message(&Author::guild(99, 42), "unlisted channel", true);
    // DMs are not affected by channel lists.
    let dm = Author::dm(42);
    discord.message(&dm, "hello", false);
    assert_eq!(
        replies(&discord, dm.channel_id, 1, home.path()).await,
        ["DM answer."]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(discord.sent_texts(88).is_empty() && discord.sent_texts(99).is_empty());
    assert_eq!(model.requests().len(), 2);
    let log = binary::log(home.path());
    assert!(
        log.contains("not in discord.allowed_users (or allowed_roles)"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_content_intent_is_explained_in_the_log() {
    let (_model, discord, home) = fakes(Vec::new()).await;
    discord.refuse_intents(true);
    let iris = start(home.path(), &[("DISCORD_BOT_TOKEN", TOKEN)]).await;
    let mut log = String::new();
    for _ in 0..200 {
        log = binary::log(home.path());
        if log.contains("Message Content Intent") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        log.contains("discord refused the message content intent")
            && log.contains("Privileged Gateway Intents"),
        "{log}"
    );
    let response = reqwest::get(format!("{}/readyz", iris.base))
        .await
        .expect("readyz");
    assert_eq!(
        response.status().as_u16(),
        503,
        "not ready without the gateway"
    );
    let body: serde_json::Value = response.json().await.expect("json");
    assert!(
        body["checks"]["discord"]
            .as_str()
            .is_some_and(|r| r.contains("gateway")),
        "{body}"
    );
}
