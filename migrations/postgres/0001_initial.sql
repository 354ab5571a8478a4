-- Iris session store, PostgreSQL. The same logical schema as migrations/sqlite. See DESIGN.md §4.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE conversations (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key                TEXT NOT NULL UNIQUE,
    source             TEXT NOT NULL,
    chat_id            TEXT,
    thread_id          TEXT,
    user_id            TEXT,
    current_session_id TEXT,
    settings           TEXT NOT NULL DEFAULT '{}',
    created_at         TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL
);

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,
    conversation_id    BIGINT NOT NULL REFERENCES conversations(id),
    source             TEXT NOT NULL,
    parent_session_id  TEXT REFERENCES sessions(id),
    started_at         TIMESTAMPTZ NOT NULL,
    ended_at           TIMESTAMPTZ,
    end_reason         TEXT,
    title              TEXT UNIQUE,
    model              TEXT,
    system_prompt      TEXT,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens   BIGINT NOT NULL DEFAULT 0,
    estimated_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    api_call_count     BIGINT NOT NULL DEFAULT 0,
    message_count      BIGINT NOT NULL DEFAULT 0,
    tool_call_count    BIGINT NOT NULL DEFAULT 0,
    compression_count  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_conversation ON sessions(conversation_id, started_at);
CREATE INDEX sessions_parent ON sessions(parent_session_id);
CREATE INDEX sessions_source ON sessions(source, started_at);

-- What search sees of a message: its text, tool name and tool-call arguments.
CREATE FUNCTION iris_search_text(content TEXT, tool_name TEXT, tool_calls TEXT) RETURNS TEXT
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE
    RETURN coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, '');
-- Whether it holds CJK text (Han, kana, Hangul; the same ranges as search_text.rs). Only such
-- rows go into the trigram index: word search serves the rest, and trigram maintenance is the
-- most expensive part of an insert.
CREATE FUNCTION iris_has_cjk(content TEXT, tool_name TEXT, tool_calls TEXT) RETURNS BOOLEAN
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE
    RETURN iris_search_text(content, tool_name, tool_calls) ~ '[ᄀ-ᇿ⺀-⿟぀-ヿ㄀-ㄯ㄰-㆏ㇰ-ㇿ㐀-䶿一-鿿ꥠ-꥿가-퟿豈-﫿ｦ-ﾟ𠀀-𿿿]';
-- Its words: punctuation folded to spaces first, so that text splits into words the way the
-- SQLite store splits it (the default parser would keep URLs, paths and versions whole).
CREATE FUNCTION iris_search_words(content TEXT, tool_name TEXT, tool_calls TEXT) RETURNS tsvector
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE
    RETURN to_tsvector('simple'::regconfig,
        regexp_replace(iris_search_text(content, tool_name, tool_calls), '[^[:alnum:]]+', ' ', 'g'));

CREATE TABLE messages (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    role                TEXT NOT NULL,
    content             TEXT,
    tool_call_id        TEXT,
    tool_calls          TEXT,
    tool_name           TEXT,
    created_at          TIMESTAMPTZ NOT NULL,
    token_count         BIGINT,
    finish_reason       TEXT,
    reasoning           TEXT,
    platform_message_id TEXT,
    active              BOOLEAN NOT NULL DEFAULT TRUE,
    -- Search columns, computed once on insert. Stored (not only indexed expressions) so that
    -- ANALYZE keeps statistics on them: with them the planner walks the newest rows for a
    -- common word and uses the index for a rare one; without them it guessed, and scanned a
    -- million rows re-tokenising each one for a word that was nowhere.
    search_words        TSVECTOR GENERATED ALWAYS AS (iris_search_words(content, tool_name, tool_calls)) STORED,
    has_cjk             BOOLEAN GENERATED ALWAYS AS (iris_has_cjk(content, tool_name, tool_calls)) STORED
);
CREATE INDEX messages_session ON messages(session_id, id);
-- Word search (GIN's pending list keeps inserts cheap) and substring search in CJK rows.
CREATE INDEX messages_words ON messages USING GIN (search_words);
CREATE INDEX messages_trigram ON messages USING GIN (
    iris_search_text(content, tool_name, tool_calls) gin_trgm_ops
) WHERE has_cjk;
-- The CJK rows newest first: a one- or two-character CJK term has no trigram to look up, so
-- it is matched by walking these (about 1 % of rows in mixed chat) instead of every message.
CREATE INDEX messages_cjk_recent ON messages(id) WHERE has_cjk;
-- A larger sample of word frequencies, so the planner can tell a rare word from a common one.
ALTER TABLE messages ALTER COLUMN search_words SET STATISTICS 1000;

CREATE TABLE inbox (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source              TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    conversation_key    TEXT NOT NULL,
    payload             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'accepted',
    attempts            BIGINT NOT NULL DEFAULT 0,
    received_at         TIMESTAMPTZ NOT NULL,
    updated_at          TIMESTAMPTZ NOT NULL,
    UNIQUE (source, platform_message_id)
);
CREATE INDEX inbox_unfinished ON inbox(state, id);

CREATE TABLE outbox (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id             BIGINT REFERENCES inbox(id),
    target               TEXT NOT NULL,
    payload              TEXT NOT NULL,
    state                TEXT NOT NULL DEFAULT 'pending',
    attempts             BIGINT NOT NULL DEFAULT 0,
    platform_message_ids TEXT NOT NULL DEFAULT '[]',
    created_at           TIMESTAMPTZ NOT NULL,
    delivered_at         TIMESTAMPTZ
);
CREATE UNIQUE INDEX outbox_turn_target ON outbox(inbox_id, target) WHERE inbox_id IS NOT NULL;
CREATE INDEX outbox_pending ON outbox(state, id);
