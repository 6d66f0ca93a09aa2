-- 009: what the prefill cost model reads.
--
-- interval_increments(): the increases of named series per scrape interval, with the interval's
-- start. The same rules as increments() (008): only sane samples, Prometheus's reset rule, a
-- decrease with an unchanged (or backwards) _created counted 0 (a broken target, not a restart),
-- a series' _created time as a zero point, a counter absent from its target's previous successful
-- scrape born at 0 there, ingested Prometheus steps (ts - step, ts]. Restricted to the names asked for before
-- any window function runs, so a week of history reads only the few series the fit needs.
CREATE OR REPLACE MACRO interval_increments(p_deployment, t_from, t_to, p_model, p_names) AS TABLE
WITH s AS (
    SELECT sa.series_id, sa.ts, sa.value,
           CASE WHEN isfinite(sa.created) AND sa.created > 0 AND sa.created < 32503680000.0
                THEN sa.created END AS created
    FROM samples sa
    JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment
      AND sa.ts BETWEEN t_from AND t_to
      AND se.type IN ('counter', 'histogram', 'summary')
      AND list_contains(p_names, se.name)
      AND (p_model IS NULL OR se.model_name = p_model OR se.model_name IS NULL)
      AND isfinite(sa.value) AND abs(sa.value) <= 9007199254740992.0
      AND (sa.value >= 0 OR se.name LIKE '%\_sum' ESCAPE '\')
),
zeros AS (
    SELECT series_id, make_timestamp(CAST(created * 1e6 AS BIGINT)) AS ts, 0.0 AS value, created
    FROM s
    WHERE created IS NOT NULL
    GROUP BY series_id, created
    HAVING make_timestamp(CAST(created * 1e6 AS BIGINT)) < min(ts)
       AND make_timestamp(CAST(created * 1e6 AS BIGINT)) >= t_from
),
scrape_prev AS (
    SELECT sc.target_id, sc.ts, lag(sc.ts) OVER (PARTITION BY sc.target_id ORDER BY sc.ts) AS prev_scrape
    FROM scrapes sc
    JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment AND sc.ok
),
births AS (
    SELECT x.series_id, x.prev_scrape AS ts, 0.0 AS value, CAST(NULL AS DOUBLE) AS created
    FROM (
        SELECT s.series_id, s.ts, sp.prev_scrape,
               lag(s.ts) OVER (PARTITION BY s.series_id ORDER BY s.ts) AS prev_sample
        FROM s
        JOIN series se ON se.series_id = s.series_id
        JOIN scrape_prev sp ON sp.target_id = se.target_id AND sp.ts = s.ts
    ) x
    WHERE x.prev_scrape IS NOT NULL AND x.prev_scrape >= t_from
      AND (x.prev_sample IS NULL OR x.prev_sample < x.prev_scrape)
),
pts AS (
    SELECT * FROM s
    UNION ALL
    SELECT * FROM zeros
    UNION ALL
    SELECT * FROM births
),
pairs AS (
    SELECT series_id, ts, value, created,
           lag(value) OVER w AS prev, lag(created) OVER w AS prev_created, lag(ts) OVER w AS prev_ts
    FROM pts
    WINDOW w AS (PARTITION BY series_id ORDER BY ts)
),
judged AS (
    SELECT series_id, ts, prev_ts, value, prev,
           coalesce(created < prev_created OR (value < prev AND created = prev_created), false) AS broken
    FROM pairs
    WHERE prev IS NOT NULL
)
SELECT series_id, prev_ts AS t_start, ts AS t_end,
       CASE WHEN broken THEN 0.0 WHEN value < prev THEN value ELSE value - prev END AS delta,
       value < prev AND NOT broken AS reset
FROM judged
UNION ALL
SELECT pi.series_id, pi.ts - to_seconds(CAST(pi.step_s AS BIGINT)) AS t_start, pi.ts AS t_end,
       pi.delta, pi.resets > 0 AS reset
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND list_contains(p_names, se.name)
  AND (p_model IS NULL OR se.model_name = p_model OR se.model_name IS NULL);

-- A measured A/B (`kvplan pilot` with reuse off, then on, over the same workload): which side a
-- run is, the engine time it took and how that was measured, and the pair it belongs to.
ALTER TABLE runs ADD COLUMN reuse VARCHAR;                  -- off | on | NULL (not an A/B side)
ALTER TABLE runs ADD COLUMN engine_seconds DOUBLE;          -- engine time the run took
ALTER TABLE runs ADD COLUMN engine_seconds_source VARCHAR;  -- how, e.g. "worker CPU seconds (/proc)"
ALTER TABLE runs ADD COLUMN ab_pair VARCHAR;                -- same value on the off and on run
ALTER TABLE runs ADD COLUMN cached_tokens DOUBLE;           -- cached prompt tokens the servers reported
