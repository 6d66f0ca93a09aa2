-- name: prefill_intervals
-- Per target and scrape interval ending in ($t_after, $t_to] and starting at or after $t_lookback:
-- the increases the prefill cost model reads (macro prefill_rows, sql/macros/prefill.sql), one
-- row per (target, interval end). With t_lookback = t_after = t_from: every interval inside
-- [t_from, t_to].
SELECT * FROM prefill_rows($deployment, $t_lookback, $t_after, $t_to, $model_name, $names)
ORDER BY t_end, target;

-- name: prefill_rolled_days
-- UTC days in [$d_from, $d_to) whose prefill intervals the nightly job stored (prefill_rollup_days).
SELECT r.day
FROM prefill_rollup_days r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day >= CAST($d_from AS DATE) AND r.day < CAST($d_to AS DATE)
ORDER BY 1;

-- name: prefill_rollup_rows
-- The stored prefill intervals of a deployment's UTC days in [$d_from, $d_to), shaped like
-- prefill_intervals' rows.
SELECT r.target, r.kind, r.t_start, r.t_end, r.engines, r.requests, r.prefill_seconds, r.computed_tokens,
       r.prompt_tokens, r.cached_tokens, r.external_tokens, r.by_source_tokens, r.local_hit_tokens,
       r.prefix_hits, r.external_hits, r.external_queries, r.lm_inproc_hits, r.inference_seconds,
       r.generation_tokens, r.lmcache_write_chunks, r.lookup_seconds, r.lookups, r.step_buckets, r.reset
FROM prefill_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day >= CAST($d_from AS DATE) AND r.day < CAST($d_to AS DATE)
ORDER BY r.t_end, r.target;

-- name: delete_prefill_rollups_day
-- Forget one day's stored prefill intervals of a deployment (before computing them again).
DELETE FROM prefill_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: delete_prefill_rollup_mark
-- Forget that one day's prefill intervals were stored.
DELETE FROM prefill_rollup_days WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: rollup_prefill_day
-- Store one UTC day (t_after, t_to] of a deployment's prefill intervals (those ending in the day,
-- starting at or after $t_lookback), for every model (the reader reads one model's raw).
INSERT INTO prefill_rollups (deployment_id, day, target, kind, t_start, t_end, engines, requests, prefill_seconds,
                             computed_tokens, prompt_tokens, cached_tokens, external_tokens, by_source_tokens,
                             local_hit_tokens, prefix_hits, external_hits, external_queries, lm_inproc_hits,
                             inference_seconds, generation_tokens, lmcache_write_chunks, lookup_seconds, lookups,
                             step_buckets, reset)
SELECT $deployment_id, CAST($t_after AS DATE), p.target, p.kind, p.t_start, p.t_end, p.engines, p.requests,
       p.prefill_seconds, p.computed_tokens, p.prompt_tokens, p.cached_tokens, p.external_tokens,
       p.by_source_tokens, p.local_hit_tokens, p.prefix_hits, p.external_hits, p.external_queries,
       p.lm_inproc_hits, p.inference_seconds, p.generation_tokens, p.lmcache_write_chunks, p.lookup_seconds,
       p.lookups, p.step_buckets, p.reset
FROM prefill_rows($deployment, $t_lookback, $t_after, $t_to, NULL, $names) p;

-- name: rollup_prefill_edge_day
-- Store prefill_intervals' rows of the day (t_from, t_to] read alone (t_lookback = t_after =
-- t_from: every interval inside the day), every model: a window starting at the day's midnight
-- reads its first day from here.
INSERT INTO prefill_edge_rollups (deployment_id, day, target, kind, t_start, t_end, engines, requests,
                                  prefill_seconds, computed_tokens, prompt_tokens, cached_tokens, external_tokens,
                                  by_source_tokens, local_hit_tokens, prefix_hits, external_hits, external_queries,
                                  lm_inproc_hits, inference_seconds, generation_tokens, lmcache_write_chunks,
                                  lookup_seconds, lookups, step_buckets, reset)
SELECT $deployment_id, CAST($t_from AS DATE), p.target, p.kind, p.t_start, p.t_end, p.engines, p.requests,
       p.prefill_seconds, p.computed_tokens, p.prompt_tokens, p.cached_tokens, p.external_tokens,
       p.by_source_tokens, p.local_hit_tokens, p.prefix_hits, p.external_hits, p.external_queries,
       p.lm_inproc_hits, p.inference_seconds, p.generation_tokens, p.lmcache_write_chunks, p.lookup_seconds,
       p.lookups, p.step_buckets, p.reset
FROM prefill_rows($deployment, $t_from, $t_from, $t_to, NULL, $names) p;

-- name: prefill_edge_rollup_rows
-- prefill_intervals' rows of the span (day, day + 1] read alone, every model, as the nightly job
-- stored them (prefill_edge_rollups), in that query's order.
SELECT r.target, r.kind, r.t_start, r.t_end, r.engines, r.requests, r.prefill_seconds, r.computed_tokens,
       r.prompt_tokens, r.cached_tokens, r.external_tokens, r.by_source_tokens, r.local_hit_tokens,
       r.prefix_hits, r.external_hits, r.external_queries, r.lm_inproc_hits, r.inference_seconds,
       r.generation_tokens, r.lmcache_write_chunks, r.lookup_seconds, r.lookups, r.step_buckets, r.reset
FROM prefill_edge_rollups r JOIN deployments d ON d.deployment_id = r.deployment_id
WHERE d.name = $deployment AND r.day = CAST($day AS DATE)
ORDER BY r.t_end, r.target;

-- name: mark_prefill_day
-- The day's prefill intervals are stored (also when there were none).
INSERT INTO prefill_rollup_days (deployment_id, day, intervals)
SELECT $deployment_id, CAST($day AS DATE), count(*)
FROM prefill_rollups WHERE deployment_id = $deployment_id AND day = CAST($day AS DATE);

-- name: measured_ab_pairs
-- Measured A/B pairs of a deployment: a reuse-off and a reuse-on run with the same ab_pair, both
-- with engine time, newest first. Cached tokens of the reuse-on run: what the servers reported
-- over the run (runs.cached_tokens), else the sum the clients were told (usage).
SELECT a.ab_pair, a.run_id AS off_run, b.run_id AS on_run, a.engine_seconds AS off_engine_seconds,
       b.engine_seconds AS on_engine_seconds, b.engine_seconds_source AS source, b.measured_on,
       coalesce(b.cached_tokens,
                (SELECT sum(q.cached_tokens) FROM run_requests q WHERE q.run_id = b.run_id AND q.ok))
           AS on_cached_tokens
FROM runs a
JOIN runs b ON a.ab_pair = b.ab_pair AND a.deployment = b.deployment
WHERE a.deployment = $deployment AND a.reuse = 'off' AND b.reuse = 'on'
  AND a.engine_seconds IS NOT NULL AND b.engine_seconds IS NOT NULL
ORDER BY b.ended_at DESC, b.run_id DESC;
