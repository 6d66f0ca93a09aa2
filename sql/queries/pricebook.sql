-- name: get_pricebook
-- The price book of a deployment, else the default ('*'), else nothing.
SELECT deployment, pricebook, planning, updated_at FROM pricebooks
WHERE deployment IN ($deployment, '*')
ORDER BY deployment = '*'
LIMIT 1;

-- name: put_pricebook
-- Save a deployment's price book and planning inputs.
INSERT OR REPLACE INTO pricebooks (deployment, pricebook, planning, updated_at)
VALUES ($deployment, $pricebook, $planning, current_timestamp);

-- name: engines
-- vLLM engines (server target x engine index) seen in a window: the GPU count when the
-- config does not give one (one engine per GPU, tensor parallel 1).
SELECT DISTINCT t.name AS target, se.engine
FROM series se
JOIN targets t ON t.target_id = se.target_id
JOIN deployments d ON d.deployment_id = t.deployment_id
WHERE d.name = $deployment AND t.kind = 'vllm' AND se.engine IS NOT NULL
  AND se.series_id IN (SELECT series_id FROM samples WHERE ts BETWEEN $t_from AND $t_to)
ORDER BY 1, 2;

-- name: get_facts
-- The deployment facts saved for a deployment (dashboard form), else nothing.
SELECT deployment, facts, updated_at FROM deployment_facts WHERE deployment = $deployment;

-- name: put_facts
-- Save a deployment's facts.
INSERT OR REPLACE INTO deployment_facts (deployment, facts, updated_at)
VALUES ($deployment, $facts, current_timestamp);
