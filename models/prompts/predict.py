"""Predicted prefix-cache hits of a request stream served one request at a time, in arrival
order: with an unlimited cache, and with vLLM V1's block pool of ``num_gpu_blocks`` blocks.

**The block pool is vLLM V1's** (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``,
``single_type_kv_cache_manager.py``, ``kv_cache_utils.py::FreeKVCacheBlockQueue``):

* the pool holds ``num_gpu_blocks`` blocks; block 0 is the null block, taken at start, so
  ``num_gpu_blocks - 1`` hold KV; the free queue starts with the others in id order;
* a request's cache hit is the longest run of its leading full-block keys found in the cache,
  within ``prompt_tokens - 1`` tokens (the last prompt token is always computed); a key held by
  several blocks (vLLM does not de-duplicate) hits the first;
* hit blocks are *touched* first: a hit block that sits in the free queue leaves it;
* then new blocks are popped from the free queue's head (the least recently freed); a popped
  block that held a key loses it (eviction); the request needs blocks for
  ``prompt_tokens + output_tokens - 1`` tokens (the last generated token is never computed);
* the full blocks it computed get their keys (prompt blocks, and blocks that generated tokens
  fill: their keys are known only when the caller gives the output token ids, else they can
  never be hit and only take room);
* when it finishes its blocks are freed **in reverse order** (``BlockPool.free_blocks``): the
  blocks holding a key are appended to the queue's tail (its tail blocks are evicted before its
  head, and all of them after what was freed earlier); the block without a hash, its partial
  last block, is *prepended* to the queue's head, so the next allocation reuses it before
  evicting any cached block (vLLM: "LIFO reuse of non-cached blocks"). Full blocks of
  generated tokens whose ids are unknown are hashed by vLLM: they go to the tail like the others.

Requests arriving while others run (concurrency) are not modelled: each request finishes
before the next one starts. The unlimited cache keeps every key ever computed, so its hits are
an upper bound of the pool's for every request (the same keys are computed in both).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .hashing import NO_EXTRA, ROOT, ExtraKeys, block_hashes, hittable_tokens

Key = bytes | int
"""A block key: a sha256 digest, or its first 8 bytes as an integer (what the check uses)."""


@dataclass(frozen=True)
class Hashed:
    """One request as the cache sees it. ``hashes``: its prompt's full-block keys in order;
    ``output_tokens``: tokens it generates (at least 1: the first token comes out of prefill);
    ``output_hashes``: keys of the blocks after the prompt's full blocks that its computed
    tokens fill, when the generated token ids are known (else those blocks are unhittable)."""

    prompt_tokens: int
    """Prompt length in tokens."""
    hashes: tuple[bytes, ...] | tuple[int, ...] | np.ndarray
    """The prompt's full-block keys, in order, each chained on its parent's (sha256 digests, or
    64-bit integers: :func:`~.hashing.block_keys64`, or a ``uint64`` array of
    :func:`~.hashing.chain_keys64`)."""
    output_tokens: int = 1
    """Tokens it generates (at least 1: the first comes out of prefill); they take blocks."""
    output_hashes: tuple[bytes, ...] | tuple[int, ...] = ()
    """Keys of the blocks after the prompt's full blocks that its computed tokens fill, when the
    generated ids are known (else those blocks cannot be hit)."""


def hashed(tokens: Sequence[int] | np.ndarray, block_size: int, extra: ExtraKeys = NO_EXTRA, *,
           output_tokens: int | None = None, output_ids: Sequence[int] | None = None) -> Hashed:
    """A request's keys from its prompt token ids (and, when known, its generated ids)."""
    arr = np.asarray(tokens, dtype=np.int64)
    keys = block_hashes(arr, block_size, extra)
    n_out = max(1, output_tokens if output_tokens is not None else (len(output_ids) if output_ids else 1))
    out_keys: list[bytes] = []
    if output_ids:
        computed = np.concatenate([arr, np.asarray(output_ids, dtype=np.int64)])[:len(arr) + n_out - 1]
        out_keys = block_hashes(computed, block_size, extra, start=len(keys),
                                parent=keys[-1] if keys else ROOT)
    return Hashed(len(arr), tuple(keys), n_out, tuple(out_keys))


@dataclass(frozen=True)
class Outcome:
    """One request's prediction, in tokens. ``hittable``: full blocks within prompt_tokens - 1;
    ``cached``: hits with the capacity given (unlimited when none); ``cached_unlimited``: with an
    unlimited cache; ``fits``: False when the pool cannot hold the request at all (counted as a
    miss, nothing cached: vLLM refuses such a request)."""

    prompt_tokens: int
    """Prompt length in tokens."""
    hittable: int
    """Tokens in full blocks within prompt_tokens - 1 (the most vLLM can hit)."""
    cached: int
    """Predicted cached tokens with the capacity given (unlimited when none)."""
    cached_unlimited: int
    """Predicted cached tokens with an unlimited cache."""
    first_miss_block: int
    """Index of the first prompt block not found (the chain's break)."""
    fits: bool = True
    """False when the pool cannot hold the request at all (a miss, nothing cached: vLLM refuses it)."""


def key64(k: bytes | int) -> int:
    """A block key as the 64-bit integer the compact stores hold: an int key as is (masked to 64
    bits), a digest's first 8 bytes (little-endian; :func:`~.hashing.block_keys64` gives the same
    integers for a whole request at once)."""
    if isinstance(k, (int, np.integer)):
        return int(k) & 0xFFFF_FFFF_FFFF_FFFF
    return int.from_bytes(bytes(k[:8]).ljust(8, b"\0"), "little")


class KeySet:
    """A set of 64-bit keys in 8 bytes a key: a sorted ``uint64`` array (``main``) and a smaller
    sorted array of the newest keys (``new``), merged into ``main`` when it outgrows ``_room``
    (``_merged``: linear in the keys held). Memory grows with the distinct
    keys only: 8 bytes each, plus about 0.5 to 1 byte each for the buckets' offsets and, during a
    merge, one more copy of the array.

    A look-up goes through buckets: the keys' top bits (about 8 keys a bucket; the keys are
    hashes, so they spread evenly) index an array of where each bucket starts in ``main``, and a
    request's keys are bisected within their buckets together (a few steps, each one gather). A
    binary search of the whole array (tens of millions of keys, beyond the CPU's caches) costs a
    memory round trip per step; this costs a few steps within one bucket's cache lines. Keys that
    crowd one bucket (more than ``MAX_BUCKET``: not hashes) fall back to the binary search. The
    keys not in ``main`` are looked for in ``new`` (a binary search of a small array).

    Two different blocks sharing a 64-bit key would read as a hit: with ``n`` keys stored and
    ``m`` looked up, about ``m * n / 2**64`` false hits are expected (1e-5 for a 100 M-block log
    against 10 M distinct blocks)."""

    MAX_BUCKET = 64
    """Keys a bucket may hold for the bucketed look-up (more: the binary search)."""
    MIN_BUFFER = 4096
    """Keys ``new`` holds at least before a merge."""

    def __init__(self, buffer: int = 1 << 18):
        self.buffer = max(1, buffer)
        self.main: np.ndarray = np.empty(0, dtype=np.uint64)
        self.new: np.ndarray = np.empty(0, dtype=np.uint64)
        self.counts: np.ndarray | None = None
        """Keys of ``main`` in each bucket (at ``shift``), kept from one merge to the next."""
        self._index()

    def _index(self, added: np.ndarray | None = None) -> None:
        """The buckets of ``main``: where each starts (``starts``, one more at the end), the shift
        that gives a key's bucket and the most keys one holds (``width``; 0: no buckets).
        ``added``: the keys the last merge added, counted into the buckets kept (``counts``)
        while their number of bits stays the same, not all of ``main`` counted again."""
        n = len(self.main)
        bits = min(26, max(0, n.bit_length() - 3))
        shift = np.uint64(64 - bits)
        self.starts: np.ndarray = np.zeros(0, dtype=np.int64)
        self.width = 0
        if not bits:
            self.shift, self.counts = shift, None
            return
        if added is not None and self.counts is not None and shift == self.shift:
            self.counts += np.bincount((added >> shift).astype(np.intp), minlength=1 << bits)
        else:
            self.counts = np.bincount((self.main >> shift).astype(np.intp), minlength=1 << bits)
        self.shift = shift
        counts = self.counts
        starts = np.zeros((1 << bits) + 1, dtype=np.uint32 if n < 2**32 else np.int64)
        np.cumsum(counts, out=starts[1:])
        width = int(counts.max())
        if width <= self.MAX_BUCKET:
            self.starts, self.width = starts, width

    def __len__(self) -> int:
        return len(self.main) + len(self.new)

    def _room(self) -> int:
        """Keys ``new`` holds before a merge: an eighth of ``main``'s (at least ``MIN_BUFFER``, at
        most ``buffer``). Adding a batch's keys to ``new`` moves ``new``; a merge, once per that
        many new keys, moves ``main``: about eight entries of ``main`` moved per key added."""
        return min(self.buffer, max(self.MIN_BUFFER, len(self.main) >> 3))

    def __contains__(self, k: object) -> bool:
        if not isinstance(k, (int, bytes)):
            return False
        return bool(self._held(np.array([key64(k)], dtype=np.uint64))[0])

    def _in_main(self, a: np.ndarray) -> np.ndarray:
        m = self.main
        if not len(m) or not len(a):
            return np.zeros(len(a), dtype=bool)
        if self.width:  # each key bisected within its bucket, all keys at once
            b = (a >> self.shift).astype(np.intp)
            lo = self.starts[b].astype(np.intp)
            hi = self.starts[b + 1].astype(np.intp)
            last = len(m) - 1
            for _ in range(self.width.bit_length()):
                mid = (lo + hi) >> 1
                go = m[np.minimum(mid, last)] < a
                go &= lo < hi
                lo = np.where(go, mid + 1, lo)
                hi = np.where(go, hi, mid)
            return np.asarray(m[np.minimum(lo, last)] == a)
        return _in_sorted(m, a)

    def _held(self, a: np.ndarray) -> np.ndarray:
        """Whether each of ``a`` is held (in ``main`` or in ``new``)."""
        found = self._in_main(a)
        if len(self.new):
            miss = np.flatnonzero(~found)
            found[miss] = _in_sorted(self.new, a[miss])
        return found

    def leading(self, keys: Sequence[int] | np.ndarray, limit: int) -> int:
        """How many of ``keys[:limit]`` are held, counted from the first up to the first missing."""
        head = _array(keys[:limit])
        gaps = np.flatnonzero(~self._held(head))
        return int(gaps[0]) if len(gaps) else len(head)

    def update(self, keys: Sequence[int] | np.ndarray) -> None:
        """Add ``keys`` (64-bit ints)."""
        self.leading_then_add(keys, 0)

    def leading_then_add(self, keys: Sequence[int] | np.ndarray, limit: int) -> int:
        """:meth:`leading` of ``keys[:limit]``, then every key of ``keys`` added (one look-up)."""
        a = _array(keys)
        return int(self.leading_then_add_many(a, np.array([0, len(a)]), np.array([limit]))[0])

    def leading_then_add_many(self, a: np.ndarray, bounds: np.ndarray, limits: np.ndarray) -> np.ndarray:
        """:meth:`leading_then_add` of several requests in arrival order at once: request ``i``'s
        keys are ``a[bounds[i]:bounds[i + 1]]``, its limit ``limits[i]``. A key an earlier
        request of the lot adds is held for the later ones, as one call a request gives."""
        a = _array(a)
        bounds = np.asarray(bounds, dtype=np.int64)
        found = self._in_main(a)
        miss = np.flatnonzero(~found)
        if len(miss):
            order = np.argsort(a[miss], kind="stable")
            miss = miss[order]  # by key, then by place
            keys = a[miss]
            if len(self.new):  # looked up in new in key order (each search starts where the last ended)
                held = _in_sorted(self.new, keys)
                found[miss[held]] = True
                miss, keys = miss[~held], keys[~held]
        if len(miss):  # keys new to the set
            found[miss[self._add_new(keys, np.searchsorted(bounds, miss, side="right") - 1)]] = True
        limits = np.minimum(np.asarray(limits, dtype=np.int64), np.diff(bounds))
        return np.asarray(np.minimum(_leading(found, bounds[:-1]), limits), dtype=np.int64)

    def chained_then_add_many(self, a: np.ndarray, bounds: np.ndarray, limits: np.ndarray) -> np.ndarray:
        """:meth:`leading_then_add_many` of requests whose keys are each a chain (a key fixes
        every key before it, as a chained hash does: every ``Hashed``'s keys), with a few look-ups
        a request, not one a key.

        Each key is added with the keys before it, so the keys held are closed under taking a
        prefix: a request's keys held are its first ``h``, and ``h`` is found by bisection. Its
        keys after them are new to the set; the ones an earlier request of the lot adds are held
        for the later ones (which, being chains, share all the keys before them too)."""
        a = _array(a)
        bounds = np.asarray(bounds, dtype=np.int64)
        starts = bounds[:-1]
        n = np.diff(bounds)
        lo, hi = np.zeros(len(n), dtype=np.int64), n.copy()
        act = np.flatnonzero(lo < hi)
        while len(act):  # h: the first key not held (held ones are a prefix)
            mid = (lo[act] + hi[act]) >> 1
            q = a[starts[act] + mid]
            held = self._in_main(q)
            if len(self.new):
                held |= _in_sorted(self.new, q)
            lo[act] = np.where(held, mid + 1, lo[act])
            hi[act] = np.where(held, hi[act], mid)
            act = act[lo[act] < hi[act]]
        tail = n - lo  # each request's keys past its held ones: none of them held
        tb = np.zeros(len(n) + 1, dtype=np.int64)
        np.cumsum(tail, out=tb[1:])
        found = np.zeros(int(tb[-1]), dtype=bool)
        if len(found):
            req = np.repeat(np.arange(len(n)), tail)
            keys = a[np.arange(len(found), dtype=np.int64) - tb[:-1][req] + (starts + lo)[req]]
            order = np.argsort(keys, kind="stable")  # by key, then by place
            found[order[self._add_new(keys[order], req[order])]] = True
        held_n = lo + np.minimum(_leading(found, tb[:-1]), tail)
        return np.asarray(np.minimum(held_n, np.asarray(limits, dtype=np.int64)), dtype=np.int64)

    def _add_new(self, keys: np.ndarray, req: np.ndarray) -> np.ndarray:
        """Add ``keys``, none of them held, sorted by key then by place, ``req[i]`` the request
        of the lot that has ``keys[i]``: whether each is held for its request all the same (an
        earlier request of the lot has it, and adds it first)."""
        head = np.ones(len(keys), dtype=bool)
        head[1:] = keys[1:] != keys[:-1]
        first_req = req[head][np.cumsum(head) - 1]
        self._add(keys[head])
        return np.asarray(first_req < req)

    def _add(self, keys: np.ndarray) -> None:
        """Add ``keys``: sorted, distinct, none of them held."""
        n = self.new
        self.new = _merged(n, keys) if len(n) else keys.copy()
        if len(self.new) > self._room():
            self.merge()

    def merge(self) -> None:
        """Move ``new`` into ``main``."""
        if not len(self.new):
            return
        added = self.new
        self.main = _merged(self.main, added)
        self.new = np.empty(0, dtype=np.uint64)
        self._index(added)


def _merged(m: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Sorted ``m`` and sorted ``k`` (none of them in ``m``) in one sorted array: each of ``k``
    written where it goes, ``m`` around them (``np.insert`` sorts the places it is given first)."""
    at = np.searchsorted(m, k)
    at += np.arange(len(k))
    out = np.empty(len(m) + len(k), dtype=np.uint64)
    rest = np.ones(len(out), dtype=bool)
    rest[at] = False
    out[at] = k
    out[rest] = m
    return out


def _leading(found: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each request (its keys' flags in ``found`` from ``starts[i]`` on, end to end), how
    many of its first keys are found: up to its first not found (past its end: the next one's)."""
    gaps = np.flatnonzero(~found)
    return np.asarray(np.append(gaps, len(found))[np.searchsorted(gaps, starts)] - starts)


def _in_sorted(m: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Whether each of ``a`` is in ``m`` (sorted, not empty): a binary search each."""
    if not len(m):
        return np.zeros(len(a), dtype=bool)
    i = np.searchsorted(m, a)
    np.minimum(i, len(m) - 1, out=i)
    return np.asarray(m[i] == a)


def _array(keys: Sequence[int] | np.ndarray) -> np.ndarray:
    """64-bit keys as a ``uint64`` array (an array as is)."""
    if isinstance(keys, np.ndarray):
        return keys.astype(np.uint64, copy=False)
    return np.fromiter(keys, dtype=np.uint64, count=len(keys))


def _ints(keys: Sequence[bytes | int] | np.ndarray) -> list[int] | np.ndarray:
    """Keys as 64-bit integers: an array of them as is, else a list."""
    if isinstance(keys, np.ndarray):
        return keys
    if keys and isinstance(keys[0], int):
        return list(keys)  # type: ignore[arg-type]
    return [key64(k) for k in keys]


class UnlimitedCache:
    """Every key ever computed stays (as 64-bit keys in a :class:`KeySet`: 8 bytes a distinct
    block)."""

    def __init__(self) -> None:
        self.keys = KeySet()

    def hit_blocks(self, h: Hashed, max_blocks: int) -> int:
        return self.keys.leading(_ints(h.hashes[:max_blocks]), max_blocks)

    def serve(self, h: Hashed, block_size: int) -> int:
        return self.serve_many([h], block_size)[0]

    def serve_many(self, hs: Sequence[Hashed], block_size: int) -> list[int]:
        """:meth:`serve` of each of ``hs`` in order, with one look-up for them all."""
        parts = [_array(_ints(h.hashes)) if not h.output_hashes else
                 np.concatenate([_array(_ints(h.hashes)), _array(_ints(h.output_hashes))]) for h in hs]
        bounds = np.zeros(len(hs) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in parts], out=bounds[1:])
        limits = [hittable_tokens(h.prompt_tokens, block_size) // block_size for h in hs]
        a = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
        got: list[int] = self.keys.chained_then_add_many(a, bounds, np.asarray(limits, dtype=np.int64)).tolist()
        return got


class BlockPool:
    """vLLM V1's block pool and free queue (see the module docstring), one request at a time."""

    def __init__(self, num_gpu_blocks: int):
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be at least 2 (one is the null block); got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        # vLLM's free queue starts as blocks 1..N-1 in order. Held lazily, so memory grows with the
        # blocks the log touches, not with N: blocks never used yet are the range [fresh, N), and
        # the queue is head (blocks put back at the head) + that range + tail (blocks freed to the
        # tail); once the range is used up, head + tail is the queue.
        self.head: OrderedDict[int, None] = OrderedDict()
        self.fresh = 1
        self.tail: OrderedDict[int, None] = OrderedDict()
        self.key_of: dict[int, Key] = {}
        self.blocks_of: dict[Key, dict[int, None]] = {}
        self.evictions = 0

    @property
    def free(self) -> list[int]:
        """The free queue, head first (built whole: for tests and small pools)."""
        return [*self.head, *range(self.fresh, self.num_gpu_blocks), *self.tail]

    def free_count(self) -> int:
        return len(self.head) + (self.num_gpu_blocks - self.fresh) + len(self.tail)

    def _queued(self, b: int) -> bool:
        return b in self.head or b in self.tail  # a block of the fresh range holds no key: never hit

    def _lookup(self, k: Key) -> int | None:
        ids = self.blocks_of.get(k)
        return next(iter(ids)) if ids else None

    def _take(self) -> int:
        if self.head:
            return self.head.popitem(last=False)[0]
        if self.fresh < self.num_gpu_blocks:
            self.fresh += 1
            return self.fresh - 1
        return self.tail.popitem(last=False)[0]

    def _pop(self) -> int:
        b = self._take()
        k = self.key_of.pop(b, None)
        if k is not None:
            ids = self.blocks_of[k]
            del ids[b]
            if not ids:
                del self.blocks_of[k]
            self.evictions += 1
        return b

    def serve(self, h: Hashed, block_size: int) -> tuple[int, bool]:
        """Hit blocks of ``h``, and whether it fitted; updates the pool as vLLM does."""
        max_blocks = hittable_tokens(h.prompt_tokens, block_size) // block_size
        hashes = h.hashes.tolist() if isinstance(h.hashes, np.ndarray) else h.hashes
        hit: list[int] = []
        for k in hashes[:max_blocks]:
            b = self._lookup(k)
            if b is None:
                break
            hit.append(b)
        computed = h.prompt_tokens + h.output_tokens - 1
        need = -(-computed // block_size) - len(hit)
        in_queue = sum(1 for b in hit if self._queued(b))
        if need > self.free_count() - in_queue:
            return 0, False
        for b in hit:  # touch: a hit block waiting in the free queue leaves it
            self.head.pop(b, None)
            self.tail.pop(b, None)
        blocks = list(hit) + [self._pop() for _ in range(need)]
        keys: list[Key] = [*hashes, *h.output_hashes]
        full = computed // block_size
        for i in range(len(hit), min(full, len(keys))):
            b = blocks[i]
            self.key_of[b] = keys[i]
            self.blocks_of.setdefault(keys[i], {})[b] = None
        # freed in reverse, tail first (vLLM's BlockPool.free_blocks): its full blocks, hashed by
        # vLLM (here keyed, or holding generated tokens whose ids are unknown), are appended to
        # the queue's tail, so its head outlives its tail and everything freed before it; its
        # partial last block, never hashed, is prepended to the head: reused before any eviction
        for b in reversed(blocks[:full]):
            self.tail[b] = None
        for b in blocks[full:]:
            self.head[b] = None
            self.head.move_to_end(b, last=False)
        return len(hit), True


class Predictor:
    """Both caches side by side; ``serve`` one request after another in arrival order."""

    def __init__(self, block_size: int, gpu_blocks: int | None = None):
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1; got {block_size}")
        self.block_size = block_size
        self.unlimited = UnlimitedCache()
        self.pool = BlockPool(gpu_blocks) if gpu_blocks is not None else None

    def serve(self, h: Hashed) -> Outcome:
        bs = self.block_size
        u = self.unlimited.serve(h, bs)
        fits = True
        c = u
        if self.pool is not None:
            c, fits = self.pool.serve(h, bs)
        return Outcome(h.prompt_tokens, hittable_tokens(h.prompt_tokens, bs), c * bs, u * bs, u, fits)

    def serve_many(self, hs: Sequence[Hashed]) -> list[Outcome]:
        """:meth:`serve` of each of ``hs`` in arrival order: with no pool, one look-up of the
        unlimited cache for them all (the same outcomes)."""
        if self.pool is not None:
            return [self.serve(h) for h in hs]
        bs = self.block_size
        return [Outcome(h.prompt_tokens, hittable_tokens(h.prompt_tokens, bs), u * bs, u * bs, u, True)
                for h, u in zip(hs, self.unlimited.serve_many(hs, bs), strict=True)]


@dataclass
class Totals:
    """Token-weighted sums over a stream of outcomes."""

    requests: int = 0
    """Requests seen."""
    prompt_tokens: int = 0
    """Prompt tokens summed."""
    hittable: int = 0
    """Hittable tokens summed (full blocks within prompt_tokens - 1)."""
    cached: int = 0
    """Predicted cached tokens summed, with the capacity given."""
    cached_unlimited: int = 0
    """Predicted cached tokens summed, unlimited cache."""
    unfit: int = 0
    """Requests the pool could not hold."""

    def add(self, o: Outcome) -> None:
        self.requests += 1
        self.prompt_tokens += o.prompt_tokens
        self.hittable += o.hittable
        self.cached += o.cached
        self.cached_unlimited += o.cached_unlimited
        self.unfit += 0 if o.fits else 1

    @property
    def hit_rate(self) -> float | None:
        return self.cached / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hit_rate_unlimited(self) -> float | None:
        return self.cached_unlimited / self.prompt_tokens if self.prompt_tokens else None


class LmcacheUnlimited:
    """LMCache's hit rule with an unlimited store: a request hits its leading full chunks that are
    stored (its partial last chunk never matches a lookup); then all its chunks are stored."""

    def __init__(self, chunk_size: int = 256):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1; got {chunk_size}")
        self.chunk_size = chunk_size
        self.keys = KeySet()

    def serve(self, full_chunks: Sequence[bytes | int] | np.ndarray, partial: bytes | int | None = None) -> int:
        """Hit tokens of one request, given its full-chunk keys and its partial chunk's key."""
        keys = _array(_ints(full_chunks))
        n = len(keys)
        if partial is not None:
            keys = np.append(keys, np.uint64(key64(partial)))
        return self.keys.leading_then_add(keys, n) * self.chunk_size

    def serve_many(self, keys: np.ndarray, bounds: np.ndarray, full: np.ndarray) -> np.ndarray:
        """:meth:`serve` of several requests in arrival order at once: request ``i``'s chunk keys
        (its full chunks', then its partial chunk's if any) at ``keys[bounds[i]:bounds[i + 1]]``,
        ``full[i]`` of them full; their hit tokens."""
        return self.keys.chained_then_add_many(keys, bounds, full) * self.chunk_size
