-- name: latency_intervals
-- Per vLLM target and scrape interval over [$t_from, $t_to]: the increases of the TTFT, queue,
-- prefill and decode histograms and the LMCache lookup timer, with the prompt and computed
-- tokens of the same requests: what the TTFT what-if measures a request's overheads from
-- (kvplan.models.cache.latency.calibrate). $names lists the sample names the macro reads.
WITH i AS (
    SELECT se.target_id, i.t_start, i.t_end, se.name, i.delta, i.reset
    FROM interval_increments($deployment, $t_from, $t_to, $model_name, $names) i
    JOIN series se ON se.series_id = i.series_id
)
SELECT t.name AS target, min(i.t_start) AS t_start, i.t_end,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:time_to_first_token_seconds_count') AS requests,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:time_to_first_token_seconds_sum') AS ttft_s,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_queue_time_seconds_sum') AS queue_s,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prefill_time_seconds_sum') AS prefill_s,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prompt_tokens_sum') AS prompt_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_prefill_kv_computed_tokens_sum') AS computed_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_decode_time_seconds_sum') AS decode_s,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:request_decode_time_seconds_count') AS decoded,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:generation_tokens_total') AS generation_tokens,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:lmcache_mp_lookup_duration_seconds_sum') AS lookup_s,
       sum(i.delta) FILTER (WHERE i.name = 'vllm:lmcache_mp_lookup_duration_seconds_count') AS lookups,
       bool_or(i.reset) AS reset
FROM i
JOIN targets t ON t.target_id = i.target_id
WHERE t.kind = 'vllm'
GROUP BY t.name, i.t_end
ORDER BY i.t_end, t.name;

-- name: lmcache_l1_capacity
-- Each LMCache MP target's L1 capacity in bytes over [$t_from, $t_to]: memory in use / the share
-- of L1 in use (lmcache_mp_l1_memory_usage_bytes / lmcache_mp_l1_usage_ratio), from the latest
-- scrape in the window where the share is above zero, summed over its L1 backends.
WITH g AS (
    SELECT t.name AS target, se.name, se.labels, arg_max(sa.value, sa.ts) AS value, max(sa.ts) AS ts
    FROM samples sa
    JOIN series se ON se.series_id = sa.series_id
    JOIN targets t ON t.target_id = se.target_id
    JOIN deployments d ON d.deployment_id = t.deployment_id
    WHERE d.name = $deployment AND t.kind = 'lmcache_mp' AND sa.ts BETWEEN $t_from AND $t_to
      AND se.name IN ('lmcache_mp_l1_memory_usage_bytes', 'lmcache_mp_l1_usage_ratio')
      AND (se.name <> 'lmcache_mp_l1_usage_ratio' OR sa.value > 0)
    GROUP BY t.name, se.name, se.labels
)
SELECT u.target, sum(u.value / r.value) AS capacity_bytes
FROM g u JOIN g r ON r.target = u.target AND r.labels = u.labels AND r.name = 'lmcache_mp_l1_usage_ratio'
WHERE u.name = 'lmcache_mp_l1_memory_usage_bytes' AND r.value > 0
GROUP BY u.target ORDER BY u.target;

-- name: ttft_interval_buckets
-- Per vLLM target and scrape interval over [$t_from, $t_to]: the increases of the TTFT
-- histogram's count, sum and buckets (le NULL for the count and the sum): what today's TTFT
-- calibration bootstraps over (kvplan.models.cache.calibration). $names: the TTFT histogram's
-- sample names.
SELECT t.name AS target, i.t_end, se.name, se.le, sum(i.delta) AS delta, bool_or(i.reset) AS reset
FROM interval_increments($deployment, $t_from, $t_to, $model_name, $names) i
JOIN series se ON se.series_id = i.series_id
JOIN targets t ON t.target_id = se.target_id
WHERE t.kind = 'vllm'
GROUP BY t.name, i.t_end, se.name, se.le
ORDER BY i.t_end, t.name, se.name, se.le;
