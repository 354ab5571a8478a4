//! Discord in the daemon: the adapter ([`adapters::discord::DiscordPlatform`]) from
//! `[discord]`, run by [`crate::chat`].

use std::sync::Arc;

use adapters::discord::{DiscordPlatform, DiscordSettings};
use anyhow::Result;

use crate::chat::{self, Access};
use crate::config::DiscordConfig;

/// Checks the token and the gateway URL, then starts the bot.
pub async fn start(config: &DiscordConfig, token: &str, runtime: &chat::Runtime) -> Result<()> {
    let platform = DiscordPlatform::connect(DiscordSettings {
        token: token.to_owned(),
        api_url: config.api_url.clone(),
        allow_bots: config.allow_bots,
        max_file_bytes: config.max_file_mb.saturating_mul(1024 * 1024),
        shards: config.shards,
        auto_thread: config.auto_thread,
        reply_as_file_over: usize::try_from(config.reply_as_file_over_chars).unwrap_or(usize::MAX),
    })
    .await?;
    chat::start(Arc::new(platform), access(config), runtime);
    Ok(())
}

/// Who may talk to the bot, and where, from `[discord]` (also on a config reload).
pub fn access(config: &DiscordConfig) -> Access {
    Access {
        allowed_users: config.allowed_users.clone(),
        allowed_roles: config.allowed_roles.clone(),
        open_chats: config.free_response_channels.clone(),
        allowed_chats: config.allowed_channels.clone(),
        ignored_chats: config.ignored_channels.clone(),
    }
}
