-- name: insert_run
-- Record one workload-driver run.
INSERT INTO runs (deployment, label, scenario, routing, started_at, ended_at, model, servers, workload,
                  stopped_by, measured_on, reuse, engine_seconds, engine_seconds_source, ab_pair, cached_tokens)
VALUES ($deployment, $label, $scenario, $routing, $started_at, $ended_at, $model_name, $servers, $workload,
        $stopped_by, $measured_on, $reuse, $engine_seconds, $engine_seconds_source, $ab_pair, $cached_tokens)
RETURNING run_id;

-- name: run_summaries
-- Every run of a deployment with client-side TTFT p50/p99 (exact, from the per-request
-- times), tokens/s per user (median) and aggregate output tokens/s, newest first.
SELECT r.run_id, r.label, r.scenario, r.routing, r.started_at, r.ended_at, r.model, r.measured_on,
       epoch(r.ended_at) - epoch(r.started_at) AS wall_s,
       count(q.run_id) AS requests,
       count(q.run_id) FILTER (WHERE q.ok) AS ok,
       count(q.run_id) FILTER (WHERE NOT q.ok) AS failed,
       quantile_cont(q.ttft_s, 0.5) FILTER (WHERE q.ok) AS ttft_p50_s,
       quantile_cont(q.ttft_s, 0.99) FILTER (WHERE q.ok) AS ttft_p99_s,
       quantile_cont(q.tokens_per_s, 0.5) FILTER (WHERE q.ok) AS tokens_per_s_p50,
       sum(q.output_tokens) FILTER (WHERE q.ok) / nullif(any_value(epoch(r.ended_at) - epoch(r.started_at)), 0)
           AS aggregate_tokens_per_s,
       sum(q.prompt_tokens) FILTER (WHERE q.ok) AS prompt_tokens,
       sum(q.cached_tokens) FILTER (WHERE q.ok) AS cached_tokens
FROM runs r
LEFT JOIN run_requests q ON q.run_id = r.run_id
WHERE r.deployment = $deployment
GROUP BY ALL
ORDER BY r.started_at DESC;

-- name: run_requests
-- The requests of one run.
SELECT * FROM run_requests WHERE run_id = $run_id ORDER BY started_at;
