"""Prompts to prefix-cache hits, pure (a floor above ``metrics``). Public API (stable):

* ``hashing``: ``block_hashes(tokens, block_size, ExtraKeys(lora, cache_salt))`` (vLLM's chained
  full-block keys, sha256, 32 bytes each), ``chunk_hashes(tokens, chunk_size, partial=...)``
  (LMCache's), ``hittable_tokens(prompt_tokens, block_size)`` (full blocks within
  prompt_tokens - 1), ``ROOT``, ``hash_block``.
* ``predict``: ``hashed(ids, block_size, extra, output_tokens=, output_ids=) -> Hashed``;
  ``Predictor(block_size, gpu_blocks=None).serve(Hashed) -> Outcome`` (``cached``,
  ``cached_unlimited``, ``hittable``, ``first_miss_block``) with ``UnlimitedCache`` and vLLM V1's
  ``BlockPool`` (LRU free queue, a request's blocks freed tail first); ``Totals``;
  ``LmcacheUnlimited``.
* ``busters``: ``line_map``, ``classify``, ``shape``, ``Finder``, ``Finding``, ``apply_fix``.
"""
