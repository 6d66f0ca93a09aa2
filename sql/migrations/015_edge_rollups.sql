-- 015: each UTC day as the first day of a window starting at its midnight reads it, stored by the
-- nightly job (kvplan.collectors.schedule.scheduler.rollup_day) beside daily_rollups. A window
-- counts only pairs whose both points lie inside it, so its first whole day cannot come from
-- daily_rollups (which also counts the pairs straddling the day's start, _created zero points
-- and births the day before): a month's report read that day from raw samples (~0.3 s on the
-- 64-engine replay). Here: what the raw read of the day alone gives, (day, day, day + 1):
-- edge_rollups = span_increases_and_buckets' rows of that span (part 'window' every series,
-- part 'bucket' every name, part 'cached' the cached-tokens rule's names), with the broken and
-- gap counts; prefill_edge_rollups = prefill_intervals' rows of that span (all models).
-- edge_rollup_days says which days are stored; a day missing there (rolled up before this
-- migration) is read from raw samples.
CREATE TABLE IF NOT EXISTS edge_rollups (
    deployment_id INTEGER NOT NULL,
    day           DATE NOT NULL,          -- UTC day; the rows of the span (day, day + 1]
    part          VARCHAR NOT NULL,       -- window | bucket | cached
    bucket        TIMESTAMP,
    name          VARCHAR NOT NULL,
    family        VARCHAR,
    model_name    VARCHAR,
    le            DOUBLE,
    labels        VARCHAR,
    increase      DOUBLE,
    pairs         BIGINT,
    resets        BIGINT,
    broken        BIGINT,
    gaps          BIGINT,
    target        VARCHAR,
    t_end         TIMESTAMP,
    engine        VARCHAR
);
CREATE TABLE IF NOT EXISTS prefill_edge_rollups (
    deployment_id        INTEGER NOT NULL,
    day                  DATE NOT NULL,
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
CREATE TABLE IF NOT EXISTS edge_rollup_days (
    deployment_id INTEGER NOT NULL,
    day           DATE NOT NULL,
    computed_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (deployment_id, day)
);
