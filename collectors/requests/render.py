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
* **Completions** (``serving_completion``): a text ``prompt`` is tokenized with
  ``add_special_tokens=True``; a list of token ids is used as is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...models.core.errors import KvplanError
from .read import LogRequest


@dataclass
class Rendered:
    """A request's prompt: its token ids and, for text prompts, the text they came from (kept in
    memory only, for finding where requests diverge; never stored)."""

    ids: list[int]
    text: str | None


def tool_call_arguments_parsed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to the template: an assistant tool call's ``arguments``
    (a JSON string in OpenAI's format) parsed into a dict, ``{}`` when empty (vLLM
    ``renderers/chat_utils.py``: templates expect dicts; ``tojson`` then re-serialises them, so the
    string's own spacing is lost). A string that is not a JSON object is left as it is."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if isinstance(calls, list) and calls:
            new_calls = []
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                if isinstance(fn, dict) and not isinstance(fn.get("arguments"), dict):
                    args = fn.get("arguments")
                    parsed: Any = {}
                    if args:
                        try:
                            parsed = json.loads(args) if isinstance(args, str) else args
                        except ValueError:
                            parsed = args
                        if not isinstance(parsed, dict):
                            parsed = args
                    c = {**c, "function": {**fn, "arguments": parsed}}
                new_calls.append(c)
            m = {**m, "tool_calls": new_calls}
        out.append(m)
    return out


class Renderer:
    """One tokenizer (and chat template) for a whole log."""

    def __init__(self, tokenizer: str | Path, chat_template: Path | None = None):
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
        self.name = name

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
        kwargs = dict(r.chat_template_kwargs)
        for k in ("tokenize", "conversation", "messages", "chat_template"):
            kwargs.pop(k, None)
        try:
            text = self.tok.apply_chat_template(
                tool_call_arguments_parsed(messages if messages is not None else r.messages), tools=r.tools,
                chat_template=self.template,
                add_generation_prompt=r.add_generation_prompt and not r.continue_final_message,
                continue_final_message=r.continue_final_message, tokenize=False, **kwargs)
        except Exception as e:  # jinja2 errors, raise_exception(), no template
            raise KvplanError(f"the chat template failed: {type(e).__name__}: {str(e)[:200]}", source=r.where) from None
        if not isinstance(text, str):
            raise KvplanError("the chat template did not render text", source=r.where)
        return text

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        ids = self.tok(text, add_special_tokens=add_special_tokens)["input_ids"]
        return list(ids)
