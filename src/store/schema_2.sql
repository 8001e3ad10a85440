-- Gateway steps awaiting a client's follow-up: what the model said and was
-- told besides the calls the client saw, under each of the client's call
-- ids, so that the follow-up finds them on any replica.
CREATE TABLE steps (
    call_id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    steps_json TEXT NOT NULL
);
CREATE INDEX steps_by_age ON steps (created_at);
