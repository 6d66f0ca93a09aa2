-- 007: request traces with prefix-chunk hashes (LMCache MP lookup-hash logs, the Mooncake
-- trace format), the input of the cache-size and topology what-if (models/cachesim.py).
-- A trace is named per deployment; its files are imported once each (a log file that has
-- grown since is imported from where the last import stopped). Chunk hashes are mapped to
-- BIGINT keys per trace: LMCache hex hashes through trace_chunk_keys, Mooncake hash ids as
-- they are.

CREATE SEQUENCE trace_ids START 1;
CREATE TABLE traces (
    trace_id        BIGINT PRIMARY KEY DEFAULT nextval('trace_ids'),
    deployment      VARCHAR NOT NULL,
    name            VARCHAR NOT NULL,          -- e.g. "lmcache" (rotated log files append to it)
    format          VARCHAR NOT NULL,          -- lmcache | mooncake
    bytes_per_chunk BIGINT,                    -- KV bytes of one chunk; NULL = not known
    bytes_source    VARCHAR,                   -- shapes/dtypes | option
    created_at      TIMESTAMP NOT NULL,        -- UTC
    UNIQUE (deployment, name)
);

CREATE TABLE trace_files (
    trace_id    BIGINT NOT NULL,
    file        VARCHAR NOT NULL,              -- base name (LMCache: lookup_hashes_<time>_<n>.jsonl)
    sha256      VARCHAR NOT NULL,              -- of the first `bytes` bytes
    bytes       BIGINT NOT NULL,               -- imported length: whole lines only
    lines       INTEGER NOT NULL,              -- lines imported (blank lines included)
    imported_at TIMESTAMP NOT NULL,
    PRIMARY KEY (trace_id, file)
);

CREATE TABLE trace_requests (
    trace_id    BIGINT NOT NULL,
    file        VARCHAR NOT NULL,
    line        INTEGER NOT NULL,              -- 1-based line in the file: (trace, file, line) is the key
    ts          DOUBLE NOT NULL,               -- seconds: LMCache unix time; Mooncake ms / 1000 from its start
    request_id  VARCHAR,
    model_name  VARCHAR,
    chunk_size  INTEGER NOT NULL,              -- tokens per chunk
    seq_len     INTEGER NOT NULL,              -- prompt tokens, the partial tail chunk included
    output_len  INTEGER,                       -- Mooncake only
    chunk_keys  BIGINT[] NOT NULL              -- full chunks only, in prompt order
);

CREATE TABLE trace_chunk_keys (
    trace_id    BIGINT NOT NULL,
    hash        VARCHAR NOT NULL,              -- as logged, e.g. 0x3f2a...
    key         BIGINT NOT NULL,
    PRIMARY KEY (trace_id, hash)
);
