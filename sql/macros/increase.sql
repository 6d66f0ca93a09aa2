-- The exact-increase rule: how kvplan turns stored counter samples into increases.
--
-- This file is the ONE definition of the rule. The migration runner (sql/db.py) applies it
-- after the numbered migrations, in one transaction, whenever its text differs from what the
-- database recorded in `schema_macros` (CREATE OR REPLACE: a database migrated by an older
-- kvplan gets today's rule, the same text a new database gets). Migrations 001-012 used to
-- write these macros out in full, each copy replacing the one before; a change of the rule is
-- now an edit of this file.
--
-- For each series of a deployment (counters, histogram and summary parts), the pairs of
-- consecutive points inside [t_from, t_to]:
-- * no extrapolation to the window edges: only pairs of points both inside the window count;
-- * sane samples only (a bad row is left out, never raised; query bad_samples reports it): a
--   value that is not finite, beyond +-2**53 (where a double stops counting by one), or
--   negative for a monotonic sample (anything but a histogram/summary _sum) is not used; a
--   _created outside (1970, 3000) or not finite is treated as absent;
-- * a series' _created time inside the window is a point of value 0 (the counter was 0 when its
--   process started): a counter that first appears mid-window, or restarts and climbs past its
--   old value between two scrapes, is still counted exactly once;
-- * a series never seen before (no sample of it earlier than its first scrape in the window,
--   inside the window or before it) was 0 at its target's previous successful scrape: LMCache's
--   multi-process server exposes a counter only after its first increment, without _created
--   (Prometheus 3 calls this created-timestamp zero ingestion). Only for directly scraped
--   targets: kvplan knows when it scraped them and that the series was absent then;
--   ... unless the series' _created is older than that previous scrape: it existed then and was
--   only missing from it (a payload cut off at a family boundary, a label child left out), so it
--   counts from its first value in the window, and that first pair is flagged `gap`;
-- * a series seen before that comes back after missing from a scrape continues from its last
--   value (an ordinary pair) and the pair is flagged `gap`;
-- * decreases. Prometheus takes every decrease as a reset to 0 (the pair's increase is the new
--   value), because it does not know when a counter's process started. kvplan often does
--   (X_created). Where _created is known on both sides of a sample pair, a sample counts what its
--   own process (its _created) added since that process's highest earlier value in the window:
--   - _created unchanged and value below that: no process restarted, so this is a broken target
--     (a glitch sample, a counter that went backwards): the pair counts 0 and is flagged `broken`,
--     and the climb back afterwards counts only what lies above the earlier highest value;
--   - _created differs from the previous sample's and that process answered earlier in the
--     window (two processes behind one URL, answering in turn): it counts what it added since (the
--     older process's samples are flagged `broken`); a process first seen in the window whose
--     _created is older than the window (a second process answering) counts 0, flagged `broken`;
--     one whose _created lies inside the window but after its own first sample (the server's
--     clock ahead of kvplan's) is a restart, counted from 0;
--   - a restart (a _created inside the window, after the previous sample) is the zero point above:
--     the old process's pair to it is a reset, the new process counts from 0;
--   - _created unknown on either side: Prometheus's rule, a decrease is a reset and the pair counts
--     the new value.
-- Ingested Prometheus steps (prom_increments, step (ts - step, ts] ending in (t_from, t_to]) come
-- next to the scrape-derived pairs, so every query built on these macros works on either source.
-- For step-aligned windows with a sample at the window start both count exactly the same pairs.

-- increase_pairs(): the shared body. p_all_names: every series (p_names ignored), else only the
-- series named in p_names. p_unlabelled: with a model asked for, also series with no model label.
-- One row per counted pair: (series_id, t_start, t_end, delta, reset, broken, gap).
CREATE OR REPLACE MACRO increase_pairs(p_deployment, t_from, t_to, p_model, p_names, p_all_names,
                                       p_unlabelled) AS TABLE
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
      AND (p_all_names OR list_contains(p_names, se.name))
      AND (p_model IS NULL OR se.model_name = p_model OR (p_unlabelled AND se.model_name IS NULL))
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
late AS (
    -- first seen in the window after a scrape of its target without it, under a _created
    -- older than that scrape: it was there, not born there
    SELECT f.series_id, f.ts
    FROM firsts f
    JOIN s ON s.series_id = f.series_id AND s.ts = f.ts
    WHERE f.series_id NOT IN (SELECT series_id FROM seen_before)
      AND s.created IS NOT NULL AND make_timestamp(CAST(s.created * 1e6 AS BIGINT)) < f.prev_scrape
),
births AS (
    -- a series never seen before was 0 at its target's previous successful scrape, unless its
    -- _created says it already existed then (a truncated payload, a label child missing from a
    -- scrape): that one counts from its first value (`late`)
    SELECT f.series_id, f.prev_scrape AS ts, 0.0 AS value, CAST(NULL AS DOUBLE) AS created,
           CAST(NULL AS TIMESTAMP) AS prev_scrape, false AS real
    FROM firsts f
    WHERE f.series_id NOT IN (SELECT series_id FROM seen_before)
      AND f.series_id NOT IN (SELECT series_id FROM late)
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
           lag(real) OVER w AS prev_real,
           -- the highest value the same process (same _created) reported earlier in the window
           max(value) OVER (PARTITION BY series_id, created ORDER BY ts
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS proc_prev
    FROM pts
    WINDOW w AS (PARTITION BY series_id ORDER BY ts)
),
judged AS (
    SELECT series_id, ts, prev_ts, value, prev, proc_prev, created, prev_created, prev_real,
           -- _created known on both sides of a real sample: counted against its own process
           coalesce(real AND created IS NOT NULL AND prev_created IS NOT NULL, false) AS known,
           coalesce(real AND prev_real AND prev_scrape > prev_ts, false) AS gap
    FROM pairs
    WHERE prev IS NOT NULL
),
counted AS (
    SELECT series_id, ts, prev_ts, gap,
           CASE WHEN NOT known THEN (CASE WHEN value < prev THEN value ELSE value - prev END)
                WHEN proc_prev IS NULL THEN (CASE WHEN born_inside THEN value ELSE 0.0 END)
                ELSE greatest(value - proc_prev, 0.0) END AS delta,
           (NOT known AND value < prev) OR (known AND proc_prev IS NULL AND born_inside) AS reset,
           known AND ((proc_prev IS NULL AND NOT born_inside) OR value < proc_prev
                      OR (created < prev_created AND prev_real)) AS broken
    FROM (SELECT *, make_timestamp(CAST(created * 1e6 AS BIGINT)) >= t_from AS born_inside FROM judged) j
)
SELECT c.series_id, c.prev_ts AS t_start, c.ts AS t_end, c.delta, c.reset, c.broken,
       c.gap OR l.series_id IS NOT NULL AS gap
FROM counted c
LEFT JOIN late l ON l.series_id = c.series_id AND l.ts = c.prev_ts
UNION ALL
SELECT pi.series_id, pi.ts - to_seconds(CAST(pi.step_s AS BIGINT)) AS t_start, pi.ts AS t_end,
       pi.delta, pi.resets > 0 AS reset, false AS broken, false AS gap
FROM prom_increments pi
JOIN series se ON se.series_id = pi.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = p_deployment
  AND pi.ts > t_from AND pi.ts <= t_to
  AND (p_all_names OR list_contains(p_names, se.name))
  AND (p_model IS NULL OR se.model_name = p_model OR (p_unlabelled AND se.model_name IS NULL));

-- increments(): every counted pair of a deployment's series inside [t_from, t_to], optionally of
-- one model (series without a model label are then left out). What the window queries sum.
CREATE OR REPLACE MACRO increments(p_deployment, t_from, t_to, p_model) AS TABLE
SELECT series_id, t_end AS ts, delta, reset, broken, gap
FROM increase_pairs(p_deployment, t_from, t_to, p_model, NULL, true, false);

-- interval_increments(): the increases of the series named in p_names per interval, with the
-- interval's start (what the prefill cost model reads). Restricted to the names asked for before
-- any window function runs, so a week of history reads only the few series the fit needs; with
-- a model asked for, series without a model label count too.
CREATE OR REPLACE MACRO interval_increments(p_deployment, t_from, t_to, p_model, p_names) AS TABLE
SELECT series_id, t_start, t_end, delta, reset, gap
FROM increase_pairs(p_deployment, t_from, t_to, p_model, p_names, false, true);
