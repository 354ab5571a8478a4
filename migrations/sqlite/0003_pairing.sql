-- DM pairing (issue #6): an unknown user asks for access with a one-time code the operator
-- approves (`iris pairing approve <platform> <CODE>`). Codes are stored hashed.
CREATE TABLE pairing_requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    platform    TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    username    TEXT,
    code_hash   TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    approved_at TEXT
);
CREATE INDEX pairing_requests_code ON pairing_requests(platform, code_hash);
CREATE INDEX pairing_requests_user ON pairing_requests(platform, user_id, created_at);

CREATE TABLE paired_users (
    platform    TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    username    TEXT,
    approved_at TEXT NOT NULL,
    PRIMARY KEY (platform, user_id)
);
