-- 012: a series missing from one scrape continues from its last value, and trace
-- lengths are BIGINT.
--
-- Until 011, a counter absent from its target's previous successful scrape was "born" at 0
-- there (006), whether or not it had been seen before. A series dropped from one middle scrape
-- and back in the next (a proxy that truncated the body, a server that skipped a family) was
-- then counted from 0 a second time: +23,852 prompt tokens of 47,911 on a recorded history,
-- a hit rate moved from 0.406 to 0.271. Counting from 0 is right only for
-- * a series never seen before (no sample of it earlier than that scrape, inside the window
--   or before it): LMCache's multi-process server exposes a counter only after its first
--   increment, and without _created (006's reason, kept);
-- * a process whose _created changed (the created-time zero point, 001/008, kept).
-- A series seen before that comes back continues from its last value: the pair (last value,
-- value now) is an ordinary pair (Prometheus's reset rule, 008's broken rule), and is flagged
-- `gap` so the stats can say which series were missing from a scrape.
--
-- Self-contained: these macros are the whole rules, replacing 008's increments() and 009's
-- interval_increments(). New output column: increments().gap, interval_increments().gap.

-- (The increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)

-- (The interval_increments() macro defined here is now sql/macros/increase.sql, applied after the
-- migrations: one definition of the exact-increase rule.)

-- Trace lengths: a prompt of 2**31 tokens wrapped to -2**31 in INTEGER columns; the parser now
-- bounds them (collectors.trace_parse), and the columns hold what it allows.
ALTER TABLE trace_requests ALTER COLUMN seq_len TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN output_len TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN chunk_size TYPE BIGINT;
ALTER TABLE trace_requests ALTER COLUMN line TYPE BIGINT;
ALTER TABLE trace_files ALTER COLUMN lines TYPE BIGINT;
