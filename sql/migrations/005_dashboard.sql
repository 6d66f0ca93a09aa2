-- 005: daily gauge rollups for the dashboard and the capacity report.
-- daily_rollups (002) holds counter and histogram increases per day; gauges (LMCache L1
-- usage, vLLM KV-cache usage, queue lengths) are not increases, so their 90-day views read
-- these per-day summaries instead of scanning raw samples. Filled per (deployment, UTC day)
-- by app.service.rollup_gauges_day (the nightly job calls it next to rollup_day); a day
-- without a row here is read from raw samples.
CREATE TABLE gauge_rollups (
    deployment_id INTEGER NOT NULL,
    day           DATE NOT NULL,             -- UTC day [day, day + 1)
    target        VARCHAR NOT NULL,
    name          VARCHAR NOT NULL,
    model_name    VARCHAR,
    engine        VARCHAR,
    labels        VARCHAR NOT NULL,
    mean          DOUBLE NOT NULL,           -- mean of the day's samples
    max           DOUBLE NOT NULL,
    last          DOUBLE NOT NULL,           -- value of the day's last sample
    n             BIGINT NOT NULL,           -- samples summarised
    computed_at   TIMESTAMP NOT NULL DEFAULT current_timestamp
);
