"""Reading DuckDB into model inputs: the only part of ``app`` that runs named queries.

``window`` reads one deployment's increases over a time range (whole days from the nightly
rollups, the edges from raw samples) and its chart buckets; ``store`` reads and writes the
small things around them (deployments, price books, month windows, gauge rollups). Every
function takes a ``source``: a ``kvplan.sql.db.Database`` (one short connection per query) or a
``Snapshot`` from ``Database.snapshot()`` (one connection for a whole page run).
"""
