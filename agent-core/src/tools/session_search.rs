//! `session_search`: lets the agent look up what was said before — including what
//! compression summarised away, since old sessions keep every message.
//!
//! Scoped to the current session's lineage (every session sharing its root: the chain of
//! compressions and branches) by default, or to the whole conversation when configured
//! wider. Never across conversations: one user's history is not another's search result.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolOutput, str_arg};
use crate::store::{SearchQuery, SessionStore};

/// How far a search reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchScope {
    /// The current session's lineage.
    #[default]
    Lineage,
    /// Every session of the conversation (including ones started with `/new`).
    Conversation,
}

/// The store's full-text search as a tool.
pub struct SessionSearch {
    store: Arc<dyn SessionStore>,
    scope: SearchScope,
}

impl SessionSearch {
    pub fn new(store: Arc<dyn SessionStore>, scope: SearchScope) -> Self {
        Self { store, scope }
    }
}

#[async_trait::async_trait]
impl Tool for SessionSearch {
    fn name(&self) -> &str {
        "session_search"
    }

    fn description(&self) -> &str {
        "Search earlier messages of this conversation, including parts compressed out of your \
         context. query: words to find (any text); limit: at most 20 hits, newest first."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20}
        }})
    }

    async fn call(
        &self,
        args: Value,
        ctx: &ToolContext,
        _cancel: &CancellationToken,
    ) -> ToolOutput {
        let text = match str_arg(&args, "query") {
            Ok(q) => q.to_owned(),
            Err(e) => return e,
        };
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(10, |l| l.clamp(1, 20)) as u32;
        let mut query = SearchQuery {
            text,
            limit,
            ..Default::default()
        };
        match self.scope {
            SearchScope::Lineage => query.lineage_of = Some(ctx.session_id.clone()),
            SearchScope::Conversation => query.conversation_id = Some(ctx.conversation_id),
        }
        let hits = match self.store.search(&query).await {
            Ok(hits) => hits,
            Err(e) => return ToolOutput::error(format!("search failed: {e}")),
        };
        if hits.is_empty() {
            return ToolOutput::ok("no matches");
        }
        let lines: Vec<String> = hits
            .iter()
            .map(|h| {
                format!(
                    "[{} {} {}] {}",
                    h.created_at.format("%Y-%m-%d %H:%M"),
                    h.session_id,
                    h.role.as_str(),
                    h.snippet
                )
            })
            .collect();
        ToolOutput::ok(lines.join("\n"))
    }
}
