-- 014: the prefill cost model's per-interval rows, stored per UTC day by the nightly job next to
-- daily_rollups (kvplan.collectors.schedule.scheduler.rollup_day). The plan prices a window and
-- fits its cost model interval by interval (the model is not linear in an interval's means), so
-- a 90-day window needs every scrape interval of the 90 days: read from raw samples that took
-- about 6 s on the 64-engine replay (bench/dashboard_bench.py); read from here, the stored rows.
-- Columns: those of the macro prefill_rows (sql/macros/prefill.sql), all models together (a
-- reader asking for one model reads raw). prefill_rollup_days says which days are stored (a day
-- with no interval stores no row but is stored); a day missing from it is read from raw samples.
CREATE TABLE prefill_rollups (
    deployment_id        INTEGER NOT NULL,
    day                  DATE NOT NULL,          -- UTC day the interval ends in
    target               VARCHAR NOT NULL,
    kind                 VARCHAR NOT NULL,
    t_start              TIMESTAMP,
    t_end                TIMESTAMP NOT NULL,
    engines              BIGINT,
    requests             DOUBLE,
    prefill_seconds      DOUBLE,
    computed_tokens      DOUBLE,
    prompt_tokens        DOUBLE,
    cached_tokens        DOUBLE,
    external_tokens      DOUBLE,
    by_source_tokens     DOUBLE,
    local_hit_tokens     DOUBLE,
    prefix_hits          DOUBLE,
    external_hits        DOUBLE,
    external_queries     DOUBLE,
    lm_inproc_hits       DOUBLE,
    inference_seconds    DOUBLE,
    generation_tokens    DOUBLE,
    lmcache_write_chunks DOUBLE,
    lookup_seconds       DOUBLE,
    lookups              DOUBLE,
    step_buckets         STRUCT(le DOUBLE, n DOUBLE)[],
    reset                BOOLEAN
);
CREATE TABLE prefill_rollup_days (
    deployment_id INTEGER NOT NULL,
    day           DATE NOT NULL,
    intervals     BIGINT NOT NULL,
    computed_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (deployment_id, day)
);
