-- Tenants: every row of state belongs to the tenant (the inbound key's
-- identity) whose request made it; rows from before belong to the
-- anonymous tenant. Steps are keyed by (tenant, call id): the table is
-- rebuilt, since a primary key cannot be changed in place on SQLite.
ALTER TABLE chats ADD COLUMN tenant TEXT NOT NULL DEFAULT 'anonymous';
CREATE INDEX chats_by_tenant ON chats (tenant, updated_at);
ALTER TABLE heads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'anonymous';
ALTER TABLE responses ADD COLUMN tenant TEXT NOT NULL DEFAULT 'anonymous';
CREATE TABLE steps_by_tenant (
    tenant TEXT NOT NULL,
    call_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    steps_json TEXT NOT NULL,
    PRIMARY KEY (tenant, call_id)
);
INSERT INTO steps_by_tenant (tenant, call_id, created_at, steps_json)
    SELECT 'anonymous', call_id, created_at, steps_json FROM steps;
DROP TABLE steps;
ALTER TABLE steps_by_tenant RENAME TO steps;
CREATE INDEX steps_by_age ON steps (created_at);
