-- Keys made through the API (`managed_keys = true`): only a key's SHA-256
-- is kept. `policy_json` holds what the key was made with (models, gateway
-- tools, limits, budget) as the API took it; it is validated again against
-- the config whenever the keys are read.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    key_sha256 TEXT NOT NULL UNIQUE,
    policy_json TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    last_used_at BIGINT
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);
