-- 002: collection from Prometheus, the collector daemon's log and daily rollups.
--
-- Prometheus ingestion stores per-series INCREASES per step (not raw samples, not
-- quantiles): any step-aligned window's hit rate and histogram quantile can be recomputed
-- exactly from them. increments() is redefined to return them next to the increases
-- derived from direct scrapes, so every query built on it works on either source.

-- A target that came from Prometheus: which job/instance labels it stands for.
CREATE TABLE prom_targets (
    target_id  INTEGER PRIMARY KEY,          -- targets.target_id
    job        VARCHAR,
    instance   VARCHAR NOT NULL
);

-- Increase of one series during one step (ts - step, ts]: the sum over consecutive raw
-- samples (p, c) with c inside the step, Prometheus's reset rule, a series' _created time
-- as a zero point (as increments() does for scrapes).
CREATE TABLE prom_increments (
    series_id BIGINT NOT NULL,
    ts        TIMESTAMP NOT NULL,            -- step end, UTC
    step_s    INTEGER NOT NULL,
    delta     DOUBLE NOT NULL,
    pairs     INTEGER NOT NULL,
    resets    INTEGER NOT NULL
);
-- (Gauges from Prometheus are stored in `samples` at step ends: the value of the last raw
-- sample inside the step.)

-- The ingestion ledger: one row per (deployment, chunk) last ingested. Re-ingesting a
-- chunk deletes what it wrote before and writes again, in one transaction.
CREATE TABLE prom_chunks (
    deployment_id INTEGER NOT NULL,
    t_from        TIMESTAMP NOT NULL,        -- chunk (t_from, t_to], UTC, step-aligned
    t_to          TIMESTAMP NOT NULL,
    step_s        INTEGER NOT NULL,
    selector      VARCHAR NOT NULL,
    ok            BOOLEAN NOT NULL,
    error         VARCHAR,                   -- names the Prometheus URL and query
    n_series      INTEGER NOT NULL,
    n_raw         BIGINT NOT NULL,           -- raw samples read
    n_increments  BIGINT NOT NULL,
    n_gauges      BIGINT NOT NULL,
    ingested_at   TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- Stretches with no data: Prometheus failed (target NULL) or a target had no samples.
-- Never filled with zeros.
CREATE TABLE gaps (
    deployment_id INTEGER NOT NULL,
    target        VARCHAR,
    t_from        TIMESTAMP NOT NULL,
    t_to          TIMESTAMP NOT NULL,
    reason        VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,          -- prometheus
    recorded_at   TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- Every run of a collector job: scrape rounds, nightly runs, one-off ingests.
CREATE SEQUENCE collector_run_ids START 1;
CREATE TABLE collector_runs (
    run_id     BIGINT PRIMARY KEY DEFAULT nextval('collector_run_ids'),
    job        VARCHAR NOT NULL,             -- scrape | nightly | ingest
    deployment VARCHAR,
    day        DATE,                         -- the day a nightly run covered (UTC)
    started_at TIMESTAMP NOT NULL,           -- UTC
    ended_at   TIMESTAMP,                    -- NULL while running (or killed: status interrupted)
    status     VARCHAR NOT NULL,             -- running | ok | errors | interrupted
    n_rows     BIGINT NOT NULL DEFAULT 0,    -- rows written
    n_errors   INTEGER NOT NULL DEFAULT 0,
    message    VARCHAR
);

-- Per deployment, UTC day and series name: the summed increases of the day (a pair is in the
-- day of its later sample), summed over targets and engines. 90-day views read these.
CREATE TABLE daily_rollups (
    deployment_id INTEGER NOT NULL,
    day           DATE NOT NULL,
    model_name    VARCHAR,
    name          VARCHAR NOT NULL,
    family        VARCHAR NOT NULL,
    le            DOUBLE,
    labels        VARCHAR NOT NULL,
    increase      DOUBLE NOT NULL,
    pairs         BIGINT NOT NULL,
    resets        BIGINT NOT NULL,
    computed_at   TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- increments() of 001 (scrape-derived pairs inside [t_from, t_to]) plus ingested step
-- increases whose step ends in (t_from, t_to]. For step-aligned windows with a sample at
-- the window start both count exactly the same pairs.
-- (The increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)
