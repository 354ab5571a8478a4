//! A turn's hot writes for SQLite, as plain `rusqlite` over one connection: the
//! [`group_commit`](super::group_commit) writer runs them, many conversations' writes in one
//! transaction. The statements match the shared sqlx ones in `common.rs` (PostgreSQL runs
//! those), and timestamps are written in the text form sqlx writes and reads (RFC 3339), so
//! every other query sees these rows exactly as if sqlx had written them.

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::search_text;
use super::{
    InboxAccept, InboxItem, InboxState, NewInboxItem, NewMessage, OutboxItem, OutboxState,
    SessionUsage, StoreError, StoreResult,
};

/// A timestamp as sqlx stores `DateTime<Utc>` in SQLite.
fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, false)
}

fn parse_timestamp(text: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z"))
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Invalid(format!("stored timestamp {text:?}: {e}")))
}

fn not_found(what: &'static str, id: impl ToString) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_string(),
    }
}

/// Appends `messages` to `session_id` and bumps its counters; returns their ids in order.
pub(super) fn append(
    db: &Connection,
    session_id: &str,
    messages: &[NewMessage],
) -> StoreResult<Vec<i64>> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let tool_calls: i64 = messages.iter().map(NewMessage::tool_call_len).sum();
    let updated = db
        .prepare_cached(
            "UPDATE sessions SET message_count = message_count + ?1, \
             tool_call_count = tool_call_count + ?2 WHERE id = ?3",
        )?
        .execute(params![messages.len() as i64, tool_calls, session_id])?;
    if updated == 0 {
        return Err(not_found("session", session_id));
    }
    let now = timestamp(Utc::now());
    let mut insert = db.prepare_cached(
        "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, \
         created_at, token_count, finish_reason, reasoning, platform_message_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    let mut ids = Vec::with_capacity(messages.len());
    for m in messages {
        let calls = m
            .tool_calls
            .as_ref()
            .map(serde_json::to_string)
            .transpose()?;
        insert.execute(params![
            session_id,
            m.role.as_str(),
            m.content,
            m.tool_call_id,
            calls,
            m.tool_name,
            now,
            m.token_count,
            m.finish_reason,
            m.reasoning,
            m.platform_message_id,
        ])?;
        ids.push(db.last_insert_rowid());
    }
    Ok(ids)
}

/// Adds one call's usage to the session's totals.
pub(super) fn add_usage(
    db: &Connection,
    session_id: &str,
    usage: &SessionUsage,
) -> StoreResult<()> {
    let done = db
        .prepare_cached(
            "UPDATE sessions SET input_tokens = input_tokens + ?1, \
             output_tokens = output_tokens + ?2, \
             cache_read_tokens = cache_read_tokens + ?3, \
             cache_write_tokens = cache_write_tokens + ?4, \
             reasoning_tokens = reasoning_tokens + ?5, \
             estimated_cost_usd = estimated_cost_usd + ?6, \
             api_call_count = api_call_count + ?7 WHERE id = ?8",
        )?
        .execute(params![
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            usage.estimated_cost_usd,
            usage.api_call_count,
            session_id,
        ])?;
    if done == 0 {
        return Err(not_found("session", session_id));
    }
    Ok(())
}

/// Records an inbound message unless `(source, platform_message_id)` was seen before.
pub(super) fn inbox_accept(
    db: &Connection,
    item: &NewInboxItem,
    payload: &str,
) -> StoreResult<InboxAccept> {
    let now = timestamp(Utc::now());
    let inserted = db
        .prepare_cached(
            "INSERT INTO inbox (source, platform_message_id, conversation_key, payload, \
             received_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
             ON CONFLICT (source, platform_message_id) DO NOTHING",
        )?
        .execute(params![
            item.source,
            item.platform_message_id,
            item.conversation_key,
            payload,
            now,
        ])?;
    let stored = db
        .prepare_cached("SELECT * FROM inbox WHERE source = ?1 AND platform_message_id = ?2")?
        .query_row(params![item.source, item.platform_message_id], |row| {
            Ok(inbox_from_row(row))
        })??;
    Ok(InboxAccept {
        item: stored,
        fresh: inserted == 1,
    })
}

/// Counts an attempt at an inbox row and marks it processing; returns the attempt number.
pub(super) fn inbox_begin_attempt(db: &Connection, id: i64) -> StoreResult<i64> {
    db.prepare_cached(
        "UPDATE inbox SET attempts = attempts + 1, state = 'processing', updated_at = ?1 \
         WHERE id = ?2 RETURNING attempts",
    )?
    .query_row(params![timestamp(Utc::now()), id], |row| row.get(0))
    .optional()?
    .ok_or_else(|| not_found("inbox row", id))
}

/// Sets an inbox row's state.
pub(super) fn inbox_set_state(db: &Connection, id: i64, state: InboxState) -> StoreResult<()> {
    let done = db
        .prepare_cached("UPDATE inbox SET state = ?1, updated_at = ?2 WHERE id = ?3")?
        .execute(params![state.as_str(), timestamp(Utc::now()), id])?;
    if done == 0 {
        return Err(not_found("inbox row", id));
    }
    Ok(())
}

/// What [`answer_inbox`] writes: the reply to one inbox row.
pub(super) struct Answer {
    pub inbox_id: i64,
    pub target: String,
    pub payload: String,
    pub delivered: bool,
    pub state: InboxState,
}

/// The inbox row's new state, its reply in the outbox (once per target), and the delivered
/// mark — together.
pub(super) fn answer_inbox(db: &Connection, answer: &Answer) -> StoreResult<OutboxItem> {
    let now = Utc::now();
    // The inbox row first: an unknown one writes nothing.
    inbox_set_state(db, answer.inbox_id, answer.state)?;
    let existing = db
        .prepare_cached("SELECT * FROM outbox WHERE inbox_id = ?1 AND target = ?2")?
        .query_row(params![answer.inbox_id, answer.target], |row| {
            Ok(outbox_from_row(row))
        })
        .optional()?
        .transpose()?;
    let mut item = match existing {
        Some(item) => item,
        None => db
            .prepare_cached(
                "INSERT INTO outbox (inbox_id, target, payload, created_at) \
                 VALUES (?1, ?2, ?3, ?4) RETURNING *",
            )?
            .query_row(
                params![
                    answer.inbox_id,
                    answer.target,
                    answer.payload,
                    timestamp(now)
                ],
                |row| Ok(outbox_from_row(row)),
            )??,
    };
    if answer.delivered && item.state == OutboxState::Pending {
        db.prepare_cached(
            "UPDATE outbox SET state = 'delivered', delivered_at = ?1 WHERE id = ?2",
        )?
        .execute(params![timestamp(now), item.id])?;
        item.state = OutboxState::Delivered;
        item.delivered_at = Some(now);
    }
    Ok(item)
}

fn inbox_from_row(row: &Row<'_>) -> StoreResult<InboxItem> {
    let state: String = row.get("state")?;
    let payload: String = row.get("payload")?;
    let received_at: String = row.get("received_at")?;
    Ok(InboxItem {
        id: row.get("id")?,
        source: row.get("source")?,
        platform_message_id: row.get("platform_message_id")?,
        conversation_key: row.get("conversation_key")?,
        payload: serde_json::from_str(&payload)?,
        state: InboxState::parse(&state)
            .ok_or_else(|| StoreError::Invalid(format!("unknown inbox state {state:?}")))?,
        attempts: row.get("attempts")?,
        received_at: parse_timestamp(&received_at)?,
    })
}

fn outbox_from_row(row: &Row<'_>) -> StoreResult<OutboxItem> {
    let state: String = row.get("state")?;
    let payload: String = row.get("payload")?;
    let ids: String = row.get("platform_message_ids")?;
    let created_at: String = row.get("created_at")?;
    let delivered_at: Option<String> = row.get("delivered_at")?;
    Ok(OutboxItem {
        id: row.get("id")?,
        inbox_id: row.get("inbox_id")?,
        target: row.get("target")?,
        payload: serde_json::from_str(&payload)?,
        state: OutboxState::parse(&state)
            .ok_or_else(|| StoreError::Invalid(format!("unknown outbox state {state:?}")))?,
        attempts: row.get("attempts")?,
        platform_message_ids: serde_json::from_str(&ids)?,
        created_at: parse_timestamp(&created_at)?,
        delivered_at: delivered_at.as_deref().map(parse_timestamp).transpose()?,
    })
}

/// Copies up to `limit` messages past the search high-water mark into the word index (and
/// those with CJK text into the trigram index) and moves the mark; returns how many.
pub(super) fn index_batch(db: &Connection, limit: u64) -> StoreResult<u64> {
    let last: i64 = db
        .prepare_cached("SELECT last_id FROM search_index_state WHERE name = 'messages'")?
        .query_row([], |row| row.get(0))?;
    let mut high = last;
    let mut count = 0;
    let mut cjk = Vec::new();
    {
        let mut select = db.prepare_cached(
            "SELECT id, content, tool_name, tool_calls FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let mut rows = select.query(params![last, i64::try_from(limit).unwrap_or(i64::MAX)])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            high = id;
            count += 1;
            let fields: [Option<String>; 3] = [row.get(1)?, row.get(2)?, row.get(3)?];
            if fields
                .iter()
                .flatten()
                .any(|t| search_text::contains_cjk(t))
            {
                cjk.push(id);
            }
        }
    }
    if count == 0 {
        return Ok(0);
    }
    db.prepare_cached(
        "INSERT INTO messages_fts (rowid, content, tool_name, tool_calls) \
         SELECT id, content, tool_name, tool_calls FROM messages WHERE id > ?1 AND id <= ?2",
    )?
    .execute(params![last, high])?;
    if !cjk.is_empty() {
        db.prepare_cached(
            "INSERT INTO messages_trigram (rowid, content, tool_name, tool_calls) \
             SELECT id, content, tool_name, tool_calls FROM messages \
             WHERE id IN (SELECT value FROM json_each(?1))",
        )?
        .execute(params![serde_json::to_string(&cjk)?])?;
    }
    db.prepare_cached("UPDATE search_index_state SET last_id = ?1 WHERE name = 'messages'")?
        .execute(params![high])?;
    Ok(count)
}
