-- name: insert_prom_target
-- Remember which Prometheus job/instance a target stands for.
INSERT INTO prom_targets (target_id, job, instance) VALUES ($target_id, $job, $instance)
ON CONFLICT DO NOTHING;

-- name: delete_prom_increments
-- Forget the ingested step increases of a deployment in (t_from, t_to] (before re-ingesting).
DELETE FROM prom_increments
WHERE ts > $t_from AND ts <= $t_to
  AND series_id IN (SELECT se.series_id FROM series se
                    JOIN prom_targets pt ON pt.target_id = se.target_id
                    JOIN targets t ON t.target_id = se.target_id
                    WHERE t.deployment_id = $deployment_id);

-- name: delete_prom_gauges
-- Forget the ingested gauge values of a deployment in (t_from, t_to].
DELETE FROM samples
WHERE ts > $t_from AND ts <= $t_to
  AND series_id IN (SELECT se.series_id FROM series se
                    JOIN prom_targets pt ON pt.target_id = se.target_id
                    JOIN targets t ON t.target_id = se.target_id
                    WHERE t.deployment_id = $deployment_id AND se.type = 'gauge');

-- name: delete_gaps
-- Forget the recorded gaps of a deployment that end in (t_from, t_to] (each gap belongs to
-- the chunk holding its end).
DELETE FROM gaps
WHERE deployment_id = $deployment_id AND source = 'prometheus' AND t_to > $t_from AND t_to <= $t_to;

-- name: insert_gap
-- Record a stretch without data (target NULL: the whole deployment).
INSERT INTO gaps (deployment_id, target, t_from, t_to, reason, source)
VALUES ($deployment_id, $target, $t_from, $t_to, $reason, 'prometheus');

-- name: delete_prom_chunks
-- Forget ledger rows of a deployment overlapping (t_from, t_to].
DELETE FROM prom_chunks WHERE deployment_id = $deployment_id AND t_from < $t_to AND t_to > $t_from;

-- name: insert_prom_chunk
-- Record one ingested (or failed) chunk in the ledger.
INSERT INTO prom_chunks (deployment_id, t_from, t_to, step_s, selector, ok, error, n_series, n_raw,
                         n_increments, n_gauges)
VALUES ($deployment_id, $t_from, $t_to, $step_s, $selector, $ok, $error, $n_series, $n_raw,
        $n_increments, $n_gauges);

-- name: ingest_ledger
-- Ingested chunks of a deployment overlapping a window, oldest first.
SELECT c.t_from, c.t_to, c.step_s, c.ok, c.error, c.n_series, c.n_raw, c.n_increments, c.n_gauges,
       c.ingested_at
FROM prom_chunks c JOIN deployments d ON d.deployment_id = c.deployment_id
WHERE d.name = $deployment AND c.t_to > $t_from AND c.t_from < $t_to
ORDER BY c.t_from;

-- name: ingest_gaps
-- Gaps of a deployment overlapping a window, oldest first; adjacent or overlapping gaps of
-- the same target merged (reason: the first one's, n: how many were merged).
WITH g AS (
    SELECT gp.target, gp.t_from, gp.t_to, gp.reason
    FROM gaps gp JOIN deployments d ON d.deployment_id = gp.deployment_id
    WHERE d.name = $deployment AND gp.t_to > $t_from AND gp.t_from < $t_to
),
m AS (
    SELECT *, CASE WHEN t_from <= max(t_to) OVER (PARTITION BY target ORDER BY t_from
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS starts
    FROM g
),
i AS (SELECT *, sum(starts) OVER (PARTITION BY target ORDER BY t_from) AS island FROM m)
SELECT target, min(t_from) AS t_from, max(t_to) AS t_to, arg_min(reason, t_from) AS reason, count(*) AS n
FROM i GROUP BY target, island
ORDER BY t_from, target NULLS FIRST;

-- name: insert_collector_run
-- Start (or record a finished) run of a collector job; returns its id.
INSERT INTO collector_runs (job, deployment, day, started_at, ended_at, status, n_rows, n_errors, message)
VALUES ($job, $deployment, CAST($day AS DATE), $started_at, $ended_at, $status, $n_rows, $n_errors, $message)
RETURNING run_id;

-- name: finish_collector_run
-- Close a run with its outcome.
UPDATE collector_runs SET ended_at = $ended_at, status = $status, n_rows = $n_rows, n_errors = $n_errors,
       message = $message
WHERE run_id = $run_id;

-- name: mark_interrupted_runs
-- Runs still marked running when the daemon starts were cut short (the process was killed).
UPDATE collector_runs SET status = 'interrupted' WHERE status = 'running' RETURNING run_id, job, day;

-- name: prune_scrape_runs
-- Drop scrape-round rows older than t_from (the scrapes themselves stay).
DELETE FROM collector_runs WHERE job = 'scrape' AND started_at < $t_from;

-- name: nightly_days
-- Every day a nightly run covered, and whether one of its runs succeeded.
SELECT day, bool_or(status = 'ok') AS ok, count(*) AS runs
FROM collector_runs WHERE job = 'nightly' AND day IS NOT NULL
GROUP BY day ORDER BY day;

-- name: collector_runs
-- Recent collector runs (scrape rounds, nightly runs, ingests), newest first: what the
-- Collection page shows.
SELECT run_id, job, deployment, day, started_at, ended_at, status, n_rows, n_errors, message,
       epoch(ended_at) - epoch(started_at) AS duration_s
FROM collector_runs
ORDER BY started_at DESC, run_id DESC
LIMIT $limit;

-- name: delete_rollups_day
-- Forget one day's rollups of a deployment (before computing them again).
DELETE FROM daily_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: rollup_day
-- Sum one day (t_from, t_to] of a deployment into daily_rollups: every pair whose later
-- sample lies in the day, whatever its source; t_lookback bounds how far back the earlier
-- sample of a scrape pair may lie.
INSERT INTO daily_rollups (deployment_id, day, model_name, name, family, le, labels, increase, pairs, resets)
SELECT $deployment_id, CAST($t_from AS DATE), se.model_name, se.name, se.family, se.le, se.labels,
       sum(i.delta), count(*), sum(CAST(i.reset AS INTEGER))
FROM increments($deployment, $t_lookback, $t_to, NULL) i
JOIN series se ON se.series_id = i.series_id
WHERE i.ts > $t_from AND i.ts <= $t_to
GROUP BY ALL;

-- name: put_daily_cached
-- The day's cached prompt tokens, the cached-tokens rule chosen per target and scrape interval
-- (app.data.window.cached_by_interval), stored beside the day's increases as the kvplan-own
-- sample kvplan:cached_prompt_tokens_total (labels: scope all|model, known 0|1; pairs 1 a day).
INSERT INTO daily_rollups (deployment_id, day, model_name, name, family, le, labels, increase, pairs, resets)
VALUES ($deployment_id, CAST($day AS DATE), $model_name, 'kvplan:cached_prompt_tokens_total',
        'kvplan:cached_prompt_tokens', NULL, $labels, $n_cached_tokens, 1, 0);

-- name: delete_edge_rollups_day
-- Forget one day's stored first-day rows of a deployment (before computing them again).
DELETE FROM edge_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: delete_prefill_edge_rollups_day
-- Forget one day's stored first-day prefill intervals of a deployment.
DELETE FROM prefill_edge_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: delete_edge_rollup_mark
-- Forget that one day's first-day rows were stored.
DELETE FROM edge_rollup_days WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: rollup_edge_day
-- Store what span_increases_and_buckets returns for the day (t_from, t_to] read alone (t_lookback
-- = t_after = t_from, every model, step a day on origin t_from, every name in part 'bucket',
-- $cached_names in part 'cached'): the same scan and grouping, so a window starting at the day's
-- midnight reads its first day from here (app.data.window.load_window_and_buckets).
INSERT INTO edge_rollups (deployment_id, day, part, bucket, name, family, model_name, le, labels, increase, pairs,
                          resets, broken, gaps, target, t_end, engine)
WITH i AS MATERIALIZED (
    SELECT i.ts, i.delta, i.reset, i.broken, i.gap, se.name, se.family, se.model_name, se.le, se.labels,
           se.engine, se.target_id
    FROM increments($deployment, $t_from, $t_to, NULL) i
    JOIN series se ON se.series_id = i.series_id
    WHERE i.ts > $t_from
)
SELECT $deployment_id, CAST($t_from AS DATE), 'window', CAST(NULL AS TIMESTAMP), name, family, model_name, le,
       labels, sum(delta), count(*), sum(CAST(reset AS INTEGER)), sum(CAST(broken AS INTEGER)),
       sum(CAST(gap AS INTEGER)), NULL, NULL, NULL
FROM i
GROUP BY name, family, model_name, le, labels
UNION ALL
SELECT $deployment_id, CAST($t_from AS DATE), 'bucket',
       time_bucket(to_seconds(CAST(86400 AS BIGINT)), ts - INTERVAL 1 MICROSECOND, CAST($t_from AS TIMESTAMP)),
       name, NULL, NULL, le, labels, sum(delta), NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM i
GROUP BY 4, name, le, labels
UNION ALL
SELECT $deployment_id, CAST($t_from AS DATE), 'cached', NULL, i.name, i.family, i.model_name, i.le, i.labels,
       sum(i.delta), NULL, NULL, NULL, NULL, t.name, i.ts, i.engine
FROM i
JOIN targets t ON t.target_id = i.target_id
WHERE i.name IN (SELECT unnest($cached_names))
GROUP BY t.name, i.ts, i.name, i.family, i.model_name, i.engine, i.le, i.labels;

-- name: mark_edge_day
-- The day's first-day rows are stored (edge_rollups, prefill_edge_rollups; also when none).
INSERT INTO edge_rollup_days (deployment_id, day) VALUES ($deployment_id, CAST($day AS DATE));

-- name: daily_increases
-- Increases of a deployment summed over the whole days in [t_from, t_to), from the rollups,
-- shaped like window_increases (engine and target summed away): window_stats() reads them.
SELECT r.name, r.family, r.model_name, CAST(NULL AS VARCHAR) AS engine, r.le, r.labels, '' AS target,
       sum(r.increase) AS increase, CAST(sum(r.pairs) AS BIGINT) AS pairs,
       CAST(sum(r.resets) AS BIGINT) AS resets
FROM daily_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day >= CAST($t_from AS DATE) AND r.day < CAST($t_to AS DATE)
  AND ($model_name IS NULL OR r.model_name = $model_name)
GROUP BY ALL
ORDER BY r.name, r.model_name, r.le, r.labels, r.family;

-- name: daily_series
-- Per-day increases of chosen sample names of a deployment over [t_from, t_to), for
-- 90-day charts (one row per day, name, bucket bound and labels).
SELECT r.day, r.name, r.le, r.labels, sum(r.increase) AS increase
FROM daily_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day >= CAST($t_from AS DATE) AND r.day < CAST($t_to AS DATE)
  AND ($model_name IS NULL OR r.model_name = $model_name) AND r.name IN (SELECT unnest($names))
GROUP BY ALL
ORDER BY r.day, r.name, r.le;

-- name: chunk_ingested_ok
-- Whether a successful ingestion already covers the chunk (t_from, t_to] of a deployment.
SELECT count(*) > 0 AS ok FROM prom_chunks
WHERE deployment_id = $deployment_id AND ok AND t_from <= $t_from AND t_to >= $t_to;

-- name: scraped_target
-- Whether a target holds direct scrapes and is not yet a Prometheus target (then a
-- Prometheus job/instance must not be mapped onto it).
SELECT EXISTS (SELECT 1 FROM scrapes WHERE target_id = $target_id)
       AND NOT EXISTS (SELECT 1 FROM prom_targets WHERE target_id = $target_id) AS conflict;
