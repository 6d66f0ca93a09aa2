-- 013: a trace combines the lookup logs of several cache instances (one LMCache server each):
-- every imported file and request carries the instance it came from (the log's directory name,
-- or the name given at import). Files are told apart by (instance, file): two LMCache servers
-- started in the same second write files of the same name. Rows imported before this
-- migration keep instance '' (one unnamed instance); an import that meets such a file under its
-- old name adopts it instead of importing it again.

CREATE TABLE trace_files_013 (
    trace_id    BIGINT NOT NULL,
    instance    VARCHAR NOT NULL DEFAULT '',   -- cache instance (log directory name, or --instance)
    file        VARCHAR NOT NULL,              -- base name (LMCache: lookup_hashes_<time>_<n>.jsonl)
    sha256      VARCHAR NOT NULL,              -- of the first `bytes` bytes
    bytes       BIGINT NOT NULL,               -- imported length: whole lines only
    lines       BIGINT NOT NULL,               -- lines imported (blank lines included)
    imported_at TIMESTAMP NOT NULL,
    PRIMARY KEY (trace_id, instance, file)
);
INSERT INTO trace_files_013 (trace_id, instance, file, sha256, bytes, lines, imported_at)
SELECT trace_id, '', file, sha256, bytes, lines, imported_at FROM trace_files;
DROP TABLE trace_files;
ALTER TABLE trace_files_013 RENAME TO trace_files;

ALTER TABLE trace_requests ADD COLUMN instance VARCHAR NOT NULL DEFAULT '';
