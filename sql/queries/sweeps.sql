-- name: insert_sweep
-- Record one side of a load sweep.
INSERT INTO sweeps (deployment, pair, reuse, load_kind, server, model, scenario, workload, started_at, ended_at,
                    measured_on)
VALUES ($deployment, $pair, $side, $load_kind, $server, $model_name, $scenario, $workload, $started_at, $ended_at,
        $measured_on)
RETURNING sweep_id;

-- name: insert_sweep_point
-- One level of a sweep.
INSERT INTO sweep_points (sweep_id, level_idx, offered, started_at, ended_at, requests, failed, span_s,
                          throughput_rps, ttft_p50_s, ttft_p99_s, tpot_p50_s, tpot_p99_s)
VALUES ($sweep_id, $level_idx, $offered, $started_at, $ended_at, $requests, $failed, $span_s,
        $throughput_rps, $ttft_p50_s, $ttft_p99_s, $tpot_p50_s, $tpot_p99_s);

-- name: latest_sweep_pair
-- The newest pair of a deployment that has both a reuse-off and a reuse-on sweep: one row per
-- side (off first).
WITH complete AS (
    SELECT pair, max(ended_at) AS ended_at
    FROM sweeps
    WHERE deployment = $deployment
    GROUP BY pair
    HAVING count(DISTINCT reuse) = 2
), newest AS (
    SELECT pair FROM complete ORDER BY ended_at DESC, pair DESC LIMIT 1
)
SELECT s.*
FROM sweeps s JOIN newest USING (pair)
WHERE s.deployment = $deployment
QUALIFY row_number() OVER (PARTITION BY s.reuse ORDER BY s.ended_at DESC, s.sweep_id DESC) = 1
ORDER BY s.reuse = 'on', s.sweep_id;

-- name: sweep_points
-- The levels of one sweep, lowest offered load first.
SELECT * FROM sweep_points WHERE sweep_id = $sweep_id ORDER BY offered, level_idx;

-- name: sweep_list
-- Every sweep of a deployment, newest first, with its number of levels.
SELECT s.sweep_id, s.pair, s.reuse, s.load_kind, s.server, s.scenario, s.started_at, s.ended_at, s.measured_on,
       count(p.level_idx) AS levels
FROM sweeps s LEFT JOIN sweep_points p USING (sweep_id)
WHERE s.deployment = $deployment
GROUP BY ALL
ORDER BY s.ended_at DESC, s.sweep_id DESC;
