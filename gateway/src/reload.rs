//! SIGHUP: the configuration is read again and what can change live is applied — the log
//! level, the default busy mode (for conversations loaded from then on), and each running
//! platform's access rules (allowed users and roles, open, allowed and ignored chats). Every
//! other change is named in the log as needing a restart; nothing else is touched.

use std::sync::Arc;

use crate::chat::AccessBook;
use crate::config::{self, Config, Loaded};
use crate::conversation::Gateway;

/// Reloads on every SIGHUP until `stop`.
pub async fn on_sighup(
    mut current: Loaded,
    gateway: Arc<Gateway>,
    access: AccessBook,
    stop: tokio_util::sync::CancellationToken,
) {
    #[cfg(unix)]
    {
        let mut hangups =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGHUP; config reload is off");
                    return;
                }
            };
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                received = hangups.recv() => if received.is_none() { return },
            }
            match config::load(current.file.as_deref()) {
                Ok(fresh) => {
                    apply(&current.config, &fresh.config, &gateway, &access);
                    current = fresh;
                }
                Err(error) => {
                    tracing::error!(error = %format!("{error:#}"), "SIGHUP: the configuration does not load; nothing changed");
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (current, gateway, access);
        stop.cancelled().await;
    }
}

/// Applies what can change live from `old` to `new` and logs the rest.
pub fn apply(old: &Config, new: &Config, gateway: &Gateway, access: &AccessBook) {
    let mut applied = Vec::new();
    if new.log.level != old.log.level {
        match crate::logging::set_level(&new.log.level) {
            Ok(()) => applied.push("log.level"),
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "SIGHUP: log.level not changed")
            }
        }
    }
    if new.agent.busy_mode != old.agent.busy_mode {
        gateway.set_busy_mode(new.agent.busy_mode);
        applied.push("agent.busy_mode");
    }
    if crate::telegram::access(&new.telegram) != crate::telegram::access(&old.telegram)
        && access.replace("telegram", crate::telegram::access(&new.telegram))
    {
        applied.push("telegram access");
    }
    if crate::discord::access(&new.discord) != crate::discord::access(&old.discord)
        && access.replace("discord", crate::discord::access(&new.discord))
    {
        applied.push("discord access");
    }
    let restart = needs_restart(old, new);
    tracing::info!(
        applied = %applied.join(", "),
        "SIGHUP: configuration reloaded"
    );
    if !restart.is_empty() {
        tracing::warn!(
            sections = %restart.join(", "),
            "SIGHUP: these changes need a restart to apply"
        );
    }
}

/// The sections that changed in ways only a restart applies.
fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut old = old.clone();
    let mut new = new.clone();
    // Blank out what reloads live; what differs after that needs a restart.
    for config in [&mut old, &mut new] {
        config.log.level = String::new();
        config.agent.busy_mode = crate::config::BusyMode::Queue;
        config.telegram.allowed_users.clear();
        config.telegram.open_groups.clear();
        config.discord.allowed_users.clear();
        config.discord.allowed_roles.clear();
        config.discord.free_response_channels.clear();
        config.discord.allowed_channels.clear();
        config.discord.ignored_channels.clear();
    }
    let sections: [(&'static str, bool); 12] = [
        ("server", old.server != new.server),
        ("store", old.store != new.store),
        ("llm", old.llm != new.llm),
        ("compression", old.compression != new.compression),
        ("agent", old.agent != new.agent),
        ("tools", old.tools != new.tools),
        ("mcp", old.mcp != new.mcp),
        ("webhook", old.webhook != new.webhook),
        ("api", old.api != new.api),
        ("telegram", old.telegram != new.telegram),
        ("discord", old.discord != new.discord),
        ("log", old.log != new.log),
    ];
    sections
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_changes_need_no_restart_and_others_are_named() {
        let old = Config::default();
        let mut new = old.clone();
        new.telegram.allowed_users.push("42".into());
        new.log.level = "debug".into();
        assert!(needs_restart(&old, &new).is_empty());
        new.llm.model = "other".into();
        new.telegram.api_url = "http://127.0.0.1:1".into();
        assert_eq!(needs_restart(&old, &new), ["llm", "telegram"]);
    }
}
