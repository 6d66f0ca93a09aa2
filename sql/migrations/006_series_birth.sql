-- 006: a counter that first appears in a scrape was 0 at the target's previous successful
-- scrape. LMCache's multi-process server (OpenTelemetry) exposes a counter only after its first
-- increment and without a _created sample, so without this rule a window in which the series
-- is born would miss its first increase. (Prometheus 3 calls the same idea created-timestamp
-- zero ingestion; Prometheus 2.x's increase() extrapolates instead.) Only for directly scraped
-- targets: kvplan knows when it scraped them and that the series was absent then.

-- (The increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)
