-- name: prefill_intervals
-- Per target and scrape interval over [$t_from, $t_to]: the increases the prefill cost model
-- reads (app.data.prefill), one row per (target, interval end). $names lists the sample names
-- (the macro reads only those). Iteration-token buckets are returned per engine; the reader sums
-- them by bound. computed_tokens is NULL where the release has no request_prefill_kv_computed_tokens
-- (vLLM before 0.13): the reader then derives it from the cached tokens, or leaves the interval out.
WITH i AS (
    SELECT se.target_id, i.t_start, i.t_end, se.name, se.le, se.engine, se.labels, i.delta, i.reset
    FROM interval_increments($deployment, $t_from, $t_to, $model_name, $names) i
    JOIN series se ON se.series_id = i.series_id
),
fe AS (  -- fleet targets (aggregated ingestion): engines reporting in each step
    SELECT se.target_id, sa.ts, max(sa.value) AS n
    FROM samples sa JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = $deployment AND se.name = 'kvplan:vllm_engines' AND sa.ts > $t_from AND sa.ts <= $t_to
      AND ($model_name IS NULL OR se.model_name = $model_name)
    GROUP BY 1, 2
)
SELECT t.name AS target, t.kind, min(i.t_start) AS t_start, i.t_end,
       greatest(count(DISTINCT coalesce(i.engine, '')) FILTER (WHERE i.name = 'vllm:request_prefill_time_seconds_count'),
                CAST(coalesce(max(fe.n), 0) AS BIGINT)) AS engines,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prefill_time_seconds_count') AS requests,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prefill_time_seconds_sum') AS prefill_seconds,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prefill_kv_computed_tokens_sum') AS computed_tokens,
       -- the prompt-length histogram's sum, else the prompt-token counter (the same tokens; a
       -- release or a payload without the histogram still has the counter)
       coalesce(sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prompt_tokens_sum'),
                sum(i.delta) FILTER (WHERE i.name = 'vllm:prompt_tokens_total')) AS prompt_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:prompt_tokens_cached_total') AS cached_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:prompt_tokens_by_source_total'
                              AND json_extract_string(i.labels, '$.source') = 'external_kv_transfer')
           AS external_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:prompt_tokens_by_source_total') AS by_source_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:prompt_tokens_by_source_total'
                              AND json_extract_string(i.labels, '$.source') = 'local_cache_hit') AS local_hit_tokens,
       -- the prefix-cache hits, read with the name the release has (newest first, never both)
       coalesce(sum(i.delta) FILTER (WHERE i.name = 'vllm:prefix_cache_hits_total'),
                sum(i.delta) FILTER (WHERE i.name = 'vllm:gpu_prefix_cache_hits_total')) AS prefix_hits,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:external_prefix_cache_hits_total') AS external_hits,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:external_prefix_cache_queries_total') AS external_queries,
       -- LMCache in-process: the tokens it loaded, once per engine (its TP workers each count them)
       sum(i.delta) FILTER (WHERE i.name = 'lmcache:num_hit_tokens_total')
           / greatest(count(DISTINCT json_extract_string(i.labels, '$.worker_id'))
                      FILTER (WHERE i.name = 'lmcache:num_hit_tokens_total'), 1) AS lm_inproc_hits,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_inference_time_seconds_sum') AS inference_seconds,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:generation_tokens_total') AS generation_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'lmcache_mp_l1_write_chunks_total') AS lmcache_write_chunks,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:lmcache_mp_lookup_duration_seconds_sum') AS lookup_seconds,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:lmcache_mp_lookup_duration_seconds_count') AS lookups,
       list({'le': i.le, 'n': i.delta}) FILTER (WHERE i.name = 'vllm:iteration_tokens_total_bucket') AS step_buckets,
       bool_or(i.reset) AS reset
FROM i
JOIN targets t ON t.target_id = i.target_id
LEFT JOIN fe ON fe.target_id = i.target_id AND fe.ts = i.t_end
GROUP BY t.name, t.kind, i.t_end
ORDER BY i.t_end, t.name;

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
