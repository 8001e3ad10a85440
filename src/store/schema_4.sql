-- Two chats may reach the same conversation state (the same question, the
-- same reply): a head is kept per (state, chat), so that a request naming
-- its chat continues it and one that does not is known to be ambiguous.
-- And the chat a stored response's exchange was recorded in: a request
-- that continues it by `previous_response_id` continues that chat.
CREATE TABLE heads_v4 (
    hash TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    len BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    tenant TEXT NOT NULL DEFAULT 'anonymous',
    PRIMARY KEY (hash, chat_id)
);
INSERT INTO heads_v4 (hash, chat_id, len, created_at, tenant)
    SELECT hash, chat_id, len, created_at, tenant FROM heads;
DROP TABLE heads;
ALTER TABLE heads_v4 RENAME TO heads;
CREATE INDEX heads_of_chat ON heads (chat_id);
ALTER TABLE responses ADD COLUMN chat_id TEXT NOT NULL DEFAULT '';
