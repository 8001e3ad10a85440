-- What each tenant's requests used, per hour, key, provider and model: the
-- tokens the upstreams reported and their cost at the provider's pricing.
-- Kept whatever `record` says, and not purged with transcripts.
CREATE TABLE usage (
    hour BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    key_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    requests BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    -- Requests whose answers reported no usage: their tokens are estimates.
    estimated BIGINT NOT NULL,
    PRIMARY KEY (tenant, hour, key_id, provider, model)
);
