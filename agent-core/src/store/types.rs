//! Rows of the session store as the rest of Iris sees them.
//!
//! These are plain data: both backends map their rows into these types so callers never see
//! which database answered.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a conversation lives: the routing key plus the platform ids it was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewConversation {
    /// The routing key, `source:kind:ids` (DESIGN.md §3). Unique.
    pub key: String,
    /// `telegram`, `discord`, `webhook`, `api`, `cli`…; copied onto every session.
    pub source: String,
    pub chat_id: Option<String>,
    pub thread_id: Option<String>,
    pub user_id: Option<String>,
}

impl NewConversation {
    /// A conversation known only by its key and source.
    pub fn new(key: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            source: source.into(),
            chat_id: None,
            thread_id: None,
            user_id: None,
        }
    }
}

/// A conversation: the stable identity of a chat place. It points at its current session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: i64,
    pub key: String,
    pub source: String,
    pub chat_id: Option<String>,
    pub thread_id: Option<String>,
    pub user_id: Option<String>,
    pub current_session_id: Option<String>,
    /// Per-conversation settings (model override, busy mode…), a JSON object.
    pub settings: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Why a session stopped being the current one. The first reason written wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    UserReset,
    SessionSwitch,
    Branched,
    Compression,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserReset => "user_reset",
            Self::SessionSwitch => "session_switch",
            Self::Branched => "branched",
            Self::Compression => "compression",
        }
    }

    /// Parses the stored form; unknown text (a newer version wrote it) is kept as `None`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "user_reset" => Self::UserReset,
            "session_switch" => Self::SessionSwitch,
            "branched" => Self::Branched,
            "compression" => Self::Compression,
            _ => return None,
        })
    }
}

/// What a new session starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// A title; must be unique among all sessions.
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_prompt: Option<String>,
}

/// One context window of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `YYYYMMDD_HHMMSS_<6 hex>`, UTC.
    pub id: String,
    pub conversation_id: i64,
    pub source: String,
    pub parent_session_id: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The stored text; see [`EndReason::parse`].
    pub end_reason: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    pub usage: SessionUsage,
    pub message_count: i64,
    pub tool_call_count: i64,
    /// Compressions along this session's lineage up to and including the one that created it.
    pub compression_count: i64,
}

/// Token and cost totals of a session. Also used as the increment in
/// [`SessionStore::add_usage`](super::SessionStore::add_usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionUsage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub estimated_cost_usd: f64,
    pub api_call_count: i64,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "system" => Self::System,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => return None,
        })
    }
}

/// A message to append to a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    pub role: Role,
    pub content: Option<String>,
    /// For `tool` messages: the call this result answers.
    pub tool_call_id: Option<String>,
    /// For assistant messages that call tools: the calls, as the provider sent them (JSON array).
    pub tool_calls: Option<serde_json::Value>,
    /// For `tool` messages: the tool's name.
    pub tool_name: Option<String>,
    pub token_count: Option<i64>,
    pub finish_reason: Option<String>,
    pub reasoning: Option<String>,
    pub platform_message_id: Option<String>,
}

impl NewMessage {
    /// A plain text message.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_call_id: None,
            tool_calls: None,
            tool_name: None,
            token_count: None,
            finish_reason: None,
            reasoning: None,
            platform_message_id: None,
        }
    }

    /// How many tool calls this message makes (counts towards `tool_call_count`).
    pub fn tool_call_len(&self) -> i64 {
        match &self.tool_calls {
            Some(serde_json::Value::Array(calls)) => calls.len() as i64,
            Some(serde_json::Value::Null) | None => 0,
            Some(_) => 1,
        }
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: i64,
    pub session_id: String,
    pub created_at: DateTime<Utc>,
    pub active: bool,
    #[serde(flatten)]
    pub body: NewMessage,
}

/// Processing state of an inbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxState {
    /// Persisted and acknowledged to the platform, not yet answered.
    Accepted,
    /// A turn is working on it.
    Processing,
    Done,
    /// Gave up after repeated failures; the user was told.
    Failed,
}

impl InboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Processing => "processing",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "accepted" => Self::Accepted,
            "processing" => Self::Processing,
            "done" => Self::Done,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

/// An inbound platform message to persist before acknowledging it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewInboxItem {
    pub source: String,
    /// The platform's own id; `(source, platform_message_id)` is unique.
    pub platform_message_id: String,
    pub conversation_key: String,
    pub payload: serde_json::Value,
}

/// A stored inbox row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxItem {
    pub id: i64,
    pub source: String,
    pub platform_message_id: String,
    pub conversation_key: String,
    pub payload: serde_json::Value,
    pub state: InboxState,
    pub attempts: i64,
    pub received_at: DateTime<Utc>,
}

/// The answer of [`SessionStore::inbox_accept`](super::SessionStore::inbox_accept).
#[derive(Debug, Clone, PartialEq)]
pub struct InboxAccept {
    pub item: InboxItem,
    /// False when the same `(source, platform_message_id)` was seen before: do not run it again.
    pub fresh: bool,
}

/// Delivery state of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    Pending,
    Delivered,
    Failed,
}

impl OutboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => Self::Pending,
            "delivered" => Self::Delivered,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

/// A reply to deliver. `(inbox_id, target)` is unique, so a retried turn reuses its row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewOutboxItem {
    /// The inbox row this reply answers, when there is one.
    pub inbox_id: Option<i64>,
    /// Where it goes, e.g. `telegram:12345` or a callback URL.
    pub target: String,
    pub payload: serde_json::Value,
}

/// A stored outbox row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxItem {
    pub id: i64,
    pub inbox_id: Option<i64>,
    pub target: String,
    pub payload: serde_json::Value,
    pub state: OutboxState,
    pub attempts: i64,
    pub platform_message_ids: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Which conversations to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversationFilter {
    pub source: Option<String>,
    /// At most this many, most recently active first. `0` means 50.
    pub limit: u32,
}

/// A conversation as an operator lists it: where it is now and when it was last active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationSummary {
    #[serde(flatten)]
    pub conversation: Conversation,
    /// The current session's title, if it has one.
    pub title: Option<String>,
    /// Messages in the current session.
    pub message_count: i64,
    /// The newest message of the current session, or else when the conversation last changed.
    pub last_active_at: DateTime<Utc>,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub conversation_id: Option<i64>,
    pub source: Option<String>,
    /// At most this many, newest first. `0` means 50.
    pub limit: u32,
}

/// A search over message content, tool names and tool-call arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// Whatever the user typed; never a syntax error.
    pub text: String,
    pub source: Option<String>,
    pub role: Option<Role>,
    pub conversation_id: Option<i64>,
    /// Only the lineage (root and every descendant) of this session.
    pub lineage_of: Option<String>,
    /// At most this many hits, newest first. `0` means 20.
    pub limit: u32,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    pub message_id: i64,
    pub session_id: String,
    /// The first session of the hit's lineage (follow `parent_session_id` up).
    pub root_session_id: String,
    pub conversation_id: i64,
    pub source: String,
    pub role: Role,
    /// A short excerpt with the matched terms in `[brackets]`.
    pub snippet: String,
    pub created_at: DateTime<Utc>,
}

/// What `doctor` needs to know about the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// Versions this build knows.
    pub known: Vec<i64>,
    /// Versions applied in the database.
    pub applied: Vec<i64>,
}

impl MigrationStatus {
    /// True when every known migration is applied.
    pub fn is_current(&self) -> bool {
        self.known.iter().all(|v| self.applied.contains(v))
    }
}

/// An unknown user's request for access ([`SessionStore::pairing_request`](super::SessionStore::pairing_request)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPairing {
    /// `telegram`, `discord`.
    pub platform: String,
    pub user_id: String,
    pub username: Option<String>,
    /// The code's hash (the code itself is never stored).
    pub code_hash: String,
}

/// Limits on pairing requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairingLimits {
    /// How long a code is valid.
    pub ttl: std::time::Duration,
    /// Pending (unexpired, unapproved) requests per platform at most.
    pub max_pending: i64,
    /// One request per user per this long.
    pub per_user_interval: std::time::Duration,
}

/// What became of a pairing request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairingOutcome {
    /// Stored; the user gets the code.
    Created,
    /// The user is already paired.
    AlreadyPaired,
    /// The user asked less than `per_user_interval` ago.
    TooSoon,
    /// `max_pending` requests are waiting for the operator.
    TooMany,
}

/// A user the operator approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairedUser {
    pub platform: String,
    pub user_id: String,
    pub username: Option<String>,
}
