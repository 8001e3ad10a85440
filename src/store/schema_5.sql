-- A chat's errors: how many of its rows say an answer failed (or was cut),
-- and the code of the last, so the list marks failed chats and filters them
-- without reading their messages.
ALTER TABLE chats ADD COLUMN errors BIGINT NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
UPDATE chats SET errors = (
    SELECT count(*) FROM messages WHERE messages.chat_id = chats.id AND messages.kind = 'error'
);
UPDATE chats SET last_error = 'error' WHERE errors > 0;
-- What a search reads of a message: its text, a call's name and arguments,
-- a result, lower-cased (not the ids and times around them). Rows from
-- before have their whole JSON.
ALTER TABLE messages ADD COLUMN search TEXT NOT NULL DEFAULT '';
UPDATE messages SET search = lower(message_json);
