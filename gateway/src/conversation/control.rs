//! What each chat command does (DESIGN.md §9), answered with one short text. Session changes
//! go through the store's one-transaction operations (rotate, branch, resume), so the
//! conversation always points at exactly one current session.

use agent_core::agent::{ConversationState, TurnEvent};
use agent_core::store::{Role, Rotation, SearchQuery, Session, SessionFilter, StoreError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::actor::Deps;
use super::command::{Command, HELP};

/// Sessions `/resume` and `/sessions` list.
const LISTED: u32 = 10;
/// Hits `/search` shows.
const HITS: u32 = 5;

/// Runs `command` for the conversation in `state`; returns the reply.
pub(super) async fn run(
    deps: &Deps,
    state: &mut ConversationState,
    command: Command,
) -> Result<String, StoreError> {
    let store = &deps.store;
    Ok(match command {
        Command::Help => HELP
            .iter()
            .map(|(usage, what)| format!("{usage} — {what}"))
            .collect::<Vec<_>>()
            .join("\n"),
        Command::New(title) => match rotate_fresh(deps, state, title.as_deref()).await {
            Ok(session) => match session.title {
                Some(title) => format!("Started a new session: {title}."),
                None => "Started a new session.".into(),
            },
            Err(StoreError::TitleTaken(title)) => {
                format!("The title {title:?} is taken; pick another.")
            }
            Err(e) => return Err(e),
        },
        Command::Reset => {
            rotate_fresh(deps, state, None).await?;
            "Started a new session.".into()
        }
        Command::Sessions | Command::Resume(None) => listing(deps, state).await?,
        Command::Resume(Some(which)) => resume(deps, state, which.trim()).await?,
        Command::Branch(title) => match store.branch(&state.session_id, title.as_deref()).await {
            Ok(session) => {
                let label = session.title.clone().unwrap_or_else(|| session.id.clone());
                switch_to(state, session);
                format!("Branched into {label}; the earlier session stays as it was.")
            }
            Err(StoreError::TitleTaken(title)) => {
                format!("The title {title:?} is taken; pick another.")
            }
            Err(e) => return Err(e),
        },
        Command::Compress(focus) => {
            let cancel = CancellationToken::new();
            match deps
                .agent()
                .compress_now(state, focus.as_deref(), &|_: TurnEvent| {}, &cancel)
                .await
            {
                Ok(Some(report)) => format!(
                    "Compressed {} earlier messages: about {} → {} tokens{}.",
                    report.summarised,
                    report.before_tokens,
                    report.after_tokens,
                    if report.fallback {
                        " (the summariser was unavailable; a plain digest stands in)"
                    } else {
                        ""
                    }
                ),
                Ok(None) => "Nothing to compress yet.".into(),
                Err(agent_core::agent::TurnError::Store(e)) => return Err(e),
                Err(e) => format!("Could not compress: {e}"),
            }
        }
        Command::Title(None) => match store
            .session(&state.session_id)
            .await?
            .and_then(|s| s.title)
        {
            Some(title) => format!("This session is titled {title:?}."),
            None => "This session has no title; /title <text> sets one.".into(),
        },
        Command::Title(Some(title)) => match store.set_title(&state.session_id, &title).await {
            Ok(()) => format!("Titled {:?}.", title.trim()),
            Err(StoreError::TitleTaken(title)) => {
                format!("The title {title:?} is taken; pick another.")
            }
            Err(StoreError::Invalid(why)) => why,
            Err(e) => return Err(e),
        },
        Command::Search(None) => "Usage: /search <words>".into(),
        Command::Search(Some(text)) => search(deps, state, &text).await?,
        Command::Status => status(deps, state).await?,
        Command::Usage => {
            let session = current(deps, state).await?;
            let u = session.usage;
            format!(
                "This session: {} model calls, {} tokens in ({} from cache), {} out, about ${:.4}.",
                u.api_call_count,
                u.input_tokens,
                u.cache_read_tokens,
                u.output_tokens,
                u.estimated_cost_usd
            )
        }
        Command::Model(None) => format!("Model: {}.", model_name(deps, state)),
        Command::Model(Some(name)) => {
            let name = name.trim().to_owned();
            let supported = deps
                .agent()
                .providers
                .first()
                .is_some_and(|p| p.with_model(&name).is_some());
            if !supported {
                "This provider cannot switch models.".to_owned()
            } else {
                let conversation = store
                    .conversation_by_id(state.conversation_id)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "conversation",
                        id: state.conversation_id.to_string(),
                    })?;
                let mut settings = conversation.settings;
                settings["model"] = json!(name);
                store
                    .set_conversation_settings(state.conversation_id, &settings)
                    .await?;
                state.model = Some(name.clone());
                format!("Model for this conversation: {name}.")
            }
        }
        Command::Stop => "Nothing is running.".into(),
        Command::Undo => match last_exchange(deps, state).await? {
            Some(ids) => {
                state.deactivate_messages(store.as_ref(), &ids).await?;
                "Forgot the last exchange.".into()
            }
            None => "There is nothing to undo.".into(),
        },
        // `/retry` runs a turn; the actor handles it.
        Command::Retry => "There is nothing to retry.".into(),
    })
}

/// The last user message and everything after it, as the ids to deactivate, with its text.
pub(super) async fn last_user_turn(
    deps: &Deps,
    state: &ConversationState,
) -> Result<Option<(Vec<i64>, String)>, StoreError> {
    let messages = deps.store.messages(&state.session_id).await?;
    let Some(at) = messages.iter().rposition(|m| m.body.role == Role::User) else {
        return Ok(None);
    };
    let text = messages[at].body.content.clone().unwrap_or_default();
    Ok(Some((messages[at..].iter().map(|m| m.id).collect(), text)))
}

async fn last_exchange(
    deps: &Deps,
    state: &ConversationState,
) -> Result<Option<Vec<i64>>, StoreError> {
    Ok(last_user_turn(deps, state).await?.map(|(ids, _)| ids))
}

async fn rotate_fresh(
    deps: &Deps,
    state: &mut ConversationState,
    title: Option<&str>,
) -> Result<Session, StoreError> {
    let session = deps
        .store
        .rotate(&Rotation::reset(
            state.conversation_id,
            &state.session_id,
            title.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()),
        ))
        .await?;
    switch_to(state, session.clone());
    Ok(session)
}

/// Points the state at `session`, keeping the conversation's model choice.
fn switch_to(state: &mut ConversationState, session: Session) {
    let model = state.model.take();
    *state = ConversationState::new(state.conversation_id, session.id);
    state.model = model;
}

async fn recent(deps: &Deps, state: &ConversationState) -> Result<Vec<Session>, StoreError> {
    deps.store
        .list_sessions(&SessionFilter {
            conversation_id: Some(state.conversation_id),
            source: None,
            limit: LISTED,
        })
        .await
}

async fn listing(deps: &Deps, state: &ConversationState) -> Result<String, StoreError> {
    let sessions = recent(deps, state).await?;
    let mut lines = vec!["Recent sessions (newest first):".to_owned()];
    for (n, session) in sessions.iter().enumerate() {
        let preview = deps
            .store
            .messages(&session.id)
            .await?
            .into_iter()
            .find(|m| m.body.role == Role::User)
            .and_then(|m| m.body.content)
            .map(|c| clip(&c, 60))
            .unwrap_or_else(|| "(empty)".into());
        let marker = if session.id == state.session_id {
            " ← current"
        } else {
            ""
        };
        lines.push(format!(
            "{}. {} — {} — “{}”{marker}",
            n + 1,
            session.title.as_deref().unwrap_or("(untitled)"),
            session.id,
            preview
        ));
    }
    lines.push("/resume N, an id or a title goes back to one.".into());
    Ok(lines.join("\n"))
}

async fn resume(
    deps: &Deps,
    state: &mut ConversationState,
    which: &str,
) -> Result<String, StoreError> {
    let store = &deps.store;
    let target = if let Ok(n) = which.parse::<usize>() {
        recent(deps, state)
            .await?
            .into_iter()
            .nth(n.saturating_sub(1))
            .filter(|_| n > 0)
    } else if let Some(session) = store.session(which).await? {
        Some(session)
    } else {
        store.session_by_title(which).await?
    };
    let Some(target) = target.filter(|s| s.conversation_id == state.conversation_id) else {
        return Ok(format!(
            "No session {which:?} in this conversation; /sessions lists them."
        ));
    };
    if target.id == state.session_id {
        return Ok("That is the current session.".into());
    }
    let session = store.resume(state.conversation_id, &target.id).await?;
    let label = session.title.clone().unwrap_or_else(|| session.id.clone());
    switch_to(state, session);
    Ok(format!("Resumed {label}."))
}

async fn search(deps: &Deps, state: &ConversationState, text: &str) -> Result<String, StoreError> {
    let hits = deps
        .store
        .search(&SearchQuery {
            text: text.to_owned(),
            source: None,
            role: None,
            conversation_id: Some(state.conversation_id),
            lineage_of: None,
            limit: HITS,
        })
        .await?;
    if hits.is_empty() {
        return Ok(format!("Nothing found for {text:?}."));
    }
    let lines: Vec<String> = hits
        .iter()
        .map(|h| {
            format!(
                "• {} ({}, {}): {}",
                h.created_at.format("%Y-%m-%d"),
                h.role.as_str(),
                h.session_id,
                h.snippet
            )
        })
        .collect();
    Ok(lines.join("\n"))
}

async fn current(deps: &Deps, state: &ConversationState) -> Result<Session, StoreError> {
    deps.store
        .session(&state.session_id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "session",
            id: state.session_id.clone(),
        })
}

fn model_name(deps: &Deps, state: &ConversationState) -> String {
    state
        .model
        .clone()
        .or_else(|| deps.agent().providers.first().map(|p| p.model().to_owned()))
        .unwrap_or_else(|| "(none configured)".into())
}

async fn status(deps: &Deps, state: &ConversationState) -> Result<String, StoreError> {
    let session = current(deps, state).await?;
    let window = state
        .context
        .context_length
        .or_else(|| {
            deps.agent()
                .providers
                .first()
                .map(|p| p.spec().context_length)
        })
        .unwrap_or(0);
    let threshold = deps
        .agent()
        .compressor
        .as_ref()
        .map(|c| c.settings.threshold(window));
    let context = match (state.context.tokens, threshold) {
        (0, _) => "no model call yet".to_owned(),
        (tokens, Some(threshold)) => format!(
            "{}{tokens} of {threshold} tokens before compression",
            if state.context.estimated { "~" } else { "" }
        ),
        (tokens, None) => format!("{tokens} tokens"),
    };
    let u = session.usage;
    Ok(format!(
        "Session {}{}\nModel: {}\nContext: {context}\nCompressions: {}\nTokens: {} in, {} out; about ${:.4}",
        session.id,
        session.title.map(|t| format!(" ({t})")).unwrap_or_default(),
        model_name(deps, state),
        session.compression_count,
        u.input_tokens,
        u.output_tokens,
        u.estimated_cost_usd,
    ))
}

fn clip(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}
