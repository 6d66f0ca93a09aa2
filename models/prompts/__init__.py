"""Prompts to prefix-cache hits, pure (a floor above ``metrics``). Public API (stable):

* ``hashing``: ``block_hashes(tokens, block_size, ExtraKeys(lora, cache_salt))`` (vLLM's chained
  full-block keys, sha256, 32 bytes each), ``chunk_hashes(tokens, chunk_size, partial=...)``
  (LMCache's), ``hittable_tokens(prompt_tokens, block_size)`` (full blocks within
  prompt_tokens - 1), ``ROOT``, ``hash_block``; ``block_keys64`` / ``keys64``: the same keys as
  64-bit integers (a digest's first 8 bytes), what the check's caches hold.
* ``predict``: ``hashed(ids, block_size, extra, output_tokens=, output_ids=) -> Hashed``;
  ``Predictor(block_size, gpu_blocks=None).serve(Hashed) -> Outcome`` (``cached``,
  ``cached_unlimited``, ``hittable``, ``first_miss_block``) with ``UnlimitedCache`` and vLLM V1's
  ``BlockPool`` (LRU free queue, a request's blocks freed tail first); ``Totals``;
  ``LmcacheUnlimited``; ``KeySet`` (64-bit keys, 8 bytes each: a sorted array and a bounded
  buffer) and ``key64``. Keys are sha256 digests or their 64-bit integers.
* ``busters``: ``line_map``, ``classify``, ``shape``, ``Finder`` (``observe`` -> ``Observed``: the
  finding and the ``Divergence`` from the nearest earlier request), ``Finding``, ``apply_fix``.
* ``history``: a turn the chat template renders differently once it is history (Qwen3's think
  blocks): ``message_hashes`` / ``Conversations`` (which earlier request a request continues),
  ``change(then, now, tokens) -> Change`` (shape only), ``Remedy`` (``DROP``, ``FIELD``, a template
  switch) and ``rewrite(messages, remedy)``.
* ``reasons``: ``miss_of(outcome, block_size, finding, divergence) -> RequestMiss``, one reason per
  request (``MissReason`` or a buster's kind), with its first divergent block and message.
* ``geometry``: ``scheduling_block(cache_config_info labels) -> SchedulingBlock | None`` (the block
  a hybrid model's hits land on, when larger than its cache block), ``table_sizes(own, chunk)``
  (16, 32, 64, 128, 256, the own block, LMCache's chunk), ``pool_blocks(capacity_tokens, size)``.
"""
