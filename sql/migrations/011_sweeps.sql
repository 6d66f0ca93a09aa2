-- 011: load sweeps (`kvplan pilot --sweep`): the offered load on one replica raised in
-- levels, once with KV reuse off and once with it on; per level the client-side throughput and
-- latency percentiles. Goodput is read off these points at the SLOs of the moment
-- (models.goodput), so the SLOs are not stored. `measured_on` says what produced the numbers.

CREATE SEQUENCE sweep_ids START 1;
CREATE TABLE sweeps (
    sweep_id    BIGINT PRIMARY KEY DEFAULT nextval('sweep_ids'),
    deployment  VARCHAR NOT NULL,
    pair        VARCHAR NOT NULL,          -- shared by the reuse-off and reuse-on sweep of one pair
    reuse       VARCHAR NOT NULL CHECK (reuse IN ('off', 'on')),
    load_kind   VARCHAR NOT NULL CHECK (load_kind IN ('concurrency', 'rate')),
    server      VARCHAR NOT NULL,          -- base URL (credentials stripped)
    model       VARCHAR,
    scenario    VARCHAR NOT NULL,          -- workload scenario of the prompts (shared_prefix | unique)
    workload    VARCHAR NOT NULL,          -- JSON: prompt/output shape, requests per level, seed
    started_at  TIMESTAMP NOT NULL,        -- UTC
    ended_at    TIMESTAMP NOT NULL,
    measured_on VARCHAR NOT NULL
);

CREATE TABLE sweep_points (
    sweep_id       BIGINT NOT NULL,
    level_idx      INTEGER NOT NULL,
    offered        DOUBLE NOT NULL,        -- concurrent users or requests/s (sweeps.load_kind)
    started_at     TIMESTAMP NOT NULL,
    ended_at       TIMESTAMP NOT NULL,
    requests       INTEGER NOT NULL,
    failed         INTEGER NOT NULL,
    span_s         DOUBLE,                 -- first request sent to last answer
    throughput_rps DOUBLE,                 -- completed requests / span_s
    ttft_p50_s     DOUBLE,
    ttft_p99_s     DOUBLE,
    tpot_p50_s     DOUBLE,
    tpot_p99_s     DOUBLE,                 -- per request (total - TTFT) / (output tokens - 1)
    PRIMARY KEY (sweep_id, level_idx)
);

CREATE TABLE sweep_requests (
    sweep_id      BIGINT NOT NULL,
    level_idx     INTEGER NOT NULL,
    started_at    TIMESTAMP NOT NULL,
    ttft_s        DOUBLE,
    total_s       DOUBLE,
    prompt_tokens INTEGER,
    output_tokens INTEGER,
    cached_tokens INTEGER,
    ok            BOOLEAN NOT NULL,
    error         VARCHAR
);
