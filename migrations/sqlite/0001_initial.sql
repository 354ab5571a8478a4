-- Iris session store, SQLite. See DESIGN.md §4. Timestamps are RFC 3339 text in UTC.

CREATE TABLE conversations (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    key                TEXT NOT NULL UNIQUE,
    source             TEXT NOT NULL,
    chat_id            TEXT,
    thread_id          TEXT,
    user_id            TEXT,
    current_session_id TEXT,
    settings           TEXT NOT NULL DEFAULT '{}',
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,
    conversation_id    INTEGER NOT NULL REFERENCES conversations(id),
    source             TEXT NOT NULL,
    parent_session_id  TEXT REFERENCES sessions(id),
    started_at         TEXT NOT NULL,
    ended_at           TEXT,
    end_reason         TEXT,
    title              TEXT UNIQUE,
    model              TEXT,
    system_prompt      TEXT,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    api_call_count     INTEGER NOT NULL DEFAULT 0,
    message_count      INTEGER NOT NULL DEFAULT 0,
    tool_call_count    INTEGER NOT NULL DEFAULT 0,
    compression_count  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_conversation ON sessions(conversation_id, started_at);
CREATE INDEX sessions_parent ON sessions(parent_session_id);
CREATE INDEX sessions_source ON sessions(source, started_at);

CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    role                TEXT NOT NULL,
    content             TEXT,
    tool_call_id        TEXT,
    tool_calls          TEXT,
    tool_name           TEXT,
    created_at          TEXT NOT NULL,
    token_count         INTEGER,
    finish_reason       TEXT,
    reasoning           TEXT,
    platform_message_id TEXT,
    active              INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX messages_session ON messages(session_id, id);

CREATE TABLE inbox (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    source              TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    conversation_key    TEXT NOT NULL,
    payload             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'accepted',
    attempts            INTEGER NOT NULL DEFAULT 0,
    received_at         TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    UNIQUE (source, platform_message_id)
);
CREATE INDEX inbox_unfinished ON inbox(state, id);

CREATE TABLE outbox (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    inbox_id             INTEGER REFERENCES inbox(id),
    target               TEXT NOT NULL,
    payload              TEXT NOT NULL,
    state                TEXT NOT NULL DEFAULT 'pending',
    attempts             INTEGER NOT NULL DEFAULT 0,
    platform_message_ids TEXT NOT NULL DEFAULT '[]',
    created_at           TEXT NOT NULL,
    delivered_at         TEXT
);
-- One final delivery per turn and target; rows without an inbox row are never deduplicated.
CREATE UNIQUE INDEX outbox_turn_target ON outbox(inbox_id, target) WHERE inbox_id IS NOT NULL;
CREATE INDEX outbox_pending ON outbox(state, id);

-- Search. The indexes are filled by the store's indexer off the write path, in batches;
-- `search_index_state` remembers how far. Every message goes to the word index (which reads
-- its text from `messages`: external content); only messages with CJK text go to the trigram
-- index. Messages are never deleted or rewritten (only marked inactive), so the indexes never
-- need a delete.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, tool_name, tool_calls,
    content = 'messages', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
-- The trigram index keeps its own copy of the (few) CJK rows, so that a short CJK term, which
-- trigrams cannot answer, scans only those rows instead of every message.
CREATE VIRTUAL TABLE messages_trigram USING fts5(
    content, tool_name, tool_calls,
    tokenize = 'trigram'
);
CREATE TABLE search_index_state (
    name    TEXT PRIMARY KEY,
    last_id INTEGER NOT NULL
);
INSERT INTO search_index_state (name, last_id) VALUES ('messages', 0);
