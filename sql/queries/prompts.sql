-- name: cache_config_info
-- The newest vllm:cache_config_info labels of each target of a deployment (block_size,
-- num_gpu_blocks, ... are labels of this info gauge), newest first.
SELECT se.labels, t.name AS target, max(sa.ts) AS ts
FROM samples sa
JOIN series se ON se.series_id = sa.series_id
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND se.name = 'vllm:cache_config_info'
GROUP BY se.labels, t.name
ORDER BY ts DESC, t.name;

-- name: deployment_span
-- First and last successful scrape of a deployment (unix seconds).
SELECT epoch(min(sc.ts)) AS t0, epoch(max(sc.ts)) AS t1
FROM scrapes sc
JOIN targets t ON t.target_id = sc.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND sc.ok;
