"""vLLM's prefix-cache block hashes and LMCache's chunk hashes, from token ids.

vLLM V1 (``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``, ``hash_request_tokens``,
``generate_block_hash_extra_keys``) hashes only **full** blocks of ``block_size`` tokens; each
block's key is ``hash((parent block's hash, the block's token ids, extra keys))``, the first
block's parent a root value. The extra keys: the LoRA adapter's name on every block, the
request's ``cache_salt`` on the first block only, multimodal item hashes with their offsets
(**not supported here**: a request with images or audio is refused by the readers, not guessed).

The hash function here is sha256 over a fixed byte encoding, not vLLM's pickle/cbor of a tuple:
a prediction only needs "same key iff same parent, tokens and extra keys", which both give,
and these digests are stable across processes (vLLM's root is random per process unless
``PYTHONHASHSEED`` is set), so they can be stored and compared later.

LMCache hashes ``chunk_size`` (256 by default) token chunks with the same chained rule and, by
default (``save_unfull_chunk``), the last partial chunk too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROOT = hashlib.sha256(b"kvplan-prefix-root").digest()
"""The parent of a request's first block (vLLM: ``NONE_HASH``)."""


@dataclass(frozen=True)
class ExtraKeys:
    """What vLLM mixes into a block's key besides its tokens. ``lora``: the adapter's name (every
    block); ``cache_salt``: the request's salt (first block only)."""

    lora: str | None = None
    """The LoRA adapter's name, mixed into every block's key (None: the base model)."""
    cache_salt: str | None = None
    """The request's ``cache_salt``, mixed into its first block's key only."""

    def for_block(self, index: int) -> bytes:
        parts = []
        if self.lora is not None:
            parts.append(b"L" + self.lora.encode("utf-8"))
        if index == 0 and self.cache_salt is not None:
            parts.append(b"S" + self.cache_salt.encode("utf-8"))
        return b"\x00".join(parts)


NO_EXTRA = ExtraKeys()


def _tokens_bytes(tokens: Sequence[int] | np.ndarray) -> bytes:
    return np.asarray(tokens, dtype=np.int64).tobytes()


def hash_block(parent: bytes, tokens: Sequence[int] | np.ndarray, extra: bytes = b"") -> bytes:
    """One block's key: sha256 of (parent digest, token ids as int64, extra keys)."""
    h = hashlib.sha256(parent)
    h.update(_tokens_bytes(tokens))
    h.update(len(extra).to_bytes(4, "little"))
    h.update(extra)
    return h.digest()


def block_hashes(tokens: Sequence[int] | np.ndarray, block_size: int, extra: ExtraKeys = NO_EXTRA,
                 *, start: int = 0, parent: bytes = ROOT) -> list[bytes]:
    """The chained keys of every full block of ``tokens`` (a trailing partial block has none).
    ``start``/``parent`` continue a chain: block ``start`` onwards, ``parent`` the key of block
    ``start - 1`` (used for the blocks a request's output tokens fill). The same keys as
    :func:`hash_block` block by block, the token bytes converted once."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1; got {block_size}")
    buf = _tokens_bytes(tokens)
    width = 8 * block_size
    out: list[bytes] = []
    prev = parent
    plain = extra.for_block(1)
    tail_plain = len(plain).to_bytes(4, "little") + plain
    sha = hashlib.sha256
    for b in range(start, len(buf) // width):
        e = tail_plain if b else len(extra.for_block(0)).to_bytes(4, "little") + extra.for_block(0)
        prev = sha(prev + buf[b * width:(b + 1) * width] + e).digest()
        out.append(prev)
    return out


def keys64(digests: Sequence[bytes]) -> list[int]:
    """Each digest's first 8 bytes as a little-endian 64-bit integer: the compact key the
    prediction's caches hold (``predict.key64`` of each, at once)."""
    if not digests:
        return []
    keys: list[int] = np.frombuffer(b"".join(d[:8] for d in digests), dtype="<u8").tolist()
    return keys


def block_keys64(tokens: Sequence[int] | np.ndarray, block_size: int, extra: ExtraKeys = NO_EXTRA) -> list[int]:
    """:func:`block_hashes` as 64-bit integers (:func:`keys64`): the same chain, 8 bytes a key."""
    return keys64(block_hashes(tokens, block_size, extra))


def chunk_hashes(tokens: Sequence[int] | np.ndarray, chunk_size: int = 256, extra: ExtraKeys = NO_EXTRA,
                 *, partial: bool = False) -> list[bytes]:
    """LMCache's chunk keys: full ``chunk_size`` chunks, chained as vLLM's blocks are; with
    ``partial`` the last partial chunk gets a key too (LMCache stores it by default; a lookup of
    a later, longer prompt never matches it, as its tokens differ)."""
    arr = np.asarray(tokens, dtype=np.int64)
    keys = block_hashes(arr, chunk_size, extra)
    tail = len(arr) % chunk_size
    if partial and tail:
        keys.append(hash_block(keys[-1] if keys else ROOT, arr[len(arr) - tail:], extra.for_block(len(keys))))
    return keys


M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_P = 0x9E37_79B9_7F4A_7C15
"""The chain's multiplier (odd, so invertible modulo 2**64)."""
_Q = pow(_P, -1, 1 << 64)
_POWERS: dict[str, np.ndarray] = {"p": np.ones(1, dtype=np.uint64), "q": np.ones(1, dtype=np.uint64)}


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise (a bijection of 64-bit integers; in place)."""
    t = x >> _S30  # one temporary, reused (the constants made once: a few microseconds a call)
    x ^= t
    x *= _M1
    np.right_shift(x, _S27, out=t)
    x ^= t
    x *= _M2
    np.right_shift(x, _S31, out=t)
    x ^= t
    return x


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58_476D_1CE4_E5B9), np.uint64(0x94D0_49BB_1331_11EB)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``_P**i`` and ``_Q**i`` (mod 2**64) for i < n, grown and kept as needed."""
    have = _POWERS["p"]
    if len(have) < n:
        m = max(n, 2 * len(have))
        for name, base in (("p", _P), ("q", _Q)):
            f = np.full(m, base, dtype=np.uint64)
            f[0] = 1
            with np.errstate(over="ignore"):
                _POWERS[name] = np.cumprod(f, dtype=np.uint64)
    return _POWERS["p"][:n], _POWERS["q"][:n]


def _extra64(b: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little") if b else 0


def token_digests(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Each token mixed with its position in the prompt (``mix64(token | position << 32)``):
    what :func:`chain_keys64` sums block by block, at every block size (computed once a prompt).
    :func:`token_digests_many` of one prompt."""
    arr = np.ascontiguousarray(tokens, dtype=np.int64)
    return token_digests_many(arr, np.array([0, len(arr)], dtype=np.int64))


def chain_keys64(tokens: Sequence[int] | np.ndarray, block_size: int, extra: ExtraKeys = NO_EXTRA, *,
                 partial: bool = False, digests: np.ndarray | None = None) -> np.ndarray:
    """The chained 64-bit keys of every full block of ``tokens`` (with ``partial``, the last
    partial block too), computed with numpy at once rather than a sha256 per block (the check's
    keys: ``block_keys64`` gives other integers, with the same equalities). ``digests``: the
    tokens' :func:`token_digests`, when already computed.

    Block ``b``'s digest ``d_b`` is the sum of its tokens' digests (each token mixed with its
    position in the prompt), mixed with its length and the block's extra keys; its key is
    ``mix64(S_b + b)`` where ``S_b = sum(d_i * P**(b - i), i <= b)`` mod 2**64 (a polynomial in
    the digests of the block and every block before it: the chain). Two different chains share
    a key with a probability near 2**-64, as two 64-bit sha256 prefixes do. Computed by
    :func:`chain_keys64_many`, one prompt of it."""
    n = len(tokens)
    v = digests if digests is not None else token_digests(tokens)
    return chain_keys64_many(v[:n], np.array([0, n], dtype=np.int64), block_size, [extra], partial=partial)[0]


def token_digests_many(ids: np.ndarray, bounds: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """:func:`token_digests` of several prompts at once: ``ids`` their token ids end to end,
    prompt ``i`` at ``ids[bounds[i]:bounds[i + 1]]``; the digests end to end the same way (each
    token mixed with its position in its own prompt). ``starts``: prompt ``i``'s ids are its
    tokens from position ``starts[i]`` on (the digests of a prompt's tail; None: all from 0)."""
    arr = np.ascontiguousarray(ids, dtype=np.int64)
    lens = np.diff(bounds)
    first = bounds[:-1] if starts is None else bounds[:-1] - np.asarray(starts, dtype=np.int64)
    pos = np.arange(len(arr), dtype=np.uint64) - np.repeat(first, lens).astype(np.uint64)
    v = arr.view(np.uint64) & np.uint64(0xFFFF_FFFF)
    v |= pos << np.uint64(32)
    with np.errstate(over="ignore"):
        return mix64(v)


def chain_keys64_many(digests: np.ndarray, bounds: np.ndarray, block_size: int,
                      extras: Sequence[ExtraKeys] | None = None, *, partial: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`chain_keys64` of several prompts at once, from their :func:`token_digests_many`
    (prompt ``i``'s at ``digests[bounds[i]:bounds[i + 1]]``) and each one's extra keys (None:
    none): every prompt's keys end to end, and where each prompt's start (one more at the end).
    The same integers as one call a prompt, in a fixed number of numpy calls for the lot."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1; got {block_size}")
    bounds = np.asarray(bounds, dtype=np.int64)
    lens = np.diff(bounds)
    full = lens // block_size
    nb: np.ndarray = full + (lens % block_size > 0).astype(np.int64) * int(partial)
    used = np.minimum(lens, nb * block_size)  # tokens in a prompt's blocks (a partial tail left out)
    key_bounds = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(nb, out=key_bounds[1:])
    total = int(key_bounds[-1])
    if not total:
        return np.empty(0, dtype=np.uint64), key_bounds
    # one reduceat index a block, and one more after a prompt's blocks where tokens are left out
    # (its sum thrown away), so that no block sums past its prompt's used tokens
    cut = (used < lens).astype(np.int64)
    slots = nb + cut
    seg = np.repeat(np.arange(len(lens)), slots)
    first = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(slots[:-1], out=first[1:])
    k = np.arange(len(seg), dtype=np.int64) - first[seg]
    idx = bounds[:-1][seg] + k * block_size
    real = k < nb[seg]
    with np.errstate(over="ignore"):
        d = np.add.reduceat(digests, idx)[real].astype(np.uint64, copy=False)
        seg, k = seg[real], k[real]
        last = k == nb[seg] - 1
        size = np.where(last, used[seg] - k * block_size, block_size).astype(np.uint64)
        d ^= size << np.uint64(48)
        if extras is not None:
            e = np.array([(_extra64(x.for_block(0)), _extra64(x.for_block(1))) if x != NO_EXTRA else (0, 0)
                          for x in extras], dtype=np.uint64).reshape(-1, 2)
            if e.any():
                d ^= np.where(k == 0, e[seg, 0], e[seg, 1])
        d = mix64(d)
        pw, qw = _powers(int(nb.max()))
        s = np.cumsum(d * qw[k], dtype=np.uint64)
        before = np.concatenate([np.zeros(1, dtype=np.uint64), s])[key_bounds[:-1]]  # each prompt's start
        s -= np.repeat(before, nb)
        s *= pw[k]
        s += k.astype(np.uint64)
        return mix64(s), key_bounds


def hittable_tokens(prompt_tokens: int, block_size: int) -> int:
    """Most prompt tokens a request can get from vLLM's cache: full blocks within
    ``prompt_tokens - 1`` (the last token is always computed), so 48 of a 64-token prompt at 16."""
    return max(0, (prompt_tokens - 1) // block_size) * block_size
