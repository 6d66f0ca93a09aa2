"""Render and tokenize a logged request exactly as vLLM's OpenAI server does, with transformers'
own tokenizer and ``apply_chat_template`` (never a re-implementation).

* The tokenizer comes from a local directory, or a model id already in the local Hugging Face
  cache: offline (``HF_HUB_OFFLINE=1``, ``local_files_only=True``), never a download. A missing
  one is a ``KvplanError`` naming it.
* **Chat** (vLLM ``serving_chat``): ``apply_chat_template(messages, tools=..., 
  add_generation_prompt=..., continue_final_message=..., tokenize=False, **chat_template_kwargs)``
  with the tokenizer's template or ``chat_template`` (vLLM's ``--chat-template FILE``), then
  ``tokenizer(text, add_special_tokens=False)``: the rendered text already holds the BOS token
  when the template writes it. ``tool_choice: "none"`` still renders the tools (vLLM's default).
* Text content parts are joined with newlines (vLLM's "string" content format, what it uses for
  templates that do not loop over content parts; a template that expects the "openai" parts
  format renders differently here: a known gap). Tool-call ``arguments`` are parsed to a dict,
  as vLLM's ``_postprocess_messages`` does.
* **Completions** (``serving_completion``): a text ``prompt`` is tokenized with
  ``add_special_tokens=True``; a list of token ids is used as is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...models.core.errors import KvplanError
from .pieces import MAX_BYTES, Batch, PieceCache, Run, now
from .read import LogRequest

STRFTIME_NOW = re.compile(r"""strftime_now\(\s*(['"])(.*?)\1\s*\)""")
"""A chat template's call of transformers' ``strftime_now`` with a literal format."""


class RequestRefused(KvplanError):
    """One request vLLM would refuse (its template fails on it, its tool-call arguments are not
    JSON): the check skips it, naming its file and line, within the run's budget of bad lines."""


@dataclass
class Rendered:
    """A request's prompt: its token ids and, for text prompts, the text they came from (kept in
    memory only, for finding where requests diverge; never stored)."""

    ids: list[int]
    text: str | None


class Renderer:
    """One tokenizer (and chat template) for a whole log."""

    def __init__(self, tokenizer: str | Path, chat_template: Path | None = None, *,
                 piece_bytes: int | None = MAX_BYTES):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            from transformers import AutoTokenizer
        except ImportError as e:  # a broken install, not the user's input
            raise KvplanError(f"transformers is not importable ({e}); reinstall kvplan", source="--tokenizer") from None
        name = str(tokenizer)
        try:
            self.tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
        except Exception as e:  # OSError, ValueError, EnvironmentError: not found / unreadable
            raise KvplanError(f"no tokenizer found there (a local directory, or a model id already in the local "
                              f"Hugging Face cache; kvplan never downloads): {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}",
                              source=f"--tokenizer {name}") from None
        self.template: str | None = None
        if chat_template is not None:
            try:
                self.template = Path(chat_template).read_text(encoding="utf-8")
            except OSError as e:
                raise KvplanError(f"cannot read: {e.strerror or e}",
                                  source=f"--chat-template {chat_template}") from None
            except UnicodeDecodeError as e:
                raise KvplanError(f"not UTF-8 text (byte {e.start}): a Jinja chat template is text",
                                  source=f"--chat-template {chat_template}") from None
        self.name = name
        self.piece_bytes = piece_bytes
        self._pieces: PieceCache | None = None
        sources = [self.template] if self.template is not None else (
            list(self.tok.chat_template.values()) if isinstance(self.tok.chat_template, dict)
            else [self.tok.chat_template or ""])
        self.clock_formats: tuple[str, ...] = tuple(dict.fromkeys(
            m.group(2) for src in sources for m in STRFTIME_NOW.finditer(src or "")))
        """The formats the template passes to ``strftime_now`` (a literal string), in order:
        whatever the format, the check finds the date it wrote and renders each request's own."""

    def render(self, r: LogRequest) -> Rendered:
        if r.kind == "completion":
            if r.prompt_ids is not None:
                return Rendered(list(r.prompt_ids), None)
            assert r.prompt is not None
            return Rendered(self.encode(r.prompt, add_special_tokens=True), r.prompt)
        text = self.chat_text(r)
        return Rendered(self.encode(text, add_special_tokens=False), text)

    def text(self, r: LogRequest) -> str:
        """A text request's prompt as vLLM tokenizes it: the chat template's output, or the
        completions prompt."""
        if r.kind == "completion":
            assert r.prompt is not None
            return r.prompt
        return self.chat_text(r)

    def chat_text(self, r: LogRequest, messages: list[dict[str, Any]] | None = None) -> str:
        """The chat template's text, called as vLLM's chat completions call it: the body's
        ``tools``, ``documents``, ``add_generation_prompt`` and ``continue_final_message``, then
        ``chat_template_kwargs`` over them (vLLM updates its template kwargs with the request's)."""
        kwargs: dict[str, Any] = {"tools": r.tools, "documents": r.documents,
                                  "add_generation_prompt": r.add_generation_prompt,
                                  "continue_final_message": r.continue_final_message}
        kwargs.update(r.chat_template_kwargs)
        for k in ("tokenize", "conversation", "messages", "chat_template"):
            kwargs.pop(k, None)
        kwargs["add_generation_prompt"] = bool(kwargs["add_generation_prompt"]) and not kwargs["continue_final_message"]
        msgs = reasoning_fields(tool_call_arguments(messages if messages is not None else r.messages, r.where))
        try:
            text = self.tok.apply_chat_template(msgs, chat_template=self.template, tokenize=False, **kwargs)
        except Exception as e:  # jinja2 errors, raise_exception(), no template
            raise RequestRefused(f"the chat template failed: {type(e).__name__}: {str(e)[:200]}",
                                 source=r.where) from None
        if not isinstance(text, str):
            raise RequestRefused("the chat template did not render text", source=r.where)
        return text

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """Token ids of ``text`` (add_special_tokens: completions True, chat False)."""
        return self.encode_many([text], add_special_tokens=add_special_tokens)[0]

    def encode_many(self, texts: list[str], *, add_special_tokens: bool) -> list[list[int]]:
        """Token ids of each of ``texts``, in one batch call of the fast tokenizer (its Rust
        ``encode_batch_fast``, which skips character offsets and may use several cores) when that
        is what ``tokenizer(texts, add_special_tokens=...)`` would run: a fast tokenizer with no
        truncation or padding set and special tokens not split. Otherwise transformers' own batch
        call. The ids are the same either way (tests/test_prompts_scale.py checks it)."""
        if not texts:
            return []
        bt = self._backend()
        if bt is not None:
            return [e.ids for e in bt.encode_batch_fast(texts, add_special_tokens=add_special_tokens)]
        return [list(ids) for ids in self.tok(texts, add_special_tokens=add_special_tokens)["input_ids"]]

    def encode_ids(self, texts: list[str], *, add_special_tokens: bool) -> list[np.ndarray]:
        """:meth:`encode_many` as int64 arrays, by pieces (``pieces.PieceCache``: each distinct
        piece of text tokenized once per run, checked against whole prompts as it goes) where the
        fast tokenizer allows it and ``piece_bytes`` is not None; else whole."""
        return self.finish_ids(self.begin_ids(texts, add_special_tokens=add_special_tokens))

    def begin_ids(self, texts: list[str], *, add_special_tokens: bool, run: Run = now,
                  streams: Sequence[Hashable | None] | None = None) -> Batch:
        """:meth:`encode_ids` up to the tokenizer's calls, which ``run`` makes (perhaps on
        another thread: ``PieceCache.begin``, ``streams`` the conversation each text continues);
        :meth:`finish_ids` gives the ids."""
        cache = self.pieces
        if cache is not None:
            return cache.begin(texts, add_special_tokens=add_special_tokens, run=run, streams=streams)
        return Batch(texts, add_special_tokens, None, {}, [], run(lambda: [
            np.asarray(ids, dtype=np.int64) for ids in self.encode_many(texts, add_special_tokens=add_special_tokens)]))

    def drop_ids(self, b: Batch) -> None:
        """A batch :meth:`begin_ids` began that will not be finished (``PieceCache.drop``)."""
        if self._pieces is not None:
            self._pieces.drop(b)

    def finish_ids(self, b: Batch) -> list[np.ndarray]:
        """The ids of a batch :meth:`begin_ids` began, in the order begun."""
        cache = self._pieces
        if cache is not None and b.cut is not None:
            return cache.finish(b)
        whole: list[np.ndarray] = b.result.result()
        return whole

    @property
    def pieces(self) -> PieceCache | None:
        """The run's piece cache (None: no fast tokenizer's batch call, or ``piece_bytes`` None)."""
        if self._pieces is None and self.piece_bytes is not None:
            bt = self._backend()
            if bt is not None:
                self._pieces = PieceCache(bt, self.piece_bytes)
        return self._pieces

    def tokenizing_whole(self) -> bool:
        """Whether prompts are tokenized whole now: no piece cache, or the one begun found too
        little of their text cached (all-distinct prompts: ``PieceCache`` tokenizes the next ones
        whole). The tokenizer's time, not Python's, is then most of a check's. False before the
        piece cache's first batch (it may still find pieces)."""
        if self.piece_bytes is None:
            return True
        c = self._pieces
        if c is None:
            return self._backend() is None
        return not c.active or c.whole_left > 0

    def piece_notes(self) -> list[str]:
        """What the piece cache has to say (fell back, or not used and why)."""
        return self._pieces.notes() if self._pieces is not None else []

    def _backend(self) -> Any:
        bt = getattr(self.tok, "backend_tokenizer", None) if getattr(self.tok, "is_fast", False) else None
        if bt is None or not hasattr(bt, "encode_batch_fast"):
            return None
        if bt.truncation is not None or bt.padding is not None:
            return None
        if bool(bt.encode_special_tokens) != bool(getattr(self.tok, "split_special_tokens", False)):
            return None
        return bt


def reasoning_fields(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's ``_parse_chat_message_content`` (chat_utils.py, 2026): an assistant message's
    ``reasoning`` reaches the template as both ``reasoning`` and ``reasoning_content``; a
    ``reasoning_content`` field the client sends is not passed on (nor either field of another
    role). The caller's messages are left unchanged."""
    if not any("reasoning" in m or "reasoning_content" in m for m in messages):
        return messages
    out = []
    for m in messages:
        reasoning = m.get("reasoning")
        m = {k: v for k, v in m.items() if k not in ("reasoning", "reasoning_content")}
        if m.get("role") == "assistant" and reasoning is not None:
            m["reasoning"] = m["reasoning_content"] = reasoning
        out.append(m)
    return out


def tool_call_arguments(messages: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """vLLM's ``_postprocess_messages``: an assistant message's tool-call ``arguments`` reach the
    template as a dict (parsed from their JSON string; empty or missing: ``{}``), as transformers
    asks. The caller's messages are left unchanged."""
    import copy
    import json

    out = messages
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if m.get("role") != "assistant" or not isinstance(calls, list):
            continue
        if out is messages:
            try:
                out = copy.deepcopy(messages)
            except RecursionError:
                raise RequestRefused(f"messages[{i}]: nested too deeply", source=where) from None
        for call in out[i]["tool_calls"]:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                continue
            args = fn.get("arguments")
            if not args:
                fn["arguments"] = {}
            elif not isinstance(args, (dict, list)):
                try:
                    fn["arguments"] = json.loads(args)
                except (TypeError, ValueError, RecursionError):
                    raise RequestRefused(f"messages[{i}]: a tool call's arguments are not JSON (vLLM refuses it)",
                                      source=where) from None
    return out
