-- name: window_increases
-- Increase of every counter and histogram series of a deployment over [$t_from, $t_to],
-- optionally only one model (see the increments() macro for the exact rule).
SELECT se.name, se.family, se.model_name, se.engine, se.le, se.labels, t.name AS target,
       sum(i.delta) AS increase, count(*) AS pairs, sum(CAST(i.reset AS INTEGER)) AS resets,
       sum(CAST(i.broken AS INTEGER)) AS broken, sum(CAST(i.gap AS INTEGER)) AS gaps
FROM increments($deployment, $t_from, $t_to, $model_name) i
JOIN series se ON se.series_id = i.series_id
JOIN targets t ON t.target_id = se.target_id
GROUP BY ALL
ORDER BY se.name, t.name, se.model_name, se.engine, se.le, se.labels, se.family;

-- name: cached_intervals
-- The increases of the sample names in $names (the cached-tokens rule's) of a deployment over
-- [$t_from, $t_to], per target and scrape interval (its end): the rule is chosen per target and
-- per stretch of its life (a release upgraded mid-window changes what carries cached tokens).
SELECT t.name AS target, i.t_end, se.name, se.family, se.model_name, se.engine, se.le, se.labels,
       sum(i.delta) AS increase
FROM interval_increments($deployment, $t_from, $t_to, $model_name, $names) i
JOIN series se ON se.series_id = i.series_id
JOIN targets t ON t.target_id = se.target_id
WHERE $model_name IS NULL OR se.model_name = $model_name
GROUP BY ALL
ORDER BY t.name, i.t_end;

-- name: cached_intervals_span
-- cached_intervals of the scrape intervals ending in ($t_after, $t_to] whose earlier sample lies at
-- or after $t_lookback (a rolled day: its pairs, the one straddling its start included, as
-- rollup_day sums them; a raw edge of a window around rolled days, as span_increases reads it).
SELECT t.name AS target, i.t_end, se.name, se.family, se.model_name, se.engine, se.le, se.labels,
       sum(i.delta) AS increase
FROM interval_increments($deployment, $t_lookback, $t_to, $model_name, $names) i
JOIN series se ON se.series_id = i.series_id
JOIN targets t ON t.target_id = se.target_id
WHERE ($model_name IS NULL OR se.model_name = $model_name) AND i.t_end > $t_after
GROUP BY ALL
ORDER BY t.name, i.t_end;

-- name: window_gauges
-- Gauges of a deployment over the window: last, mean and max per series.
SELECT se.name, se.model_name, se.engine, se.labels, t.name AS target,
       arg_max(sa.value, sa.ts) AS last, avg(sa.value) AS mean, max(sa.value) AS max, count(*) AS n
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sa.ts BETWEEN $t_from AND $t_to AND se.type = 'gauge'
  AND ($model_name IS NULL OR se.model_name = $model_name)
GROUP BY ALL
ORDER BY se.name, t.name;

-- name: note_gauges
-- The last value of each gauge series of a deployment over the window, for the gauge names
-- $names and LMCache's in-process ones (lmcache:*): what window_stats notes. The series are
-- chosen before the samples are read (window_gauges reads every gauge sample of the window).
SELECT se.name, se.model_name, se.engine, se.labels, t.name AS target, arg_max(sa.value, sa.ts) AS last
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sa.ts BETWEEN $t_from AND $t_to AND se.type = 'gauge'
  AND (list_contains($names, se.name) OR se.name LIKE 'lmcache:%')
  AND ($model_name IS NULL OR se.model_name = $model_name)
GROUP BY ALL
ORDER BY se.name, t.name;

-- name: deployments
-- Every deployment with its targets and data range.
SELECT d.name AS deployment, count(DISTINCT t.target_id) AS targets,
       min(sc.ts) AS first_scrape, max(sc.ts) AS last_scrape,
       count(sc.scrape_id) AS scrapes, count(sc.scrape_id) FILTER (WHERE NOT sc.ok) AS failed
FROM deployments d
LEFT JOIN targets t ON t.deployment_id = d.deployment_id
LEFT JOIN scrapes sc ON sc.target_id = t.target_id
GROUP BY d.name
ORDER BY d.name;

-- name: models
-- model_name values seen in a deployment.
SELECT DISTINCT se.model_name
FROM series se JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND se.model_name IS NOT NULL
ORDER BY 1;

-- name: targets
-- Targets of a deployment with their last scrape and error counts.
SELECT t.name AS target, t.kind, t.url,
       max(sc.ts) AS last_scrape,
       count(sc.scrape_id) AS scrapes,
       count(sc.scrape_id) FILTER (WHERE NOT sc.ok) AS failed,
       arg_max(sc.error, sc.ts) AS last_error
FROM targets t
JOIN deployments d ON d.deployment_id = t.deployment_id
LEFT JOIN scrapes sc ON sc.target_id = t.target_id
WHERE d.name = $deployment
GROUP BY ALL
ORDER BY t.name;

-- name: scrape_log
-- Recent scrape attempts of a deployment, newest first.
SELECT sc.ts, t.name AS target, sc.ok, sc.error, sc.duration_s, sc.source, sc.n_samples
FROM scrapes sc
JOIN targets t ON t.target_id = sc.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment
ORDER BY sc.ts DESC
LIMIT $limit;

-- name: scrape_count_in_window
-- Successful and failed scrapes per target inside a window (report provenance).
SELECT t.name AS target, count(*) FILTER (WHERE sc.ok) AS ok, count(*) FILTER (WHERE NOT sc.ok) AS failed
FROM scrapes sc
JOIN targets t ON t.target_id = sc.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sc.ts BETWEEN $t_from AND $t_to
GROUP BY ALL
ORDER BY 1;

-- name: bad_samples
-- Stored samples of a deployment inside [$t_from, $t_to] that increments() leaves out (a
-- value not finite, beyond 2**53 or negative where it may only count up; a _created not
-- finite or outside 1970..3000), by series name: what an older kvplan let in.
SELECT se.name, count(*) AS n,
       count(*) FILTER (WHERE NOT (isfinite(sa.value) AND abs(sa.value) <= 9007199254740992.0)
                               OR (sa.value < 0 AND se.type <> 'gauge' AND se.name NOT LIKE '%\_sum' ESCAPE '\'))
           AS bad_values,
       count(*) FILTER (WHERE sa.created IS NOT NULL
                               AND NOT (isfinite(sa.created) AND sa.created > 0 AND sa.created < 32503680000.0))
           AS bad_created
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sa.ts BETWEEN $t_from AND $t_to
  AND ($model_name IS NULL OR se.model_name = $model_name)
  AND (NOT (isfinite(sa.value) AND abs(sa.value) <= 9007199254740992.0)
       OR (sa.value < 0 AND se.type <> 'gauge' AND se.name NOT LIKE '%\_sum' ESCAPE '\')
       OR (sa.created IS NOT NULL AND NOT (isfinite(sa.created) AND sa.created > 0
                                          AND sa.created < 32503680000.0)))
GROUP BY se.name
ORDER BY se.name;
