-- Usage costs in whole micro-dollars: a sum of floating-point dollars
-- drifts (0.0045000000000000005), a sum of integers does not. The table is
-- rebuilt, since a column's type cannot be changed in place on SQLite;
-- the dollars kept so far are rounded to the nearest micro-dollar.
CREATE TABLE usage_micros (
    hour BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    key_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    requests BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL,
    -- Requests whose answers reported no usage: their tokens are estimates.
    estimated BIGINT NOT NULL,
    PRIMARY KEY (tenant, hour, key_id, provider, model)
);
INSERT INTO usage_micros (hour, tenant, key_id, provider, model, requests, input_tokens, output_tokens, cost_micros, estimated)
    SELECT hour, tenant, key_id, provider, model, requests, input_tokens, output_tokens,
        CAST(ROUND(cost_usd * 1000000) AS BIGINT), estimated
    FROM usage;
DROP TABLE usage;
ALTER TABLE usage_micros RENAME TO usage;
