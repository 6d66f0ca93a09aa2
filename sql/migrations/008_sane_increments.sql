-- 008: increments() reads only sane samples and checks counters for sense.
--
-- Guards (a bad row is left out, never raised; app.service reports it, query bad_samples):
-- * a value that is not finite, beyond +-2**53 (where a double stops counting by one), or
--   negative for a monotonic sample (anything but a histogram/summary _sum) is not used;
-- * a _created outside (1970, 3000) or not finite is treated as absent (it used to overflow
--   the timestamp conversion and fail every later read of the window).
--
-- Decreases. Prometheus's rate()/increase() take every decrease of a counter as a reset to 0
-- (the increase of that pair is the new value): Prometheus does not know when a counter's
-- process started. kvplan often does: vLLM (prometheus_client) exposes X_created, the start
-- time of each series. So, for a pair of samples (prev, value) of one series:
-- * _created unchanged (known on both sides) and value < prev: no process restarted, so this
--   is NOT a reset but a broken or replaced target (two processes behind one URL, a counter
--   that went backwards): the pair counts 0 and is flagged `broken` (stats warn about it);
-- * _created moved backwards (an older process answered after a newer one): the same;
-- * _created changed forwards or is unknown on either side (LMCache MP series, Prometheus-
--   ingested increases): Prometheus's rule, a decrease is a reset and counts the new value.
-- A restart whose _created lies inside the window still gets its zero point (migration 001),
-- so a restarted counter is counted from 0 exactly once.
-- Migrations are self-contained: this macro is the whole rule, replacing 006's.

CREATE OR REPLACE MACRO increments(p_deployment, t_from, t_to, p_model) AS TABLE
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
      AND (p_model IS NULL OR se.model_name = p_model)
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
    SELECT series_id, ts, value, created,
           lag(value) OVER w AS prev, lag(created) OVER w AS prev_created
    FROM pts
    WINDOW w AS (PARTITION BY series_id ORDER BY ts)
),
judged AS (
    SELECT series_id, ts, value, prev,
           coalesce(created < prev_created OR (value < prev AND created = prev_created), false) AS broken
    FROM pairs
    WHERE prev IS NOT NULL
)
SELECT series_id, ts,
       CASE WHEN broken THEN 0.0 WHEN value < prev THEN value ELSE value - prev END AS delta,
       value < prev AND NOT broken AS reset,
       broken
FROM judged
UNION ALL
SELECT pi.series_id, pi.ts, pi.delta, pi.resets > 0 AS reset, false AS broken
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND (p_model IS NULL OR se.model_name = p_model);
