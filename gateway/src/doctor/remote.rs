//! The doctor's checks of what Iris talks to: each model provider answers a one-token request,
//! and each enabled chat platform accepts its token (`getMe`, `/users/@me`). Nothing is
//! changed on the platforms (no webhook is set or removed).

use std::time::{Duration, Instant};

use agent_core::llm::{ChatMessage, ChatRequest};
use agent_core::store::Role;
use tokio_util::sync::CancellationToken;

use super::Check;
use crate::config::{LlmConfig, Loaded};

/// How long one remote check may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The public APIs, which need a key (local servers may not).
const HOSTED: [&str; 2] = ["api.openai.com", "api.anthropic.com"];

/// One line per provider: `[llm]` then each fallback, in the order they are tried.
pub async fn models(loaded: &Loaded) -> Vec<Check> {
    let llm = &loaded.config.llm;
    let mut checks = Vec::new();
    for (i, config) in std::iter::once(llm).chain(&llm.fallback).enumerate() {
        let name = if i == 0 {
            "model".to_owned()
        } else {
            format!("fallback {i}")
        };
        checks.push(Check {
            name,
            result: model(loaded, config).await,
        });
    }
    checks
}

async fn model(loaded: &Loaded, config: &LlmConfig) -> Result<String, String> {
    let hosted = HOSTED.iter().any(|h| config.base_url.contains(h));
    if hosted && loaded.secret(config.key_env()).is_none() {
        return Err(format!(
            "SKIP: no key in ${} for {} (iris serve would start the local model instead)",
            config.key_env(),
            config.base_url
        ));
    }
    let provider = crate::providers::provider(loaded, config).map_err(|e| format!("{e:#}"))?;
    let request = ChatRequest {
        system: None,
        messages: vec![ChatMessage::text(Role::User, "Say OK.")],
        tools: Vec::new(),
        max_tokens: 1,
        temperature: None,
    };
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let call = provider.complete(&request, &|_| {}, &cancel);
    match tokio::time::timeout(TIMEOUT, call).await {
        Ok(Ok(_)) => Ok(format!(
            "{} {} at {} answered in {} ms",
            config.provider,
            config.model,
            config.base_url,
            started.elapsed().as_millis()
        )),
        Ok(Err(error)) => Err(format!(
            "{} {} at {}: {} ({})",
            config.provider,
            config.model,
            config.base_url,
            error.message,
            error.class.as_str()
        )),
        Err(_) => Err(format!(
            "{}: no answer within {} s",
            config.base_url,
            TIMEOUT.as_secs()
        )),
    }
}

/// One line per enabled platform.
pub async fn platforms(loaded: &Loaded) -> Vec<Check> {
    let config = &loaded.config;
    let mut checks = Vec::new();
    if config.telegram.enabled {
        let result = match loaded.secret(&config.telegram.token_env) {
            None => Err(format!("${} is unset", config.telegram.token_env)),
            Some(token) => telegram(&token, &config.telegram.api_url).await,
        };
        checks.push(Check {
            name: "telegram".into(),
            result,
        });
    }
    if config.discord.enabled {
        let result = match loaded.secret(&config.discord.token_env) {
            None => Err(format!("${} is unset", config.discord.token_env)),
            Some(token) => discord(&token, &config.discord.api_url).await,
        };
        checks.push(Check {
            name: "discord".into(),
            result,
        });
    }
    checks
}

async fn telegram(token: &str, api_url: &str) -> Result<String, String> {
    use teloxide_core::prelude::Requester as _;
    let url = api_url
        .parse()
        .map_err(|_| format!("telegram.api_url {api_url:?} is not a URL"))?;
    let bot = adapters::telegram::Bot::new(token).set_api_url(url);
    match tokio::time::timeout(TIMEOUT, bot.get_me()).await {
        Ok(Ok(me)) => Ok(format!(
            "token accepted: @{}",
            me.user.username.clone().unwrap_or_default()
        )),
        Ok(Err(error)) => Err(format!("getMe failed: {error}")),
        Err(_) => Err(format!(
            "{api_url}: no answer within {} s",
            TIMEOUT.as_secs()
        )),
    }
}

async fn discord(token: &str, api_url: &str) -> Result<String, String> {
    let rest = adapters::discord::rest::Rest::new(api_url, token).map_err(|e| e.to_string())?;
    match tokio::time::timeout(TIMEOUT, rest.current_user()).await {
        Ok(Ok(me)) => Ok(format!(
            "token accepted: {}",
            me["username"].as_str().unwrap_or_default()
        )),
        Ok(Err(error)) => Err(format!("/users/@me failed: {error}")),
        Err(_) => Err(format!(
            "{api_url}: no answer within {} s",
            TIMEOUT.as_secs()
        )),
    }
}
