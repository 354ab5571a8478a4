-- Per-session leases: one process at a time compresses a session (DESIGN.md §6). A lease
-- expires on its own, so a crashed holder never blocks the session for long.
CREATE TABLE session_locks (
    session_id TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
