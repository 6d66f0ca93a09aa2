"""Which trace files an import reads and the cache instance each belongs to: ``expand_paths``
(files, a directory of LMCache lookup-hash logs, or a directory of one such directory per
LMCache server)."""

from __future__ import annotations

from pathlib import Path

from ...models.core.errors import KvplanError
from ..scrape.payload import PayloadError
from .parse import LMCACHE_GLOB

INSTANCE_MAX = 200
"""Longest instance name (a directory name or ``--instance``)."""


def _logs_in(d: Path) -> list[Path]:
    return sorted(d.glob(LMCACHE_GLOB))


def expand_paths(paths: list[Path], instance: str | None = None) -> list[tuple[Path, str]]:
    """Each file with the cache instance it belongs to (name order within a directory).

    A file belongs to ``instance`` when given, else to the directory it lies in (its name). A
    directory gives its ``lookup_hashes_*.jsonl``; a directory that holds none but has
    sub-directories that do (one per LMCache server, e.g. ``logs/lmcache-0/``,
    ``logs/lmcache-1/``) gives each of them as its own instance. Files are told apart by
    (instance, name): two LMCache servers started in the same second write files of the same
    name, in different directories."""
    if instance is not None and (not instance.strip() or len(instance) > INSTANCE_MAX):
        raise KvplanError(f"must be a name of 1 to {INSTANCE_MAX} characters", source="instance")
    out: list[tuple[Path, str]] = []
    dirs: dict[str, Path] = {}  # instance -> the directory that named it

    def add(files: list[Path], d: Path) -> None:
        name = instance if instance is not None else d.name
        if instance is None and name in dirs and dirs[name].resolve() != d.resolve():
            raise PayloadError(str(d), f"{dirs[name]} is also a directory named {name!r}: a log's "
                               "directory names its cache instance; import them one at a time "
                               "with --instance")
        dirs.setdefault(name, d)
        out.extend((f, name) for f in files)

    for p in map(Path, paths):
        if p.is_dir():
            found = _logs_in(p)
            if found:
                add(found, p)
                continue
            subs = [s for s in sorted(p.iterdir()) if s.is_dir() and _logs_in(s)]
            if not subs:
                raise PayloadError(str(p), f"directory holds no {LMCACHE_GLOB} file (nor "
                                   "sub-directories of them, one per cache instance)")
            if instance is not None:
                raise PayloadError(str(p), f"holds {len(subs)} instance directories "
                                   f"({', '.join(s.name for s in subs)}): --instance names one")
            for s in subs:
                add(_logs_in(s), s)
        elif p.is_file():
            add([p], p.parent)
        else:
            raise PayloadError(str(p), "no such file or directory")
    seen: set[tuple[str, str]] = set()
    for f, name in out:
        if (name, f.name) in seen:
            raise PayloadError(str(f), f"two files named {f.name} in instance {name!r}: an "
                               "instance's files are told apart by name")
        seen.add((name, f.name))
    return out
