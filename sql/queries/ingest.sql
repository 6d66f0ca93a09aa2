-- name: get_deployment_id
-- The id of a deployment by name.
SELECT deployment_id FROM deployments WHERE name = $name;

-- name: insert_deployment
-- Create a deployment.
INSERT INTO deployments (name) VALUES ($name) RETURNING deployment_id;

-- name: get_target
-- A target of a deployment by name.
SELECT target_id, kind, url FROM targets WHERE deployment_id = $deployment_id AND name = $name;

-- name: insert_target
-- Create a target.
INSERT INTO targets (deployment_id, name, kind, url) VALUES ($deployment_id, $name, $kind, $url)
RETURNING target_id;

-- name: update_target
-- Keep a target's kind and URL current.
UPDATE targets SET kind = $kind, url = coalesce($url, url) WHERE target_id = $target_id;

-- name: get_scrape
-- The scrape of a target at an exact time, if any.
SELECT scrape_id, ok, payload_sha256 FROM scrapes WHERE target_id = $target_id AND ts = $ts;

-- name: insert_scrape
-- Record one scrape attempt.
INSERT INTO scrapes (target_id, ts, ok, error, duration_s, source, payload_sha256, n_samples, warnings)
VALUES ($target_id, $ts, $ok, $error, $duration_s, $source, $payload_sha256, $n_samples, $warnings)
RETURNING scrape_id;
