-- 004: the price book and planning inputs per deployment ('*' = the default for all).
-- Values are JSON objects validated by models.pricebook.PriceBook / models.decision.PlanningInputs.
CREATE TABLE pricebooks (
    deployment VARCHAR PRIMARY KEY,
    pricebook  VARCHAR NOT NULL,       -- JSON
    planning   VARCHAR NOT NULL,       -- JSON
    updated_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
