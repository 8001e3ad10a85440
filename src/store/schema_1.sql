-- Transcripts: chats, their messages (append-only, ids made by toolgate and
-- ordered by time), the hashes that link a request to the chat it continues,
-- and stored Responses API answers. The same SQL runs on SQLite and PostgreSQL.
CREATE TABLE chats (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    title TEXT NOT NULL,
    tool_calls BIGINT NOT NULL,
    messages BIGINT NOT NULL
);
CREATE INDEX chats_by_activity ON chats (updated_at);

CREATE TABLE messages (
    id TEXT PRIMARY KEY,
    chat_id TEXT NOT NULL,
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    sequence BIGINT NOT NULL,
    message_json TEXT NOT NULL
);
CREATE INDEX messages_by_chat ON messages (chat_id, sequence, id);

CREATE TABLE heads (
    hash TEXT PRIMARY KEY,
    chat_id TEXT NOT NULL,
    len BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX heads_by_chat ON heads (chat_id);

CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    conversation_json TEXT NOT NULL,
    response_json TEXT NOT NULL
);
CREATE INDEX responses_by_age ON responses (created_at);
