-- 012: a series missing from one scrape continues from its last value, and trace
-- lengths are BIGINT.
--
-- Until 011, a counter absent from its target's previous successful scrape was "born" at 0
-- there (006), whether or not it had been seen before. A series dropped from one middle scrape
-- and back in the next (a proxy that truncated the body, a server that skipped a family) was
-- then counted from 0 a second time: +23,852 prompt tokens of 47,911 on a recorded history,
-- a hit rate moved from 0.406 to 0.271. Counting from 0 is right only for
-- * a series never seen before (no sample of it earlier than that scrape, inside the window
--   or before it): LMCache's multi-process server exposes a counter only after its first
--   increment, and without _created (006's reason, kept);
-- * a process whose _created changed (the created-time zero point, 001/008, kept).
-- A series seen before that comes back continues from its last value: the pair (last value,
-- value now) is an ordinary pair (Prometheus's reset rule, 008's broken rule), and is flagged
-- `gap` so the stats can say which series were missing from a scrape.
--
-- Self-contained: these macros are the whole rules, replacing 008's increments() and 009's
-- interval_increments(). New output column: increments().gap, interval_increments().gap.

CREATE OR REPLACE MACRO increments(p_deployment, t_from, t_to, p_model) AS TABLE
WITH scrape_prev AS (
    -- each successful scrape of the deployment's targets and the one before it
    SELECT sc.target_id, sc.ts, lag(sc.ts) OVER (PARTITION BY sc.target_id ORDER BY sc.ts) AS prev_scrape
    FROM scrapes sc
    JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment AND sc.ok
),
s AS (
    SELECT sa.series_id, sa.ts, sa.value,
           CASE WHEN isfinite(sa.created) AND sa.created > 0 AND sa.created < 32503680000.0
                THEN sa.created END AS created,
           sp.prev_scrape, true AS real
    FROM samples sa
    JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    LEFT JOIN scrape_prev sp ON sp.target_id = se.target_id AND sp.ts = sa.ts
    WHERE d.name = p_deployment
      AND sa.ts BETWEEN t_from AND t_to
      AND se.type IN ('counter', 'histogram', 'summary')
      AND (p_model IS NULL OR se.model_name = p_model)
      AND isfinite(sa.value) AND abs(sa.value) <= 9007199254740992.0
      AND (sa.value >= 0 OR se.name LIKE '%\_sum' ESCAPE '\')
),
zeros AS (
    SELECT series_id, make_timestamp(CAST(created * 1e6 AS BIGINT)) AS ts, 0.0 AS value, created,
           CAST(NULL AS TIMESTAMP) AS prev_scrape, false AS real
    FROM s
    WHERE created IS NOT NULL
    GROUP BY series_id, created
    HAVING make_timestamp(CAST(created * 1e6 AS BIGINT)) < min(ts)
       AND make_timestamp(CAST(created * 1e6 AS BIGINT)) >= t_from
),
firsts AS (
    -- the first sample of a series inside the window whose target was scraped (ok) inside the
    -- window before it, without it
    SELECT series_id, ts, prev_scrape
    FROM (SELECT series_id, ts, prev_scrape, row_number() OVER (PARTITION BY series_id ORDER BY ts) AS k FROM s) f
    WHERE k = 1 AND prev_scrape IS NOT NULL AND prev_scrape >= t_from
),
seen_before AS (
    SELECT DISTINCT f.series_id
    FROM firsts f
    JOIN samples sa ON sa.series_id = f.series_id AND sa.ts < f.prev_scrape
),
births AS (
    -- a series never seen before was 0 at its target's previous successful scrape
    SELECT f.series_id, f.prev_scrape AS ts, 0.0 AS value, CAST(NULL AS DOUBLE) AS created,
           CAST(NULL AS TIMESTAMP) AS prev_scrape, false AS real
    FROM firsts f
    WHERE f.series_id NOT IN (SELECT series_id FROM seen_before)
),
pts AS (
    SELECT * FROM s
    UNION ALL
    SELECT * FROM zeros
    UNION ALL
    SELECT * FROM births
),
pairs AS (
    SELECT series_id, ts, value, created, prev_scrape, real,
           lag(value) OVER w AS prev, lag(created) OVER w AS prev_created, lag(ts) OVER w AS prev_ts,
           lag(real) OVER w AS prev_real
    FROM pts
    WINDOW w AS (PARTITION BY series_id ORDER BY ts)
),
judged AS (
    SELECT series_id, ts, value, prev,
           coalesce(created < prev_created OR (value < prev AND created = prev_created), false) AS broken,
           coalesce(real AND prev_real AND prev_scrape > prev_ts, false) AS gap
    FROM pairs
    WHERE prev IS NOT NULL
)
SELECT series_id, ts,
       CASE WHEN broken THEN 0.0 WHEN value < prev THEN value ELSE value - prev END AS delta,
       value < prev AND NOT broken AS reset,
       broken,
       gap
FROM judged
UNION ALL
SELECT pi.series_id, pi.ts, pi.delta, pi.resets > 0 AS reset, false AS broken, false AS gap
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND (p_model IS NULL OR se.model_name = p_model);

CREATE OR REPLACE MACRO interval_increments(p_deployment, t_from, t_to, p_model, p_names) AS TABLE
WITH scrape_prev AS (
    SELECT sc.target_id, sc.ts, lag(sc.ts) OVER (PARTITION BY sc.target_id ORDER BY sc.ts) AS prev_scrape
    FROM scrapes sc
    JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment AND sc.ok
),
s AS (
    SELECT sa.series_id, sa.ts, sa.value,
           CASE WHEN isfinite(sa.created) AND sa.created > 0 AND sa.created < 32503680000.0
                THEN sa.created END AS created,
           sp.prev_scrape, true AS real
    FROM samples sa
    JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    LEFT JOIN scrape_prev sp ON sp.target_id = se.target_id AND sp.ts = sa.ts
    WHERE d.name = p_deployment
      AND sa.ts BETWEEN t_from AND t_to
      AND se.type IN ('counter', 'histogram', 'summary')
      AND list_contains(p_names, se.name)
      AND (p_model IS NULL OR se.model_name = p_model OR se.model_name IS NULL)
      AND isfinite(sa.value) AND abs(sa.value) <= 9007199254740992.0
      AND (sa.value >= 0 OR se.name LIKE '%\_sum' ESCAPE '\')
),
zeros AS (
    SELECT series_id, make_timestamp(CAST(created * 1e6 AS BIGINT)) AS ts, 0.0 AS value, created,
           CAST(NULL AS TIMESTAMP) AS prev_scrape, false AS real
    FROM s
    WHERE created IS NOT NULL
    GROUP BY series_id, created
    HAVING make_timestamp(CAST(created * 1e6 AS BIGINT)) < min(ts)
       AND make_timestamp(CAST(created * 1e6 AS BIGINT)) >= t_from
),
firsts AS (
    SELECT series_id, ts, prev_scrape
    FROM (SELECT series_id, ts, prev_scrape, row_number() OVER (PARTITION BY series_id ORDER BY ts) AS k FROM s) f
    WHERE k = 1 AND prev_scrape IS NOT NULL AND prev_scrape >= t_from
),
seen_before AS (
    SELECT DISTINCT f.series_id
    FROM firsts f
    JOIN samples sa ON sa.series_id = f.series_id AND sa.ts < f.prev_scrape
),
births AS (
    SELECT f.series_id, f.prev_scrape AS ts, 0.0 AS value, CAST(NULL AS DOUBLE) AS created,
           CAST(NULL AS TIMESTAMP) AS prev_scrape, false AS real
    FROM firsts f
    WHERE f.series_id NOT IN (SELECT series_id FROM seen_before)
),
pts AS (
    SELECT * FROM s
    UNION ALL
    SELECT * FROM zeros
    UNION ALL
    SELECT * FROM births
),
pairs AS (
    SELECT series_id, ts, value, created, prev_scrape, real,
           lag(value) OVER w AS prev, lag(created) OVER w AS prev_created, lag(ts) OVER w AS prev_ts,
           lag(real) OVER w AS prev_real
    FROM pts
    WINDOW w AS (PARTITION BY series_id ORDER BY ts)
),
judged AS (
    SELECT series_id, ts, prev_ts, value, prev,
           coalesce(created < prev_created OR (value < prev AND created = prev_created), false) AS broken,
           coalesce(real AND prev_real AND prev_scrape > prev_ts, false) AS gap
    FROM pairs
    WHERE prev IS NOT NULL
)
SELECT series_id, prev_ts AS t_start, ts AS t_end,
       CASE WHEN broken THEN 0.0 WHEN value < prev THEN value ELSE value - prev END AS delta,
       value < prev AND NOT broken AS reset,
       gap
FROM judged
UNION ALL
SELECT pi.series_id, pi.ts - to_seconds(CAST(pi.step_s AS BIGINT)) AS t_start, pi.ts AS t_end,
       pi.delta, pi.resets > 0 AS reset, false AS gap
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND list_contains(p_names, se.name)
  AND (p_model IS NULL OR se.model_name = p_model OR se.model_name IS NULL);

-- Trace lengths: a prompt of 2**31 tokens wrapped to -2**31 in INTEGER columns; the parser now
-- bounds them (collectors.trace_parse), and the columns hold what it allows.
ALTER TABLE trace_requests ALTER COLUMN seq_len TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN output_len TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN chunk_size TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN line TYPE BIGINT;
ALTER TABLE trace_files ALTER COLUMN lines TYPE BIGINT;
