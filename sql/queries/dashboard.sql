-- Queries of the dashboard pages and the capacity report (app.data, app.views).
-- Long windows read whole UTC days from the rollups (daily_rollups, gauge_rollups) and only
-- the partial days at their edges from raw samples: see app.data.window.load_window.

-- name: dashboard_deployments
-- Every deployment with its data range from direct scrapes and Prometheus-ingested chunks
-- (successful ones), and the counts of both.
WITH sc AS (
    SELECT t.deployment_id, min(sc.ts) FILTER (WHERE sc.ok) AS first_ts,
           max(sc.ts) FILTER (WHERE sc.ok) AS last_ts,
           count(*) AS scrapes, count(*) FILTER (WHERE NOT sc.ok) AS failed
    FROM scrapes sc JOIN targets t ON t.target_id = sc.target_id
    GROUP BY 1
),
pc AS (
    SELECT deployment_id, min(t_from) FILTER (WHERE ok) AS first_ts, max(t_to) FILTER (WHERE ok) AS last_ts,
           count(*) FILTER (WHERE ok) AS chunks, count(*) FILTER (WHERE NOT ok) AS failed_chunks
    FROM prom_chunks
    GROUP BY 1
)
SELECT d.name AS deployment,
       (SELECT count(*) FROM targets t WHERE t.deployment_id = d.deployment_id) AS targets,
       least(sc.first_ts, pc.first_ts) AS first_ts, greatest(sc.last_ts, pc.last_ts) AS last_ts,
       coalesce(sc.scrapes, 0) AS scrapes, coalesce(sc.failed, 0) AS failed,
       coalesce(pc.chunks, 0) AS chunks, coalesce(pc.failed_chunks, 0) AS failed_chunks
FROM deployments d
LEFT JOIN sc ON sc.deployment_id = d.deployment_id
LEFT JOIN pc ON pc.deployment_id = d.deployment_id
ORDER BY d.name;

-- name: dashboard_rolled_days
-- UTC days in [$d_from, $d_to) for which daily_rollups holds a deployment's increases.
SELECT DISTINCT r.day
FROM daily_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day >= CAST($d_from AS DATE) AND r.day < CAST($d_to AS DATE)
ORDER BY 1;

-- name: span_increases
-- Increase of every counter and histogram series of a deployment from the pairs of samples
-- whose later sample lies in ($t_after, $t_to] and earlier one at or after $t_lookback,
-- summed over targets and engines. With t_lookback = t_after = t_from it counts exactly the
-- pairs window_increases counts; the dashboard uses it for the raw edges of a window around
-- rolled-up days (the same rule as rollup_day).
SELECT se.name, se.family, se.model_name, se.le, se.labels,
       sum(i.delta) AS increase, count(*) AS pairs, sum(CAST(i.reset AS INTEGER)) AS resets,
       sum(CAST(i.broken AS INTEGER)) AS broken, sum(CAST(i.gap AS INTEGER)) AS gaps
FROM increments($deployment, $t_lookback, $t_to, $model_name) i
JOIN series se ON se.series_id = i.series_id
WHERE i.ts > $t_after
GROUP BY ALL
ORDER BY se.name, se.model_name, se.le, se.labels;

-- name: span_buckets
-- The same increases of chosen sample names summed per time bucket (start, start + $step_s]
-- aligned on $origin: a pair counts in the bucket holding its later sample, as in rollup_day.
SELECT time_bucket(to_seconds(CAST($step_s AS BIGINT)), i.ts - INTERVAL 1 MICROSECOND,
                   CAST($origin AS TIMESTAMP)) AS bucket,
       se.name, se.le, se.labels, sum(i.delta) AS increase
FROM increments($deployment, $t_lookback, $t_to, $model_name) i
JOIN series se ON se.series_id = i.series_id
WHERE i.ts > $t_after AND se.name IN (SELECT unnest($names))
GROUP BY ALL
ORDER BY bucket, se.name, se.le, se.labels;

-- name: span_increases_and_buckets
-- span_increases, span_buckets and cached_intervals_span of one raw span from ONE scan of its
-- sample pairs (a page that shows them reads the raw edge once): rows with part = 'window' are
-- span_increases' (every series, summed over targets and engines), rows with part = 'bucket'
-- are span_buckets' (the names in $names per time bucket (start, start + $step_s] on $origin),
-- rows with part = 'cached' are cached_intervals_span's (the names in $cached_names per target
-- and interval end; none when it is empty); each part in its own query's order, with its
-- columns (the others NULL). Each series' pairs depend on its own points only, so reading every
-- series and keeping some counts what the queries reading those alone count.
WITH i AS MATERIALIZED (
    SELECT i.ts, i.delta, i.reset, i.broken, i.gap, se.name, se.family, se.model_name, se.le, se.labels,
           se.engine, se.target_id
    FROM increments($deployment, $t_lookback, $t_to, $model_name) i
    JOIN series se ON se.series_id = i.series_id
    WHERE i.ts > $t_after
)
SELECT 'window' AS part, CAST(NULL AS TIMESTAMP) AS bucket, name, family, model_name, le, labels,
       sum(delta) AS increase, count(*) AS pairs, sum(CAST(reset AS INTEGER)) AS resets,
       sum(CAST(broken AS INTEGER)) AS broken, sum(CAST(gap AS INTEGER)) AS gaps,
       CAST(NULL AS VARCHAR) AS target, CAST(NULL AS TIMESTAMP) AS t_end, CAST(NULL AS VARCHAR) AS engine
FROM i
GROUP BY name, family, model_name, le, labels
UNION ALL
SELECT 'bucket' AS part,
       time_bucket(to_seconds(CAST($step_s AS BIGINT)), ts - INTERVAL 1 MICROSECOND,
                   CAST($origin AS TIMESTAMP)) AS bucket,
       name, NULL AS family, NULL AS model_name, le, labels, sum(delta) AS increase, NULL AS pairs, NULL AS resets,
       NULL AS broken, NULL AS gaps, NULL AS target, NULL AS t_end, NULL AS engine
FROM i
WHERE name IN (SELECT unnest($names))
GROUP BY 2, name, le, labels
UNION ALL
SELECT 'cached' AS part, NULL AS bucket, i.name, i.family, i.model_name, i.le, i.labels, sum(i.delta) AS increase,
       NULL AS pairs, NULL AS resets, NULL AS broken, NULL AS gaps, t.name AS target, i.ts AS t_end, i.engine
FROM i
JOIN targets t ON t.target_id = i.target_id
WHERE i.name IN (SELECT unnest($cached_names))
GROUP BY t.name, i.ts, i.name, i.family, i.model_name, i.engine, i.le, i.labels
ORDER BY part, bucket, target, t_end, name, model_name, engine, le, labels;

-- name: edge_day_stored
-- Whether the nightly job stored the day's first-day rows (edge_rollup_days, migration 015).
SELECT EXISTS (SELECT 1 FROM edge_rollup_days r JOIN deployments d ON d.deployment_id = r.deployment_id
               WHERE d.name = $deployment AND r.day = CAST($day AS DATE)) AS found;

-- name: edge_rollup_rows
-- span_increases_and_buckets' rows of the span (day, day + 1] read alone, every model, step a
-- day, as the nightly job stored them (edge_rollups): the names in $names in part 'bucket',
-- those in $cached_names in part 'cached', in that query's order and with its columns.
SELECT r.part, r.bucket, r.name, r.family, r.model_name, r.le, r.labels, r.increase, r.pairs, r.resets, r.broken,
       r.gaps, r.target, r.t_end, r.engine
FROM edge_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day = CAST($day AS DATE)
  AND (r.part <> 'bucket' OR r.name IN (SELECT unnest($names)))
  AND (r.part <> 'cached' OR r.name IN (SELECT unnest($cached_names)))
ORDER BY r.part, r.bucket, r.target, r.t_end, r.name, r.model_name, r.engine, r.le, r.labels;

-- name: span_has_points
-- Whether a deployment has any sample or ingested Prometheus step in ($t_after, $t_to]: a raw
-- span without one holds no pair (every pair ends at a sample, or is a step), so its readers
-- skip it (a window that runs past the data: a month whose data stops before its end).
SELECT EXISTS (SELECT 1 FROM samples sa
               JOIN series se ON se.series_id = sa.series_id
               JOIN targets t ON t.target_id = se.target_id
               JOIN deployments d ON d.deployment_id = t.deployment_id
               WHERE d.name = $deployment AND sa.ts > $t_after AND sa.ts <= $t_to)
    OR EXISTS (SELECT 1 FROM prom_increments pi
               JOIN series se ON se.series_id = pi.series_id
               JOIN targets t ON t.target_id = se.target_id
               JOIN deployments d ON d.deployment_id = t.deployment_id
               WHERE d.name = $deployment AND pi.ts > $t_after AND pi.ts <= $t_to) AS found;

-- name: span_gauges
-- Gauges of chosen names per time bucket [start, start + $step_s) aligned on $origin, over
-- samples in [$t_from, $t_to): mean, max and last per target and series. A model filter
-- keeps gauges without model_name (LMCache's L1 gauges carry none).
SELECT time_bucket(to_seconds(CAST($step_s AS BIGINT)), sa.ts, CAST($origin AS TIMESTAMP)) AS bucket,
       t.name AS target, se.name, se.model_name, se.engine, se.labels,
       avg(sa.value) AS mean, max(sa.value) AS max, arg_max(sa.value, sa.ts) AS last, count(*) AS n
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sa.ts >= $t_from AND sa.ts < $t_to AND se.type = 'gauge'
  AND se.name IN (SELECT unnest($names))
  AND ($model_name IS NULL OR se.model_name IS NULL OR se.model_name = $model_name)
GROUP BY ALL
ORDER BY bucket, target, se.name, se.labels;

-- name: gauge_rolled_days
-- UTC days in [$d_from, $d_to) for which gauge_rollups holds a deployment's gauges.
SELECT DISTINCT g.day
FROM gauge_rollups g JOIN deployments d ON d.deployment_id = g.deployment_id
WHERE d.name = $deployment AND g.day >= CAST($d_from AS DATE) AND g.day < CAST($d_to AS DATE)
ORDER BY 1;

-- name: daily_gauges
-- Per-day gauge summaries of chosen names over the days [$d_from, $d_to), shaped like
-- span_gauges with one bucket per day.
SELECT CAST(g.day AS TIMESTAMP) AS bucket, g.target, g.name, g.model_name, g.engine, g.labels,
       g.mean, g.max, g.last, g.n
FROM gauge_rollups g JOIN deployments d ON d.deployment_id = g.deployment_id
WHERE d.name = $deployment AND g.day >= CAST($d_from AS DATE) AND g.day < CAST($d_to AS DATE)
  AND g.name IN (SELECT unnest($names))
  AND ($model_name IS NULL OR g.model_name IS NULL OR g.model_name = $model_name)
ORDER BY bucket, g.target, g.name, g.labels;

-- name: delete_gauge_rollups_day
-- Forget one day's gauge summaries of a deployment (before computing them again).
DELETE FROM gauge_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: count_gauge_rollups_day
-- Gauge summaries stored for one day of a deployment.
SELECT count(*) FROM gauge_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: rollup_gauges_day
-- Summarise one UTC day [$t_from, $t_to) of a deployment's gauges into gauge_rollups.
INSERT INTO gauge_rollups (deployment_id, day, target, name, model_name, engine, labels, mean, max, last, n)
SELECT $deployment_id, CAST($t_from AS DATE), t.name, se.name, se.model_name, se.engine, se.labels,
       avg(sa.value), max(sa.value), arg_max(sa.value, sa.ts), count(*)
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
WHERE t.deployment_id = $deployment_id AND sa.ts >= $t_from AND sa.ts < $t_to AND se.type = 'gauge'
GROUP BY ALL;

-- name: dashboard_engines
-- vLLM engines (target x engine index) of targets with data in a window: an ok scrape inside
-- it, or a successful Prometheus chunk overlapping it. Reads no raw samples (a fleet target's
-- engines-reporting gauge, one sample per step, excepted).
WITH live AS (
    SELECT DISTINCT sc.target_id
    FROM scrapes sc JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = $deployment AND sc.ok AND sc.ts BETWEEN $t_from AND $t_to
    UNION
    SELECT pt.target_id
    FROM prom_targets pt JOIN targets t ON t.target_id = pt.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    JOIN prom_chunks c ON c.deployment_id = d.deployment_id
    WHERE d.name = $deployment AND c.ok AND c.t_to > $t_from AND c.t_from < $t_to
)
SELECT DISTINCT t.name AS target, se.engine
FROM series se JOIN targets t ON t.target_id = se.target_id
WHERE t.kind = 'vllm' AND se.engine IS NOT NULL AND t.target_id IN (SELECT target_id FROM live)
UNION ALL
-- a fleet target (aggregated ingestion) counts the most engines that reported in one step
SELECT f.target, CAST(r.i AS VARCHAR) AS engine
FROM (SELECT t.name AS target, CAST(max(sa.value) AS BIGINT) AS n
      FROM samples sa JOIN series se ON se.series_id = sa.series_id
      JOIN targets t ON t.target_id = se.target_id
      JOIN deployments d ON d.deployment_id = t.deployment_id
      WHERE d.name = $deployment AND se.name = 'kvplan:vllm_engines' AND sa.ts > $t_from AND sa.ts <= $t_to
      GROUP BY t.name) f
CROSS JOIN range(f.n) AS r(i)
ORDER BY 1, 2;

-- name: dashboard_topology
-- Every target of a deployment: kind, URL, engines and models it reports, whether its vLLM
-- runs a KV connector (reports external prefix-cache series), its data in a window.
WITH sc AS (
    SELECT sc.target_id, count(*) FILTER (WHERE sc.ok) AS ok, count(*) FILTER (WHERE NOT sc.ok) AS failed,
           max(sc.ts) FILTER (WHERE sc.ok) AS last_ok
    FROM scrapes sc WHERE sc.ts BETWEEN $t_from AND $t_to
    GROUP BY 1
),
fe AS (  -- fleet targets (aggregated ingestion): the most engines reporting in one step
    SELECT se.target_id, CAST(max(sa.value) AS BIGINT) AS n
    FROM samples sa JOIN series se ON se.series_id = sa.series_id
    WHERE se.name IN ('kvplan:vllm_engines', 'kvplan:sglang_engines') AND sa.ts BETWEEN $t_from AND $t_to
    GROUP BY 1
)
SELECT t.name AS target, t.kind, t.url,
       greatest(count(DISTINCT se.engine) FILTER (WHERE se.engine IS NOT NULL),
                coalesce(any_value(fe.n), 0)) AS engines,
       string_agg(DISTINCT se.model_name, ', ' ORDER BY se.model_name) AS models,
       bool_or(se.family = 'vllm:external_prefix_cache_queries') AS kv_connector,
       coalesce(any_value(sc.ok), 0) AS scrapes_ok, coalesce(any_value(sc.failed), 0) AS scrapes_failed,
       any_value(sc.last_ok) AS last_ok
FROM targets t
JOIN deployments d ON d.deployment_id = t.deployment_id
LEFT JOIN series se ON se.target_id = t.target_id
LEFT JOIN sc ON sc.target_id = t.target_id
LEFT JOIN fe ON fe.target_id = t.target_id
WHERE d.name = $deployment
GROUP BY t.name, t.kind, t.url
ORDER BY t.name;

-- name: failed_scrapes_in_window
-- Failed scrapes of a deployment inside a window, oldest first (gaps in direct scraping).
SELECT sc.ts, t.name AS target, sc.error, sc.source
FROM scrapes sc
JOIN targets t ON t.target_id = sc.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND NOT sc.ok AND sc.ts BETWEEN $t_from AND $t_to
ORDER BY sc.ts, t.name;

-- name: run_cache_shares
-- Per workload run of a deployment: requests with a known cached-token count, how many had
-- any cached token (the request-weighted hit share), and cached / prompt tokens of those.
SELECT r.run_id,
       count(*) FILTER (WHERE q.ok AND q.cached_tokens IS NOT NULL) AS requests_reporting,
       count(*) FILTER (WHERE q.ok AND q.cached_tokens > 0) AS requests_with_cache,
       sum(q.cached_tokens) FILTER (WHERE q.ok AND q.cached_tokens IS NOT NULL) AS cached_tokens,
       sum(q.prompt_tokens) FILTER (WHERE q.ok AND q.cached_tokens IS NOT NULL) AS prompt_tokens
FROM runs r
LEFT JOIN run_requests q ON q.run_id = r.run_id
WHERE r.deployment = $deployment
GROUP BY r.run_id
ORDER BY r.run_id;

-- name: recent_failed_scrapes
-- The latest failed scrapes of a deployment, newest first (the Collection page's errors).
SELECT sc.ts, t.name AS target, sc.error, sc.source
FROM scrapes sc
JOIN targets t ON t.target_id = sc.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND NOT sc.ok
ORDER BY sc.ts DESC, t.name
LIMIT $limit;

-- name: scrape_gaps
-- Stretches a target of a deployment had no data inside a window because its scrapes
-- failed: each run of consecutive failed scrapes of one target as [the last ok scrape
-- before it (else the first failure), the next ok scrape after it (else the last failure)],
-- with how many scrapes failed and the first error. Only targets with a failure in the
-- window are scanned.
WITH f AS (
    SELECT DISTINCT sc.target_id
    FROM scrapes sc JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = $deployment AND NOT sc.ok AND sc.ts BETWEEN $t_from AND $t_to
),
s AS (
    SELECT sc.target_id, sc.ts, sc.ok, sc.error,
           lead(sc.ts) OVER w AS next_ts,
           sum(CASE WHEN sc.ok THEN 1 ELSE 0 END) OVER w AS grp
    FROM scrapes sc JOIN f ON f.target_id = sc.target_id
    WINDOW w AS (PARTITION BY sc.target_id ORDER BY sc.ts)
)
SELECT t.name AS target, min(s.ts) AS t_from, max(coalesce(s.next_ts, s.ts)) FILTER (WHERE NOT s.ok) AS t_to,
       count(*) FILTER (WHERE NOT s.ok) AS failed, arg_min(s.error, s.ts) FILTER (WHERE NOT s.ok) AS error
FROM s JOIN targets t ON t.target_id = s.target_id
GROUP BY t.name, s.grp
HAVING count(*) FILTER (WHERE NOT s.ok) > 0
   AND max(coalesce(s.next_ts, s.ts)) FILTER (WHERE NOT s.ok) >= $t_from AND min(s.ts) <= $t_to
ORDER BY t_from, target;
