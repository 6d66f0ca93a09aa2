-- 009: what the prefill cost model reads.
--
-- interval_increments(): the increases of named series per scrape interval, with the interval's
-- start. The same rules as increments() (008): only sane samples, Prometheus's reset rule, a
-- decrease with an unchanged (or backwards) _created counted 0 (a broken target, not a restart),
-- a series' _created time as a zero point, a counter absent from its target's previous successful
-- scrape born at 0 there, ingested Prometheus steps (ts - step, ts]. Restricted to the names asked for before
-- any window function runs, so a week of history reads only the few series the fit needs.
-- (The interval_increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)

-- A measured A/B (`kvplan pilot` with reuse off, then on, over the same workload): which side a
-- run is, the engine time it took and how that was measured, and the pair it belongs to.
ALTER TABLE runs ADD COLUMN reuse VARCHAR;                  -- off | on | NULL (not an A/B side)
ALTER TABLE runs ADD COLUMN engine_seconds DOUBLE;          -- engine time the run took
ALTER TABLE runs ADD COLUMN engine_seconds_source VARCHAR;  -- how, e.g. "worker CPU seconds (/proc)"
ALTER TABLE runs ADD COLUMN ab_pair VARCHAR;                -- same value on the off and on run
ALTER TABLE runs ADD COLUMN cached_tokens DOUBLE;           -- cached prompt tokens the servers reported
