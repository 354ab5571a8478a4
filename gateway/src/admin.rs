//! The admin API (DESIGN.md §10), behind `Authorization: Bearer <admin token>` (the variable
//! `server.admin_token_env` names; compared in constant time). Without a token in the
//! environment the API is closed: every call is refused.
//!
//! - `GET /admin/conversations?source=&limit=`: conversations, most recently active first, each
//!   with its current session's title and message count.
//! - `POST /admin/conversations/{id or key}/end`: ends the conversation's current session
//!   through its actor, exactly as the user's `/new` would (a running turn is interrupted);
//!   answers the ended and the new session's ids.
//! - `GET /admin/sessions?conversation=&source=&limit=`: sessions, newest first.
//! - `GET /admin/sessions/{id}`: a session with its lineage (root first) and messages.
//! - `GET /admin/sessions/{id}/export?format=json|markdown`: the same as a download.
//! - `GET /admin/search?q=&source=&role=&limit=`: full-text search over every session.
//! - `GET /admin/logs?level=&source=&conversation=&session=`: the live log (see
//!   [`crate::logs`]).
//!
//! Errors are `{"error": {"code", "message"}}` with 400, 401, 404, 409, 429 or 503.

use std::sync::Arc;

use agent_core::store::{
    Conversation, ConversationFilter, Message, Role, SearchQuery, Session, SessionFilter,
    SessionStore,
};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

/// What the admin routes need.
pub struct AdminState {
    pub store: Arc<dyn SessionStore>,
    /// Where a conversation's session is ended (through its actor).
    pub gateway: Arc<crate::conversation::Gateway>,
    /// `None`: the API is closed.
    pub token: Option<String>,
}

/// The admin routes.
pub fn router(state: Arc<AdminState>) -> axum::Router {
    axum::Router::new()
        .route("/admin/conversations", get(conversations))
        .route("/admin/conversations/{id}/end", post(end))
        .route("/admin/sessions", get(list))
        .route("/admin/sessions/{id}", get(show))
        .route("/admin/sessions/{id}/export", get(export))
        .route("/admin/search", get(search))
        .route("/admin/logs", get(crate::logs::follow))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .with_state(state)
}

/// Every admin route is behind the token: checked here, once, before any handler runs.
async fn require_token(
    State(state): State<Arc<AdminState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match authorise(&state, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// An error answer: `{"error": {"code", "message"}}` with its status.
pub struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

fn error(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        code,
        message: message.into(),
    }
}

/// `Ok` when the request carries the admin token.
fn authorise(state: &AdminState, headers: &HeaderMap) -> Result<(), Refusal> {
    use subtle::ConstantTimeEq;
    let Some(token) = &state.token else {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "admin_closed",
            "the admin API is closed: no admin token is set (server.admin_token_env)",
        ));
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bool::from(token.as_bytes().ct_eq(given.as_bytes())) {
        Ok(())
    } else {
        tracing::warn!("admin API: a request without the right token was refused");
        Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong admin token",
        ))
    }
}

fn store_error(failure: agent_core::store::StoreError) -> Refusal {
    tracing::error!(error = %failure, "admin API: store failed");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "store",
        "the store failed; see the log",
    )
}

#[derive(Debug, Deserialize)]
struct ListParams {
    conversation: Option<String>,
    source: Option<String>,
    limit: Option<u32>,
}

async fn conversations(
    State(state): State<Arc<AdminState>>,
    Query(params): Query<ListParams>,
) -> Response {
    let filter = ConversationFilter {
        source: params.source,
        limit: params.limit.unwrap_or(50).min(1_000),
    };
    match state.store.list_conversations(&filter).await {
        Ok(listed) => Json(json!({"conversations": listed})).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// A conversation by its numeric id or its key (`telegram:dm:42`; a key always has a
/// `source:` prefix, so it never reads as a number).
pub async fn conversation_by_id_or_key(
    store: &dyn SessionStore,
    which: &str,
) -> Result<Option<Conversation>, agent_core::store::StoreError> {
    match which.parse::<i64>() {
        Ok(id) => store.conversation_by_id(id).await,
        Err(_) => store.conversation_by_key(which).await,
    }
}

/// [`conversation_by_id_or_key`], or the refusal to answer with.
async fn find_conversation(store: &dyn SessionStore, which: &str) -> Result<Conversation, Refusal> {
    match conversation_by_id_or_key(store, which).await {
        Ok(Some(conversation)) => Ok(conversation),
        Ok(None) => Err(error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no conversation {which:?}"),
        )),
        Err(e) => Err(store_error(e)),
    }
}

async fn end(State(state): State<Arc<AdminState>>, Path(which): Path<String>) -> Response {
    use crate::conversation::{EndError, SubmitError};
    let conversation = match find_conversation(state.store.as_ref(), &which).await {
        Ok(conversation) => conversation,
        Err(refused) => return refused.into_response(),
    };
    let Some(ended) = conversation.current_session_id.clone() else {
        return error(
            StatusCode::CONFLICT,
            "no_session",
            format!("conversation {which:?} has no current session"),
        )
        .into_response();
    };
    match state.gateway.end_current_session(&conversation.key).await {
        Ok(reply) if reply.error.is_none() => {
            tracing::info!(conversation = %conversation.key, ended = %ended, session = %reply.session_id, "admin API: session ended");
            Json(json!({
                "conversation": conversation.id,
                "key": conversation.key,
                "ended_session_id": ended,
                "session_id": reply.session_id,
            }))
            .into_response()
        }
        Ok(reply) => error(
            StatusCode::CONFLICT,
            "not_ended",
            format!(
                "the conversation did not start a new session: {}",
                reply.text
            ),
        )
        .into_response(),
        Err(EndError::Submit(SubmitError::Busy)) => error(
            StatusCode::TOO_MANY_REQUESTS,
            "busy",
            "the conversation's queue is full; try again shortly",
        )
        .into_response(),
        Err(EndError::Submit(SubmitError::Store(e))) => store_error(e).into_response(),
        Err(EndError::ShuttingDown) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the daemon is shutting down; the request runs on its next start",
        )
        .into_response(),
    }
}

async fn list(State(state): State<Arc<AdminState>>, Query(params): Query<ListParams>) -> Response {
    let conversation_id = match params.conversation.as_deref() {
        None => None,
        Some(which) => match find_conversation(state.store.as_ref(), which).await {
            Ok(conversation) => Some(conversation.id),
            Err(refused) => return refused.into_response(),
        },
    };
    let filter = SessionFilter {
        conversation_id,
        source: params.source,
        limit: params.limit.unwrap_or(50).min(1_000),
    };
    match state.store.list_sessions(&filter).await {
        Ok(sessions) => Json(json!({"sessions": sessions})).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// A session, its lineage and its messages.
async fn load(
    store: &dyn SessionStore,
    id: &str,
) -> Result<(Session, Vec<Session>, Vec<Message>), Refusal> {
    let session = match store.session(id).await {
        Ok(Some(session)) => session,
        Ok(None) => {
            return Err(error(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no session {id:?}"),
            ));
        }
        Err(e) => return Err(store_error(e)),
    };
    let lineage = store.lineage(id).await.map_err(store_error)?;
    let messages = store.messages(id).await.map_err(store_error)?;
    Ok((session, lineage, messages))
}

async fn show(State(state): State<Arc<AdminState>>, Path(id): Path<String>) -> Response {
    match load(state.store.as_ref(), &id).await {
        Ok((session, lineage, messages)) => {
            Json(json!({"session": session, "lineage": lineage, "messages": messages}))
                .into_response()
        }
        Err(refused) => refused.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct ExportParams {
    format: Option<String>,
}

async fn export(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Query(params): Query<ExportParams>,
) -> Response {
    let format = params.format.as_deref().unwrap_or("json");
    if !matches!(format, "json" | "markdown" | "md") {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("format must be json or markdown, not {format:?}"),
        )
        .into_response();
    }
    let (session, lineage, messages) = match load(state.store.as_ref(), &id).await {
        Ok(loaded) => loaded,
        Err(refused) => return refused.into_response(),
    };
    let safe_id: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if format == "json" {
        let disposition = format!("attachment; filename=\"{safe_id}.json\"");
        return (
            [("content-disposition", disposition)],
            Json(json!({"session": session, "lineage": lineage, "messages": messages})),
        )
            .into_response();
    }
    let disposition = format!("attachment; filename=\"{safe_id}.md\"");
    (
        [
            ("content-type", "text/markdown; charset=utf-8".to_owned()),
            ("content-disposition", disposition),
        ],
        markdown(&session, &lineage, &messages),
    )
        .into_response()
}

/// A session as a Markdown transcript: a heading, where it came from, then each message.
pub fn markdown(session: &Session, lineage: &[Session], messages: &[Message]) -> String {
    let mut out = format!(
        "# Session {}{}\n\n",
        session.id,
        session
            .title
            .as_deref()
            .map(|t| format!(" — {t}"))
            .unwrap_or_default()
    );
    out.push_str(&format!(
        "- source: {}\n- model: {}\n- tokens: {} in, {} out; about ${:.4}\n",
        session.source,
        session.model.as_deref().unwrap_or("-"),
        session.usage.input_tokens,
        session.usage.output_tokens,
        session.usage.estimated_cost_usd,
    ));
    if lineage.len() > 1 {
        let chain: Vec<&str> = lineage.iter().map(|s| s.id.as_str()).collect();
        out.push_str(&format!("- lineage: {}\n", chain.join(" → ")));
    }
    out.push('\n');
    for m in messages {
        let who = match m.body.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
            Role::System => "System",
        };
        let text = m.body.content.as_deref().unwrap_or("");
        match (&m.body.tool_name, &m.body.tool_calls) {
            (Some(tool), _) => out.push_str(&format!("**{who}** ({tool}):\n\n{text}\n\n")),
            (None, Some(calls)) if text.is_empty() => {
                out.push_str(&format!("**{who}** calls tools: `{calls}`\n\n"));
            }
            _ => out.push_str(&format!("**{who}**:\n\n{text}\n\n")),
        }
    }
    out
}

#[derive(Debug, Deserialize)]
struct SearchParams {
    q: Option<String>,
    source: Option<String>,
    role: Option<String>,
    limit: Option<u32>,
}

async fn search(
    State(state): State<Arc<AdminState>>,
    Query(params): Query<SearchParams>,
) -> Response {
    let text = params.q.unwrap_or_default();
    if text.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "bad_request", "q is required").into_response();
    }
    let role = match params.role.as_deref() {
        None => None,
        Some(r) => match Role::parse(r) {
            Some(role) => Some(role),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("unknown role {r:?}: use user, assistant, tool or system"),
                )
                .into_response();
            }
        },
    };
    if let Err(e) = state.store.sync_search_index().await {
        return store_error(e).into_response();
    }
    let query = SearchQuery {
        text,
        source: params.source,
        role,
        limit: params.limit.unwrap_or(20).min(200),
        ..Default::default()
    };
    match state.store.search(&query).await {
        Ok(hits) => Json(json!({"hits": hits})).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}
