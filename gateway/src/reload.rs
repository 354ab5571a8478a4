//! SIGHUP: the configuration is read again and what can change live is applied:
//!
//! - the log level;
//! - the default busy mode (every conversation without its own follows it from its next turn);
//! - each running platform's access rules (allowed users and roles, open, allowed and ignored
//!   chats);
//! - the agent — models and fallbacks, compression, tools and MCP servers, the system prompt,
//!   turn limits: a new agent is built and swapped in; turns already running finish with the
//!   old one, and a new agent that cannot be built leaves the old one in place.
//!
//! Every other change is named in the log as needing a restart; nothing else is touched.

use std::sync::Arc;

use agent_core::redact::Redactor;
use agent_core::store::SessionStore;

use crate::chat::AccessBook;
use crate::config::{self, Config, Loaded};
use crate::conversation::Gateway;

/// What a reload changes.
#[derive(Clone)]
pub struct Live {
    pub gateway: Arc<Gateway>,
    pub access: AccessBook,
    /// The store a rebuilt agent's tools write to.
    pub store: Arc<dyn SessionStore>,
}

/// Reloads on every SIGHUP until `stop`.
pub async fn on_sighup(current: Loaded, live: Live, stop: tokio_util::sync::CancellationToken) {
    #[cfg(unix)]
    {
        let mut current = current;
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
            match fresh(&current) {
                Ok(fresh) => {
                    apply(&current, &fresh, &live).await;
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
        let _ = (current, live);
        stop.cancelled().await;
    }
}

/// The configuration as it is now, seen the way the daemon runs it: still on the first run's
/// local model when that is what it started with and nothing else is configured.
fn fresh(current: &Loaded) -> anyhow::Result<Loaded> {
    let mut fresh = config::load(current.file.as_deref())?;
    if let Some(local) = &current.local_model
        && crate::local_model::wanted(&fresh)
    {
        crate::local_model::adopt(&mut fresh, local)?;
    }
    Ok(fresh)
}

/// Applies what can change live from `old` to `new` and logs the rest.
pub async fn apply(old: &Loaded, new: &Loaded, live: &Live) {
    let (old_config, new_config) = (&old.config, &new.config);
    let mut applied = Vec::new();
    if new_config.log.level != old_config.log.level {
        match crate::logging::set_level(&new_config.log.level) {
            Ok(()) => applied.push("log.level"),
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "SIGHUP: log.level not changed")
            }
        }
    }
    if new_config.agent.busy_mode != old_config.agent.busy_mode {
        live.gateway.set_busy_mode(new_config.agent.busy_mode);
        applied.push("agent.busy_mode");
    }
    let access = &live.access;
    if crate::telegram::access(&new_config.telegram)
        != crate::telegram::access(&old_config.telegram)
        && access.replace("telegram", crate::telegram::access(&new_config.telegram))
    {
        applied.push("telegram access");
    }
    if crate::discord::access(&new_config.discord) != crate::discord::access(&old_config.discord)
        && access.replace("discord", crate::discord::access(&new_config.discord))
    {
        applied.push("discord access");
    }
    if agent_of(old_config) != agent_of(new_config) {
        let redactor = Arc::new(Redactor::with_secrets(new.secret_values()));
        match crate::agent::build(new, live.store.clone(), redactor).await {
            Ok(built) => {
                for problem in &built.problems {
                    tracing::warn!(%problem, "SIGHUP: left out of the new agent");
                }
                live.gateway.set_agent(Arc::new(built.agent));
                applied.push("the agent (models, tools, prompt, compression)");
            }
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "SIGHUP: the new agent cannot be built; turns keep the current one");
            }
        }
    }
    let restart = needs_restart(old_config, new_config);
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

/// What the agent is built from: the configuration with everything else blanked out.
fn agent_of(config: &Config) -> Config {
    let defaults = Config::default();
    let agent = &config.agent;
    Config {
        llm: config.llm.clone(),
        compression: config.compression.clone(),
        tools: config.tools.clone(),
        mcp: config.mcp.clone(),
        agent: crate::config::AgentConfig {
            max_iterations: agent.max_iterations,
            system_prompt: agent.system_prompt.clone(),
            turn_timeout_secs: agent.turn_timeout_secs,
            max_concurrent_model_calls: agent.max_concurrent_model_calls,
            ..defaults.agent.clone()
        },
        ..defaults
    }
}

/// The sections that changed in ways only a restart applies.
fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut old = old.clone();
    let mut new = new.clone();
    let defaults = Config::default();
    // Blank out what reloads live; what differs after that needs a restart.
    for config in [&mut old, &mut new] {
        config.log.level = String::new();
        config.agent = crate::config::AgentConfig {
            queue_cap: config.agent.queue_cap,
            idle_ttl_secs: config.agent.idle_ttl_secs,
            ..defaults.agent.clone()
        };
        config.llm = defaults.llm.clone();
        config.compression = defaults.compression.clone();
        config.tools = defaults.tools.clone();
        config.mcp = defaults.mcp.clone();
        config.telegram.allowed_users.clear();
        config.telegram.open_groups.clear();
        config.discord.allowed_users.clear();
        config.discord.allowed_roles.clear();
        config.discord.free_response_channels.clear();
        config.discord.allowed_channels.clear();
        config.discord.ignored_channels.clear();
    }
    let sections: [(&'static str, bool); 8] = [
        ("server", old.server != new.server),
        ("store", old.store != new.store),
        (
            "agent.queue_cap or agent.idle_ttl_secs",
            old.agent != new.agent,
        ),
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
        new.llm.model = "other".into();
        new.agent.system_prompt = "Be brief.".into();
        new.mcp.servers.insert(
            "files".into(),
            crate::config::McpServerEntry {
                command: Some("mcp-files".into()),
                ..Default::default()
            },
        );
        assert!(needs_restart(&old, &new).is_empty());
        new.telegram.api_url = "http://127.0.0.1:1".into();
        new.agent.queue_cap += 1;
        assert_eq!(
            needs_restart(&old, &new),
            ["agent.queue_cap or agent.idle_ttl_secs", "telegram"]
        );
    }

    #[test]
    fn the_agent_is_rebuilt_only_when_what_it_is_built_from_changes() {
        let old = Config::default();
        let mut new = old.clone();
        new.telegram.allowed_users.push("42".into());
        new.agent.busy_mode = crate::config::BusyMode::Interrupt;
        new.agent.queue_cap += 1;
        assert_eq!(agent_of(&old), agent_of(&new));
        for change in [
            |c: &mut Config| c.llm.model = "other".into(),
            |c: &mut Config| c.agent.system_prompt = "Be brief.".into(),
            |c: &mut Config| c.compression.threshold_percent = 0.25,
            |c: &mut Config| c.tools.timeout_secs += 1,
        ] {
            let mut changed = old.clone();
            change(&mut changed);
            assert_ne!(agent_of(&old), agent_of(&changed));
        }
    }
}
