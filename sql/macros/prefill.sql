-- The prefill cost model's per-interval increases (kvplan.app.data.prefill reads them): one row per
-- target and scrape interval, built on interval_increments (increase.sql, applied first).
--
-- prefill_rows(p_deployment, t_lookback, t_after, t_to, p_model, p_names): the intervals of a
-- deployment whose end lies in (t_after, t_to] and whose start lies at or after t_lookback
-- (t_lookback = t_after = t_from: every interval inside [t_from, t_to]; a rolled-up day: its
-- intervals, the one straddling its start included, as rollup_day sums its increases). p_names
-- lists the sample names read (the macro reads only those). Iteration-token buckets are
-- summed over the target's engines, one {le, n} per bound. computed_tokens is NULL where the release
-- has no request_prefill_kv_computed_tokens (vLLM before 0.13): the reader then derives it from
-- the cached tokens, or leaves the interval out. The named query prefill_intervals reads it raw;
-- the nightly job stores each day's rows in prefill_rollups (migration 014).
CREATE OR REPLACE MACRO prefill_rows(p_deployment, t_lookback, t_after, t_to, p_model, p_names) AS TABLE
WITH i AS (
    SELECT se.target_id, i.t_start, i.t_end, se.name, se.le, se.engine, se.labels, i.delta, i.reset
    FROM interval_increments(p_deployment, t_lookback, t_to, p_model, p_names) i
    JOIN series se ON se.series_id = i.series_id
    WHERE i.t_end > t_after
),
b AS (  -- iteration-token buckets summed over the target's engines, per bound
    SELECT target_id, t_end, list({'le': le, 'n': n} ORDER BY le) AS step_buckets
    FROM (SELECT target_id, t_end, le, sum(delta) AS n
          FROM i WHERE name = 'vllm:iteration_tokens_total_bucket' GROUP BY ALL)
    GROUP BY ALL
),
fe AS (  -- fleet targets (aggregated ingestion): engines reporting in each step
    SELECT se.target_id, sa.ts, max(sa.value) AS n
    FROM samples sa JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = p_deployment AND se.name = 'kvplan:vllm_engines' AND sa.ts > t_after AND sa.ts <= t_to
      AND (p_model IS NULL OR se.model_name = p_model)
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
       any_value(b.step_buckets) AS step_buckets,
       bool_or(i.reset) AS reset
FROM i
JOIN targets t ON t.target_id = i.target_id
LEFT JOIN fe ON fe.target_id = i.target_id AND fe.ts = i.t_end
LEFT JOIN b ON b.target_id = i.target_id AND b.t_end = i.t_end
GROUP BY t.name, t.kind, i.t_end;
