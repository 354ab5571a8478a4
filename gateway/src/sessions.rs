//! `iris sessions list | show | search | export | conversations | end`.
//!
//! When a daemon answers at `server.bind` and the admin token is in the environment, every
//! subcommand goes through its admin API. `end` must: a conversation's actor holds its current
//! session in memory, and only the actor can move it. With no daemon running everything reads
//! and writes the store directly; with a daemon but no token, reads still go to the store (a
//! note says so) and `end` refuses.
//!
//! Output is a plain table for people and `--json` for scripts. `show` prints the session's
//! lineage (root first) before its messages, so a compressed conversation can be followed back
//! to where it started.

use std::sync::Arc;

use agent_core::store::{
    ConversationFilter, ConversationSummary, Message, Role, Rotation, SearchHit, SearchQuery,
    Session, SessionFilter, SessionStore,
};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

use crate::admin_client::{AdminClient, daemon_running, daemon_url};
use crate::cli::SessionsCommand;
use crate::config::Loaded;

/// Where the answers come from.
enum Via {
    Daemon(AdminClient),
    Store(Arc<dyn SessionStore>),
}

/// A session ended on request: which, and the one the conversation goes on in.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Ended {
    key: String,
    ended_session_id: String,
    session_id: String,
}

impl Via {
    /// The daemon when one runs and the token is set; otherwise the store (unless `writes`
    /// and a daemon runs: then only the daemon may change the conversation).
    async fn pick(loaded: &Loaded, writes: bool) -> Result<Self> {
        let url = daemon_url(&loaded.config.server.bind);
        let variable = &loaded.config.server.admin_token_env;
        if daemon_running(&url).await {
            match loaded.secret(variable) {
                Some(token) => return Ok(Self::Daemon(AdminClient::new(&url, &token)?)),
                None if writes => bail!(
                    "a daemon is running at {url}: this goes through its admin API, and ${variable} (server.admin_token_env) is unset"
                ),
                None => eprintln!(
                    "iris sessions: a daemon is running at {url} but ${variable} is unset; reading the store directly"
                ),
            }
        }
        let store_url = loaded.store_url();
        let store = agent_core::store::open(&store_url)
            .await
            .with_context(|| format!("cannot open the store at {store_url}"))?;
        Ok(Self::Store(store))
    }

    async fn sessions(
        &self,
        filter: SessionFilter,
        conversation: Option<&str>,
    ) -> Result<Vec<Session>> {
        match self {
            Self::Daemon(api) => {
                let mut query = vec![("limit", filter.limit.to_string())];
                query.extend(filter.source.map(|s| ("source", s)));
                query.extend(conversation.map(|c| ("conversation", c.to_owned())));
                from_field(api.get("/admin/sessions", &query).await?, "sessions")
            }
            Self::Store(store) => {
                let conversation_id = match conversation {
                    Some(which) => Some(find_conversation(store.as_ref(), which).await?.id),
                    None => None,
                };
                Ok(store
                    .list_sessions(&SessionFilter {
                        conversation_id,
                        ..filter
                    })
                    .await?)
            }
        }
    }

    /// A session, its lineage (root first) and its messages.
    async fn load(&self, id: &str) -> Result<(Session, Vec<Session>, Vec<Message>)> {
        match self {
            Self::Daemon(api) => {
                let path = format!("/admin/sessions/{}", urlencoding(id));
                let body = api.get(&path, &[]).await?;
                Ok((
                    from_field(body.clone(), "session")?,
                    from_field(body.clone(), "lineage")?,
                    from_field(body, "messages")?,
                ))
            }
            Self::Store(store) => {
                let session = store
                    .session(id)
                    .await?
                    .ok_or_else(|| anyhow!("no session {id:?}"))?;
                let lineage = store.lineage(id).await?;
                let messages = store.messages(id).await?;
                Ok((session, lineage, messages))
            }
        }
    }

    async fn search(&self, query: SearchQuery) -> Result<Vec<SearchHit>> {
        match self {
            Self::Daemon(api) => {
                let mut params = vec![("q", query.text), ("limit", query.limit.to_string())];
                params.extend(query.source.map(|s| ("source", s)));
                params.extend(query.role.map(|r| ("role", r.as_str().to_owned())));
                from_field(api.get("/admin/search", &params).await?, "hits")
            }
            Self::Store(store) => {
                store.sync_search_index().await?;
                Ok(store.search(&query).await?)
            }
        }
    }

    async fn conversations(&self, filter: ConversationFilter) -> Result<Vec<ConversationSummary>> {
        match self {
            Self::Daemon(api) => {
                let mut query = vec![("limit", filter.limit.to_string())];
                query.extend(filter.source.map(|s| ("source", s)));
                from_field(
                    api.get("/admin/conversations", &query).await?,
                    "conversations",
                )
            }
            Self::Store(store) => Ok(store.list_conversations(&filter).await?),
        }
    }

    /// Ends the conversation's current session (no daemon runs when this reaches the store).
    async fn end(&self, which: &str) -> Result<Ended> {
        match self {
            Self::Daemon(api) => {
                let path = format!("/admin/conversations/{}/end", urlencoding(which));
                Ok(serde_json::from_value(api.post(&path).await?)?)
            }
            Self::Store(store) => {
                let conversation = find_conversation(store.as_ref(), which).await?;
                let current = conversation
                    .current_session_id
                    .ok_or_else(|| anyhow!("conversation {which:?} has no current session"))?;
                let fresh = store
                    .rotate(&Rotation::reset(conversation.id, &current, None))
                    .await?;
                Ok(Ended {
                    key: conversation.key,
                    ended_session_id: current,
                    session_id: fresh.id,
                })
            }
        }
    }
}

/// `body[field]` as `T`.
fn from_field<T: serde::de::DeserializeOwned>(mut body: Value, field: &str) -> Result<T> {
    serde_json::from_value(body[field].take())
        .with_context(|| format!("the daemon's answer has no readable {field:?}"))
}

/// A path segment: ids and keys are ASCII, but a key holds `:` and could hold anything.
fn urlencoding(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A conversation by its numeric id or its key.
async fn find_conversation(
    store: &dyn SessionStore,
    which: &str,
) -> Result<agent_core::store::Conversation> {
    crate::admin::conversation_by_id_or_key(store, which)
        .await?
        .ok_or_else(|| anyhow!("no conversation {which:?}"))
}

/// Runs one `sessions` subcommand.
pub async fn run(loaded: &Loaded, command: SessionsCommand) -> Result<()> {
    let writes = matches!(command, SessionsCommand::End { .. });
    let via = Via::pick(loaded, writes).await?;
    match command {
        SessionsCommand::List {
            conversation,
            source,
            limit,
            json,
        } => {
            let filter = SessionFilter {
                source,
                limit,
                ..Default::default()
            };
            let sessions = via.sessions(filter, conversation.as_deref()).await?;
            list(&sessions, json)
        }
        SessionsCommand::Show { id, json } => show(via.load(&id).await?, json),
        SessionsCommand::Export { id, format } => {
            if !matches!(format.as_str(), "markdown" | "md" | "json") {
                bail!("--format must be markdown or json, not {format:?}");
            }
            export(via.load(&id).await?, &format)
        }
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
            search(&via.search(query).await?, json)
        }
        SessionsCommand::Conversations {
            source,
            limit,
            json,
        } => conversations(
            &via.conversations(ConversationFilter { source, limit })
                .await?,
            json,
        ),
        SessionsCommand::End { conversation, json } => {
            let ended = via.end(&conversation).await?;
            if json {
                return print_json(&ended);
            }
            println!(
                "{}: ended {}; the conversation goes on in {}",
                ended.key, ended.ended_session_id, ended.session_id
            );
            Ok(())
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

fn list(sessions: &[Session], json: bool) -> Result<()> {
    if json {
        return print_json(&sessions);
    }
    if sessions.is_empty() {
        println!("no sessions");
    }
    for s in sessions {
        println!("{}", session_line(s));
    }
    Ok(())
}

/// A session, its lineage (root first), its messages.
type Transcript = (Session, Vec<Session>, Vec<Message>);

fn show((session, lineage, messages): Transcript, json: bool) -> Result<()> {
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
fn export((session, lineage, messages): Transcript, format: &str) -> Result<()> {
    match format {
        "markdown" | "md" => {
            print!("{}", crate::admin::markdown(&session, &lineage, &messages));
            Ok(())
        }
        _ => print_json(&serde_json::json!({
            "session": session,
            "lineage": lineage,
            "messages": messages,
        })),
    }
}

fn search(hits: &[SearchHit], json: bool) -> Result<()> {
    if json {
        return print_json(&hits);
    }
    if hits.is_empty() {
        println!("no matches");
    }
    for hit in hits {
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

fn conversations(listed: &[ConversationSummary], json: bool) -> Result<()> {
    if json {
        return print_json(&listed);
    }
    if listed.is_empty() {
        println!("no conversations");
    }
    for c in listed {
        println!(
            "{:>6}  {:<32} {:>5} msgs  {}  {}  {}",
            c.conversation.id,
            c.conversation.key,
            c.message_count,
            c.last_active_at.format("%Y-%m-%d %H:%M"),
            c.conversation.current_session_id.as_deref().unwrap_or("-"),
            c.title.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}
