"""Block geometry: which block sizes the prompt check replays a log at, and the block a
deployment's prefix-cache hits land on.

vLLM caches only full blocks, so a prompt shorter than one block never hits. Most models use
16-token blocks (128 on vLLM's CPU backend), but a hybrid model (attention with Mamba or linear
attention layers) schedules in a block the size of its Mamba state page (528 to 8320 tokens,
vllm#40696, #47430, #48401), and vLLM's scheduler block is the least common multiple of its
KV-cache groups' block sizes (``vllm/v1/core/kv_cache_utils.py::resolve_kv_cache_block_sizes``).
``vllm:cache_config_info`` carries, as labels:

* ``block_size``: the cache block (raised to the Mamba page on hybrids before vLLM decoupled the
  two, vllm#46251);
* ``cache_hit_alignment_tokens``: "token granularity at which prefix-cache hits land" (vLLM's own
  word; ``None`` on the API server's copy of the config in the builds recorded here);
* ``effective_attention_block_size``: the full-attention group's block, DCP included;
* ``mamba_block_size``: the Mamba group's block (prefix caching in ``align`` mode).

Pure: labels in, sizes out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TABLE_SIZES = (16, 32, 64, 128, 256)
"""Block sizes every geometry table has (besides the deployment's own and LMCache's chunk)."""

SCHEDULING_LABELS = ("effective_attention_block_size", "mamba_block_size")
"""``cache_config_info`` labels whose blocks the scheduler's block is a multiple of."""


def label_int(labels: Mapping[str, str], name: str) -> int | None:
    """A label's positive integer value; None when absent, ``"None"`` or not a positive integer."""
    try:
        v = int(labels.get(name) or "x")
    except ValueError:
        return None
    return v if v > 0 else None


@dataclass(frozen=True)
class SchedulingBlock:
    """The block a deployment's hits land on, larger than its cache block: ``size`` tokens,
    read from the ``labels`` named (``cache_hit_alignment_tokens`` alone, or the least common
    multiple of ``block_size`` and the others)."""

    size: int
    """Tokens: hits land on multiples of it."""
    cache_block: int
    """The ``block_size`` label."""
    labels: tuple[str, ...]
    """The labels it was read from."""

    def describe(self) -> str:
        if self.labels == ("cache_hit_alignment_tokens",):
            return f"cache_hit_alignment_tokens={self.size} (block_size={self.cache_block})"
        return (f"the least common multiple of block_size={self.cache_block} and "
                + ", ".join(self.labels) + f": {self.size}")


def scheduling_block(labels: Mapping[str, str]) -> SchedulingBlock | None:
    """The block the deployment's prefix-cache hits land on when it is larger than its cache
    block (a hybrid model), from ``vllm:cache_config_info``'s labels; None when it is not larger,
    or the labels do not say. ``cache_hit_alignment_tokens`` when given (vLLM's own figure),
    else the least common multiple of ``block_size``, ``effective_attention_block_size`` and
    ``mamba_block_size`` (vLLM's scheduler block: the lcm of its groups' blocks)."""
    bs = label_int(labels, "block_size")
    if bs is None:
        return None
    aligned = label_int(labels, "cache_hit_alignment_tokens")
    if aligned is not None:
        return SchedulingBlock(aligned, bs, ("cache_hit_alignment_tokens",)) if aligned > bs else None
    found = {name: v for name in SCHEDULING_LABELS if (v := label_int(labels, name)) is not None}
    size = math.lcm(bs, *found.values())
    if size <= bs:
        return None
    return SchedulingBlock(size, bs, tuple(n for n, v in found.items() if v != bs))


def table_sizes(own: int, lmcache_chunk: int, extra: Iterable[int] = ()) -> list[int]:
    """The block sizes of the geometry table: 16, 32, 64, 128, 256, the deployment's own block,
    LMCache's chunk and ``extra`` (the check's own size when it differs), deduplicated, sorted."""
    sizes = {*TABLE_SIZES, own, lmcache_chunk, *extra}
    if min(sizes) < 1:
        raise ValueError(f"block sizes must be at least 1; got {sorted(sizes)}")
    return sorted(sizes)


def pool_blocks(capacity_tokens: int, block_size: int) -> int:
    """Blocks of ``block_size`` tokens in a pool of ``capacity_tokens`` (the check's
    ``num_gpu_blocks`` x its block size): the same capacity in tokens at every block size,
    rounded down (a partial block holds nothing)."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1; got {block_size}")
    return capacity_tokens // block_size
