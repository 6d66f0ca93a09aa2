-- name: trace_by_name
-- One trace of a deployment by name.
SELECT * FROM traces WHERE deployment = $deployment AND name = $name;

-- name: insert_trace
-- A new named trace; returns its id.
INSERT INTO traces (deployment, name, format, bytes_per_chunk, bytes_source, created_at)
VALUES ($deployment, $name, $format, $n_bytes_per_chunk, $bytes_source, $created_at)
RETURNING trace_id;

-- name: set_trace_bytes
-- Record the KV bytes per chunk of a trace (from shapes/dtypes or an option).
UPDATE traces SET bytes_per_chunk = $n_bytes_per_chunk, bytes_source = $bytes_source
WHERE trace_id = $trace_id;

-- name: trace_file
-- What an earlier import took of one file of one cache instance of a trace.
SELECT * FROM trace_files WHERE trace_id = $trace_id AND instance = $instance AND file = $file;

-- name: trace_file_elsewhere
-- The rows of files of this name that earlier imports took under other cache instances.
SELECT * FROM trace_files WHERE trace_id = $trace_id AND instance <> $instance AND file = $file
ORDER BY imported_at;

-- name: upsert_trace_file
-- Record (or extend) the imported part of one file.
INSERT OR REPLACE INTO trace_files (trace_id, instance, file, sha256, bytes, lines, imported_at)
VALUES ($trace_id, $instance, $file, $sha256, $n_bytes, $n_lines, $imported_at);

-- name: adopt_trace_file_rows
-- A file imported before traces had instances (instance ''): its requests now belong to the
-- instance it is imported under (its trace_files row is replaced by upsert_trace_file).
UPDATE trace_requests SET instance = $instance
WHERE trace_id = $trace_id AND instance = '' AND file = $file;

-- name: drop_legacy_trace_file
-- The instance-less row of a file that an import has adopted.
DELETE FROM trace_files WHERE trace_id = $trace_id AND instance = '' AND file = $file;

-- name: trace_chunk_keys
-- The hash -> key map of a trace (LMCache hex hashes).
SELECT hash, key FROM trace_chunk_keys WHERE trace_id = $trace_id;

-- name: traces
-- Every trace of a deployment with its size, newest first.
SELECT t.trace_id, t.name, t.format, t.bytes_per_chunk, t.bytes_source, t.created_at,
       (SELECT count(*) FROM trace_files f WHERE f.trace_id = t.trace_id) AS files,
       count(DISTINCT r.instance) AS instances,
       count(r.trace_id) AS requests,
       coalesce(sum(len(r.chunk_keys)), 0) AS chunk_references,
       coalesce(sum(r.seq_len), 0) AS tokens,
       min(r.ts) AS first_ts, max(r.ts) AS last_ts,
       any_value(r.chunk_size) AS chunk_size,
       count(DISTINCT r.model_name) AS models
FROM traces t
LEFT JOIN trace_requests r ON r.trace_id = t.trace_id
WHERE t.deployment = $deployment
GROUP BY ALL
ORDER BY t.created_at DESC, t.trace_id DESC;

-- name: trace_replay
-- A trace's requests in replay order: timestamp, then instance, file name and line (LMCache's
-- simulator sorts by timestamp, stably, over files in name order): the logs of every cache
-- instance merged by time. $model_name NULL = all; $from_unix_s/$to_unix_s (NULL = open) cut a
-- window [from, to] in the trace's own seconds (unix seconds for LMCache logs).
SELECT chunk_keys, seq_len, chunk_size, ts, instance
FROM trace_requests
WHERE trace_id = $trace_id AND ($model_name IS NULL OR model_name = $model_name)
  AND ($from_unix_s IS NULL OR ts >= $from_unix_s) AND ($to_unix_s IS NULL OR ts <= $to_unix_s)
ORDER BY ts, instance, file, line;


-- name: trace_deployments
-- Deployments that hold at least one trace.
SELECT DISTINCT deployment FROM traces ORDER BY deployment;

-- name: trace_span
-- First and last request time (unix seconds) of one trace.
SELECT min(ts) AS t0, max(ts) AS t1 FROM trace_requests WHERE trace_id = $trace_id;

-- name: traces_files_of
-- The imported files of one trace, by instance and name.
SELECT instance, file, bytes, lines FROM trace_files WHERE trace_id = $trace_id ORDER BY instance, file;

-- name: drop_trace_requests
-- An import that failed on the trace it created: its stored requests go (with drop_trace).
DELETE FROM trace_requests WHERE trace_id = $trace_id;

-- name: drop_trace_keys
-- The chunk-hash keys of a trace an import created and failed on (with drop_trace).
DELETE FROM trace_chunk_keys WHERE trace_id = $trace_id;

-- name: drop_trace_files
-- The file progress of a trace an import created and failed on (with drop_trace).
DELETE FROM trace_files WHERE trace_id = $trace_id;

-- name: drop_trace
-- The trace row itself, last (drop_trace_requests, _keys and _files first).
DELETE FROM traces WHERE trace_id = $trace_id;
