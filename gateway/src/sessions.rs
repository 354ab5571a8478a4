//! `iris sessions list | show | search | export`: reads the store directly.
//!
//! Output is a plain table for people and `--json` for scripts. `show` prints the session's
//! lineage (root first) before its messages, so a compressed conversation can be followed back
//! to where it started.

use agent_core::store::{Role, SearchQuery, Session, SessionFilter, SessionStore};
use anyhow::{Context, Result, anyhow};

use crate::cli::SessionsCommand;
use crate::config::Loaded;

/// Runs one `sessions` subcommand.
pub async fn run(loaded: &Loaded, command: SessionsCommand) -> Result<()> {
    let url = loaded.store_url();
    let store = agent_core::store::open(&url)
        .await
        .with_context(|| format!("cannot open the store at {url}"))?;
    let store = store.as_ref();
    match command {
        SessionsCommand::List {
            source,
            limit,
            json,
        } => list(store, source, limit, json).await,
        SessionsCommand::Show { id, json } => show(store, &id, json).await,
        SessionsCommand::Export { id, format } => export(store, &id, &format).await,
        SessionsCommand::Search {
            query,
            source,
            role,
            limit,
            json,
        } => {
            let role = match role.as_deref() {
                None => None,
                Some(text) => Some(Role::parse(text).ok_or_else(|| {
                    anyhow!("unknown role {text:?}: use user, assistant, tool or system")
                })?),
            };
            let query = SearchQuery {
                text: query.join(" "),
                source,
                role,
                limit,
                ..Default::default()
            };
            search(store, &query, json).await
        }
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn session_line(s: &Session) -> String {
    format!(
        "{}  {:<9} {:>5} msgs  {:<14} {}",
        s.id,
        s.source,
        s.message_count,
        s.end_reason.as_deref().unwrap_or("open"),
        s.title.as_deref().unwrap_or("-"),
    )
}

async fn list(
    store: &dyn SessionStore,
    source: Option<String>,
    limit: u32,
    json: bool,
) -> Result<()> {
    let sessions = store
        .list_sessions(&SessionFilter {
            source,
            limit,
            ..Default::default()
        })
        .await?;
    if json {
        return print_json(&sessions);
    }
    if sessions.is_empty() {
        println!("no sessions");
    }
    for s in &sessions {
        println!("{}", session_line(s));
    }
    Ok(())
}

/// A session, its lineage (root first) and its messages.
async fn load(
    store: &dyn SessionStore,
    id: &str,
) -> Result<(Session, Vec<Session>, Vec<agent_core::store::Message>)> {
    let session = store
        .session(id)
        .await?
        .ok_or_else(|| anyhow!("no session {id:?}"))?;
    let lineage = store.lineage(id).await?;
    let messages = store.messages(id).await?;
    Ok((session, lineage, messages))
}

async fn show(store: &dyn SessionStore, id: &str, json: bool) -> Result<()> {
    let (session, lineage, messages) = load(store, id).await?;
    if json {
        return print_json(&serde_json::json!({
            "session": session,
            "lineage": lineage,
            "messages": messages,
        }));
    }
    println!("lineage (root first):");
    for (depth, s) in lineage.iter().enumerate() {
        println!("  {}{}", "  ".repeat(depth), session_line(s));
    }
    let u = &session.usage;
    println!(
        "model {}  tokens in {} out {}  cost ${:.4}  api calls {}  compressions {}",
        session.model.as_deref().unwrap_or("-"),
        u.input_tokens,
        u.output_tokens,
        u.estimated_cost_usd,
        u.api_call_count,
        session.compression_count
    );
    println!("messages:");
    for m in &messages {
        let text = m.body.content.as_deref().unwrap_or("");
        let tools = m
            .body
            .tool_calls
            .as_ref()
            .map(|c| format!(" tool_calls={c}"))
            .unwrap_or_default();
        println!("  [{}] {:<9} {}{}", m.id, m.body.role.as_str(), text, tools);
    }
    Ok(())
}

/// The session as the admin API exports it: a Markdown transcript or JSON.
async fn export(store: &dyn SessionStore, id: &str, format: &str) -> Result<()> {
    let (session, lineage, messages) = load(store, id).await?;
    match format {
        "markdown" | "md" => {
            print!("{}", crate::admin::markdown(&session, &lineage, &messages));
            Ok(())
        }
        "json" => print_json(&serde_json::json!({
            "session": session,
            "lineage": lineage,
            "messages": messages,
        })),
        other => Err(anyhow!("--format must be markdown or json, not {other:?}")),
    }
}

async fn search(store: &dyn SessionStore, query: &SearchQuery, json: bool) -> Result<()> {
    store.sync_search_index().await?;
    let hits = store.search(query).await?;
    if json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        println!("no matches");
    }
    for hit in &hits {
        println!(
            "{}  {:<9} {:<9} {}  (root {})",
            hit.session_id,
            hit.source,
            hit.role.as_str(),
            hit.snippet,
            hit.root_session_id
        );
    }
    Ok(())
}
