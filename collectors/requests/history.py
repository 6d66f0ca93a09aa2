"""Finds turns the chat template renders differently once they are history, and renders the
requests with each remedy applied (``models.prompts.history`` explains the method; this module
calls the template).

Per chat request that missed part of the earlier request's prompt and continues that request (its
first ``k`` messages are that request's; a request that hit all of it costs a hash of its
messages and no render): the earlier request's prompt
(``M[:k]`` with its generation prompt) is rendered. When this request's text starts with it, the
candidate is the turn the earlier request generated, ``M[k]``. Else the candidate is the first
message ``j`` whose rendering as the last message (``M[:j+1]``, *then*) the earlier request's text
starts with and that reaches past the point where this request's text parts from it (the turn the
earlier request still rendered as it was generated), found by rendering ``M[:j+1]`` for ``j``
down from ``k - 1`` until one ends before that point: about as many renders as the messages since
the earlier request's last user query. The candidate's *then* is compared with this request's
text (*now*). A template switch is tried on the first request a finding is found in, with each of
True and False. A request this finder explains is not counted by the line finder
(``busters.Finder``): its miss reason is ``template_history``, at its own rewritten message.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from typing import Any

from ...models.prompts.busters import Finding
from ...models.prompts.hashing import hittable_tokens
from ...models.prompts.history import (
    DROP,
    FIELD,
    Conversations,
    Remedy,
    change,
    common_prefix,
    has_reasoning,
    message_hashes,
    rewrite,
    root_hash,
)
from .read import LogRequest
from .render import Renderer, RequestRefused

KIND = "template_history"
SWITCH = re.compile(r"think|reason", re.IGNORECASE)
"""Undeclared template variables tried as a ``chat_template_kwargs`` switch."""


def template_switches(renderer: Renderer) -> list[str]:
    """The template's undeclared variables whose name speaks of thinking or reasoning
    (``preserve_thinking``, ``enable_thinking`` ...), sorted; [] when it cannot be parsed."""
    import jinja2
    from jinja2 import meta

    tok_template = renderer.tok.chat_template
    src = renderer.template if renderer.template is not None else (
        tok_template.get("default", next(iter(tok_template.values()), "")) if isinstance(tok_template, dict)
        else tok_template)
    if not src:
        return []
    try:
        env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"])
        names = meta.find_undeclared_variables(env.parse(src))
    except jinja2.TemplateError:
        return []
    return sorted(n for n in names if SWITCH.search(n))


def render_as(renderer: Renderer, r: LogRequest, messages: list[dict[str, Any]], *, generation_prompt: bool,
              kwargs: dict[str, Any] | None = None) -> str:
    """``messages`` rendered with ``r``'s tools, documents and template kwargs (plus ``kwargs``),
    with or without the generation prompt, never continuing the final message."""
    kw = {k: v for k, v in {**r.chat_template_kwargs, **(kwargs or {})}.items()
          if k not in ("add_generation_prompt", "continue_final_message")}
    rr = dataclasses.replace(r, messages=messages, add_generation_prompt=generation_prompt,
                             continue_final_message=False, chat_template_kwargs=kw)
    return renderer.chat_text(rr)


def remedied(r: LogRequest, remedy: Remedy) -> LogRequest | None:
    """``r`` as a client applying ``remedy`` sends it (None: the remedy changes nothing in it)."""
    if r.kind != "chat":
        return None
    if remedy.switch is not None:
        return dataclasses.replace(r, chat_template_kwargs={**r.chat_template_kwargs, remedy.switch: remedy.value})
    msgs = rewrite(r.messages, remedy)
    return dataclasses.replace(r, messages=msgs) if msgs is not None else None


def request_hashes(r: LogRequest) -> list[int]:
    """The chained hashes of a chat request's messages that :meth:`HistoryFinder.observe` looks
    conversations up by (``message_hashes``, rooted in what else tells them apart), taken apart
    so that another process of the same interpreter (its ``hash`` the same) can compute them
    ahead: ``forked.py``."""
    return message_hashes(r.messages, rooted=_rooted((r.tools, r.chat_template_kwargs, r.documents, r.model)))


_ROOTS: dict[bytes, int] = {}
"""``root_hash`` of recent roots, by their pickle (equal pickles: equal values of the same types,
so the same sorted JSON): an agent log sends the same tools with every request, and their JSON
costs three times their pickle."""


def _rooted(root: tuple[Any, ...]) -> int:
    try:
        key = pickle.dumps(root, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not picklable: its JSON only
        return root_hash(root)
    h = _ROOTS.get(key)
    if h is None:
        if len(_ROOTS) >= 256:
            _ROOTS.clear()
        h = _ROOTS[key] = root_hash(root)
    return h


class HistoryFinder:
    """``template_history`` findings over a stream of chat requests (module doc): one finding per
    (role, what changed, think block or not), at the message it was first seen at; ``remedies``
    per finding key, the ones the template allows."""

    def __init__(self, renderer: Renderer, block_size: int, limit: int = 100_000):
        self.renderer = renderer
        self.block_size = block_size
        self.conversations = Conversations(limit)
        self.findings: dict[tuple[str, int | None, str, int], Finding] = {}
        self.remedies: dict[tuple[str, int | None, str, int], list[Remedy]] = {}
        self.by_shape: dict[tuple[str, str, bool], Finding] = {}
        self.span: tuple[tuple[str, int | None, str, int], int, int] | None = None
        """The last request observed, when it counts for a finding: (the finding's key, start and
        end of the line of its text where it parts from the turn as rendered then). Memory only,
        for the dashboard's highlighted example."""
        self._switches: list[str] | None = None

    def observe(self, r: LogRequest, text: str, *, missed: bool, prompt_tokens: int, cached: int, hittable: int,
                first_block: int, hashes: list[int] | None = None) -> Finding | None:
        """Record ``r`` (rendered ``text``); when it ``missed`` (hit less than it could) and
        continues an earlier request whose turn the template rewrote, the finding it counts for,
        placed at this request's rewritten message. ``cached``: its hits with an unlimited cache;
        ``hittable``: its full blocks within prompt_tokens - 1. What the finding costs it: the
        earlier request's prompt, in full blocks within what it could hit, less what it hit. A
        request that hit all of the earlier request's prompt is not looked at (nothing of it was
        rewritten): most requests of an agent loop cost a hash of their messages, no render.
        ``hashes``: :func:`request_hashes` of ``r`` if computed ahead."""
        self.span = None
        if r.kind != "chat" or (hashes is None and not r.messages):  # hashes are made of messages: there are some
            return None
        hashes = hashes if hashes is not None else request_hashes(r)
        prev = self.conversations.continues(hashes) if missed else None
        self.conversations.add(hashes, r.where, prompt_tokens)
        if prev is None or cached >= hittable_tokens(prev[2], self.block_size):
            return None
        try:
            found = self._rewritten(r, text, prev[0])
        except RequestRefused:
            return None
        if found is None:
            return None
        j, then, before = found
        role = str(r.messages[j].get("role", ""))
        ch = change(then, text, self._tokens)
        shape_key = (role, ch.what, ch.think)
        f = self.by_shape.get(shape_key)
        if f is None:
            f = Finding(KIND, j, role, 0, f"{ch.what}, {ch.tokens} tokens", first_block, template=True,
                        change=ch.describe(role, j))
            self.by_shape[shape_key] = f
            self.findings[f.key] = f
            self.remedies[f.key] = self._remedies(r, j)
        f.requests_affected += 1
        at = common_prefix(then, text)
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        self.span = (f.key, line_start, line_end if line_end >= 0 else len(text))
        held = min(len(self._ids(before)), hittable) // self.block_size * self.block_size
        f.tokens_missed += max(0, held - cached)
        return dataclasses.replace(f, message_index=j)  # this request's own message, for its miss reason

    def _render(self, r: LogRequest, upto: int, generation_prompt: bool, kwargs: dict[str, Any] | None = None) -> str:
        return render_as(self.renderer, r, r.messages[:upto], generation_prompt=generation_prompt, kwargs=kwargs)

    def _rewritten(self, r: LogRequest, now: str, k: int) -> tuple[int, str, str] | None:
        """(j, then, the earlier request's text) for the turn ``j`` of ``r`` rendered differently
        as history, or None."""
        n = len(r.messages)
        before = self._render(r, k, True)
        d = common_prefix(before, now)
        if d >= len(before):
            j = k  # the earlier request's text is all shared: the turn it generated is the candidate
            if j >= n - 1 or r.messages[j].get("role") != "assistant":
                return None
        else:
            # the turn that parted: the first message j whose rendering as the last message (then)
            # the earlier request still starts with and that reaches past the parting point d;
            # scanned down from the earlier request's last message until a prefix ends before d
            found: tuple[int, str] | None = None
            for j in range(k - 1, -1, -1):
                then = self._render(r, j + 1, False)
                if not before.startswith(then):
                    continue
                if len(then) <= d:
                    break
                found = (j, then)
            if found is None:
                return None
            j, then = found
            return (j, then, before) if not now.startswith(then) else None
        then = self._render(r, j + 1, False)
        if now.startswith(then):
            return None
        return j, then, before

    def _remedies(self, r: LogRequest, j: int) -> list[Remedy]:
        """The remedies the template allows for the finding first seen at ``r``'s turn ``j``:
        the two client-side ones when the turns carry reasoning, and each template switch (and
        value) that makes this request's text start with the turn as it was rendered then."""
        out = [DROP, FIELD] if has_reasoning(r.messages) else []
        if self._switches is None:
            self._switches = template_switches(self.renderer)
        for name in self._switches:
            for value in (True, False):
                kw = {name: value}
                try:
                    if render_as(self.renderer, r, r.messages, generation_prompt=r.add_generation_prompt,
                                 kwargs=kw).startswith(self._render(r, j + 1, False, kw)):
                        out.append(Remedy("template_switch", name, value))
                        break
                except RequestRefused:
                    continue
        return out

    def _ids(self, text: str) -> list[int]:
        return self.renderer.encode(text, add_special_tokens=False)

    def _tokens(self, span: str) -> int:
        return len(self._ids(span))
