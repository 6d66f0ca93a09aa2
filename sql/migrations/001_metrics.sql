-- 001: metrics as scraped. One row per scrape attempt (ok or not), one row per series,
-- raw sample values per series and scrape time. Increases are computed at query time from
-- the raw values (see the increments() macro), so importing scrapes out of order, or again,
-- never leaves a stale derived number behind.

CREATE SEQUENCE deployment_ids START 1;
CREATE TABLE deployments (
    deployment_id INTEGER PRIMARY KEY DEFAULT nextval('deployment_ids'),
    name          VARCHAR NOT NULL UNIQUE,
    created_at    TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE SEQUENCE target_ids START 1;
CREATE TABLE targets (
    target_id     INTEGER PRIMARY KEY DEFAULT nextval('target_ids'),
    deployment_id INTEGER NOT NULL,
    name          VARCHAR NOT NULL,          -- e.g. node1-vllm-a; unique inside a deployment
    kind          VARCHAR NOT NULL,          -- vllm | lmcache_mp | lmcache_inproc
    url           VARCHAR,                   -- /metrics URL (credentials are never stored)
    UNIQUE (deployment_id, name)
);

CREATE SEQUENCE scrape_ids START 1;
CREATE TABLE scrapes (
    scrape_id      BIGINT PRIMARY KEY DEFAULT nextval('scrape_ids'),
    target_id      INTEGER NOT NULL,
    ts             TIMESTAMP NOT NULL,       -- UTC, when kvplan read the payload
    ok             BOOLEAN NOT NULL,
    error          VARCHAR,                  -- why it failed (names URL/file and line)
    duration_s     DOUBLE,
    source         VARCHAR NOT NULL,         -- scrape | import
    payload_sha256 VARCHAR,                  -- makes re-importing the same file a no-op
    n_samples      INTEGER,
    warnings       VARCHAR,
    UNIQUE (target_id, ts)
);

CREATE TABLE series (
    series_id  BIGINT PRIMARY KEY,           -- hash of (target_id, name, labels)
    target_id  INTEGER NOT NULL,
    name       VARCHAR NOT NULL,             -- sample name: vllm:prefix_cache_hits_total, ..._bucket
    family     VARCHAR NOT NULL,             -- family name: vllm:prefix_cache_hits
    type       VARCHAR NOT NULL,             -- counter | gauge | histogram | summary | unknown
    model_name VARCHAR,
    engine     VARCHAR,                      -- engine index inside one vLLM server (DP rank)
    le         DOUBLE,                       -- histogram bucket upper bound (+Inf allowed)
    labels     VARCHAR NOT NULL              -- the other labels, canonical JSON
);

CREATE TABLE samples (
    series_id BIGINT NOT NULL,
    ts        TIMESTAMP NOT NULL,            -- = scrapes.ts
    value     DOUBLE NOT NULL,
    created   DOUBLE                         -- the series' _created (unix s), when exposed
);

-- Per-series increases between consecutive samples inside [t_from, t_to] of one deployment.
-- * no extrapolation to the window edges: only pairs of samples both inside the window count;
-- * Prometheus's reset rule: a value below the previous one means the counter restarted at 0,
--   so the increase of that pair is the new value;
-- * a series' _created time inside the window counts as a sample of value 0 (the counter was
--   0 when its process started): a counter that first appears mid-window, or restarts and
--   climbs past its old value between two scrapes, is still counted exactly once.
-- (The increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)
