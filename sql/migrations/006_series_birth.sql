-- 006: a counter that first appears in a scrape was 0 at the target's previous successful
-- scrape. LMCache's multi-process server (OpenTelemetry) exposes a counter only after its first
-- increment and without a _created sample, so without this rule a window in which the series
-- is born would miss its first increase. (Prometheus 3 calls the same idea created-timestamp
-- zero ingestion; Prometheus 2.x's increase() extrapolates instead.) Only for directly scraped
-- targets: kvplan knows when it scraped them and that the series was absent then.

CREATE OR REPLACE MACRO increments(p_deployment, t_from, t_to, p_model) AS TABLE
WITH s AS (
    SELECT sa.series_id, sa.ts, sa.value, sa.created
    FROM samples sa
    JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment
      AND sa.ts BETWEEN t_from AND t_to
      AND se.type IN ('counter', 'histogram', 'summary')
      AND (p_model IS NULL OR se.model_name = p_model)
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
    -- each successful scrape of the deployment's targets and the one before it
    SELECT sc.target_id, sc.ts, lag(sc.ts) OVER (PARTITION BY sc.target_id ORDER BY sc.ts) AS prev_scrape
    FROM scrapes sc
    JOIN targets t ON t.target_id = sc.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment AND sc.ok
),
births AS (
    -- a series absent from its target's previous successful scrape was 0 then
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
    SELECT series_id, ts, value, lag(value) OVER (PARTITION BY series_id ORDER BY ts) AS prev
    FROM pts
)
SELECT series_id, ts,
       CASE WHEN value < prev THEN value ELSE value - prev END AS delta,
       value < prev AS reset
FROM pairs
WHERE prev IS NOT NULL
UNION ALL
SELECT pi.series_id, pi.ts, pi.delta, pi.resets > 0 AS reset
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND (p_model IS NULL OR se.model_name = p_model);
