-- 010: deployment facts the metrics cannot know, saved from the dashboard per
-- deployment. JSON validated by models.deployment.DeploymentFacts; the config file's
-- [deployments.facts] table is the default when no row is saved.
CREATE TABLE deployment_facts (
    deployment VARCHAR PRIMARY KEY,
    facts      VARCHAR NOT NULL,       -- JSON
    updated_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
