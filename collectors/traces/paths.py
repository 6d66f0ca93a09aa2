"""Which trace files an import reads and the cache instance each belongs to: ``expand_paths``
(files, a directory of LMCache lookup-hash logs, or a directory of one such directory per
LMCache server)."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from ...models.core.errors import KvplanError
from ...models.core.fields import NAME_MAX, name_problem
from ..scrape.payload import PayloadError
from .parse import LMCACHE_GLOB

INSTANCE_MAX = NAME_MAX
"""Longest instance name (a directory name or ``--instance``): a deployment name's rules."""


def _logs_in(d: Path) -> list[Path]:
    return sorted(d.glob(LMCACHE_GLOB))


def regular_file(p: Path) -> os.stat_result:
    """``p``'s stat when it is a regular file (through symbolic links); else a PayloadError that
    says what it is: a symbolic-link loop, a dangling link, a directory, a FIFO (which would
    block a reader forever), a socket or a device."""
    try:
        st = os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PayloadError(str(p), "a symbolic link loop, not a log file") from None
        if os.path.islink(p):
            raise PayloadError(str(p), f"a dangling symbolic link (to {os.readlink(p)}), not a log file") from None
        raise PayloadError(str(p), f"cannot be read ({e.strerror or type(e).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        raise PayloadError(str(p), "a directory named like a log file, not a log file")
    if not stat.S_ISREG(st.st_mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device")
        raise PayloadError(str(p), f"{what}, not a regular file: kvplan imports log files only")
    return st


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for b in iter(lambda: fh.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _once(pairs: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """Each file once, identified by what it is, not by the name it was reached under: the same
    inode (``logs/latest -> lmcache-1``, a hard link) or, for files of the same name and size, the
    same bytes (a copy). The first one named is kept."""
    out: list[tuple[Path, str]] = []
    inodes: set[tuple[int, int]] = set()
    by_size: dict[tuple[str, int], list[Path]] = {}
    shas: dict[Path, str] = {}
    for f, name in pairs:
        st = regular_file(f)
        if (st.st_dev, st.st_ino) in inodes:
            continue
        inodes.add((st.st_dev, st.st_ino))
        same = by_size.setdefault((f.name, st.st_size), [])
        if same and st.st_size:
            for g in same:
                if g not in shas:
                    shas[g] = _sha256(g)
            shas[f] = _sha256(f)
            if any(shas[g] == shas[f] for g in same):
                continue
        same.append(f)
        out.append((f, name))
    return out


def expand_paths(paths: list[Path], instance: str | None = None) -> list[tuple[Path, str]]:
    """Each file with the cache instance it belongs to (name order within a directory).

    A file belongs to ``instance`` when given, else to the directory it lies in (its name). A
    directory gives its ``lookup_hashes_*.jsonl``; a directory that holds none but has
    sub-directories that do (one per LMCache server, e.g. ``logs/lmcache-0/``,
    ``logs/lmcache-1/``) gives each of them as its own instance. Files are told apart by
    (instance, name): two LMCache servers started in the same second write files of the same
    name, in different directories. A file reached under two names (a link to its directory, the
    same directory given twice) is taken once; anything named like a log that is not a regular
    file (a link loop, a dangling link, a directory, a FIFO) is refused by name."""
    if instance is not None:
        why = name_problem(instance)
        if why is not None:
            raise KvplanError(f"{instance!r} is not a usable instance name: {why}", source="--instance")
    out: list[tuple[Path, str]] = []
    dirs: dict[str, Path] = {}  # instance -> the directory that named it

    def add(files: list[Path], d: Path) -> None:
        name = instance if instance is not None else d.name
        why = name_problem(name) if instance is None else None
        if why is not None:
            raise PayloadError(str(d), f"a log's directory names its cache instance, and {name!r} is not a usable "
                               f"instance name ({why}): import it with --instance")
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
            # real directories before links to them (logs/latest -> lmcache-1): a file reached
            # twice keeps its real directory's name
            subs = sorted((s for s in p.iterdir() if s.is_dir() and _logs_in(s)),
                          key=lambda s: (s.is_symlink(), s.name))
            if not subs:
                raise PayloadError(str(p), f"directory holds no {LMCACHE_GLOB} file (nor "
                                   "sub-directories of them, one per cache instance)")
            if instance is not None:
                raise PayloadError(str(p), f"holds {len(subs)} instance directories "
                                   f"({', '.join(s.name for s in subs)}): --instance names one")
            for s in subs:
                add(_logs_in(s), s)
        elif p.exists() or p.is_symlink():
            regular_file(p)
            add([p], p.parent)
        else:
            raise PayloadError(str(p), "no such file or directory")
    out = _once(out)
    seen: set[tuple[str, str]] = set()
    for f, name in out:
        if (name, f.name) in seen:
            raise PayloadError(str(f), f"two files named {f.name} in instance {name!r}: an "
                               "instance's files are told apart by name")
        seen.add((name, f.name))
    return out
