"""Request logs in (OpenAI chat / completions / Batch bodies, Bailian and Mooncake traces),
token ids and prefix-cache predictions out. The public API (stable):

* ``read.read_requests(paths) -> Iterator[LogRequest]``: streamed, plain or gzip, in arrival
  order; ``read.LogRequest`` (``kind``: chat | completion | blocks; ``arrival`` unix seconds or
  None; ``where`` = "file:line"); errors are ``PayloadError`` naming the file and the line.
* ``render.Renderer(tokenizer, chat_template=None)``: transformers' ``AutoTokenizer`` (local
  directory or local HF cache, offline) and ``apply_chat_template``, as vLLM renders;
  ``.render(request) -> Rendered(ids, text)``, ``.encode(text, add_special_tokens=...)``,
  ``.encode_many(texts, add_special_tokens=...)`` (one batch call, the same ids).
* ``prepare.Preparer(renderer, options).prepare(request) -> Prepared`` (``hashed``: the
  request's vLLM block keys, ``ids``: its token ids or None for block-id traces, ``text`` and
  ``lines``: the rendered prompt, memory only); ``prepare(request, encode=False)`` renders only,
  ``Preparer.encode(prepared)`` / ``encode_all(prepared_list)`` tokenize and hash later (keys:
  64-bit integers, ``hashing.block_keys64``). A template that writes today's date is
  rendered with the request's arrival day, as vLLM would have. LMCache chunk keys:
  ``kvplan.models.prompts.hashing.chunk_hashes(ids, chunk_size, partial=True)``.
* ``check.check(paths, renderer, CheckOptions(block_size, gpu_blocks, lmcache_chunk, lora,
  geometry=(sizes...)), progress=..., on_request=...) -> CheckResult``; ``CheckResult.as_json()``
  is ``kvplan prompts check --json``. ``geometry``: block sizes the log is also replayed at
  (``CheckResult.geometry``, ``block_geometry`` in the JSON), each request's token ids re-hashed
  at each size (never tokenized again) in a pool of the same capacity in tokens.
  ``workers``: processes the first pass renders, tokenizes and keys text prompts in
  (``workers.prepared_in_pool``; 1: this process; the same results). ``render_ahead`` (default
  True): with one worker, the renders and the fix pass's rewrites made in a forked process
  where that is safe (``forked.py``; the same results).
* ``history.HistoryFinder(renderer, block_size).observe(request, text, ...)``: a turn the chat
  template renders differently once it is history (Qwen3's think blocks) as a
  ``template_history`` finding (its ``change`` in shape only, ``tokens_missed``) with the
  remedies the template allows (``HistoryFinder.remedies``); ``history.remedied(request, remedy)``
  is the request a client applying it sends; ``history.template_switches(renderer)`` the
  template's undeclared variables about thinking or reasoning. ``render.reasoning_fields``: an
  assistant message's ``reasoning`` reaches the template as vLLM passes it.

Nothing here writes prompt text anywhere; hashes and lengths only.
"""
