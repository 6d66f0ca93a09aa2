"""History the chat template rewrites: a turn rendered one way while it is the conversation's last
and another way once it is history, so each later request's cached prefix ends at it.

The case users hit (QwenLM/Qwen3#1826): a Qwen3-style template renders an assistant turn's
``<think>`` reasoning only after the last user query. In an agent loop the model generates turn
``j`` continuing request ``M[:j]``; vLLM caches that request's prompt (and the blocks the turn
fills). Each later request of the conversation sends the turn back as history: while no new user
query follows it, it renders as it did when it was generated (its reasoning kept); once a new user
query follows, it renders without it, and the prefix the cache holds ends there.

How the check finds it (``collectors.requests.history`` does the rendering; this module is the
pure part):

* **Same conversation**: a request whose messages start with an earlier request's messages
  (:func:`message_hashes`: chained hashes of its messages, tools and template kwargs;
  :class:`Conversations` keeps the recent ones, bounded). Nothing else ties requests together.
* **Then against now**: for the turn ``j`` where this request's text parts from the earlier
  request's (or the turn the earlier request generated, the first message after them), *then*
  is the conversation rendered up to and including ``j`` with ``j`` as its last message and no
  generation prompt (as vLLM would render the turn it just generated); *now* is the
  later request's own rendering, where ``j`` is history. When *now* does not start with *then*,
  the turn was rewritten: :func:`change` names what changed, in shape only (a think block
  dropped, text added, text rewritten, with its size in tokens), never the text.
* **Remedies** (:class:`Remedy`), each a rewrite of every request replayed in the check's second
  pass, each with its own rate: ``drop_reasoning`` (the client strips the think block from the
  content it sends back: :func:`rewrite`), ``reasoning_field`` (the client sends the reasoning
  apart, in the message's ``reasoning`` field: vLLM hands it to the template as ``reasoning`` and
  ``reasoning_content``, and drops a ``reasoning_content`` field a client sends; a Qwen3-style
  template still renders it only after the last query, so this remedy gains nothing there), and
  ``template_switch`` (a ``chat_template_kwargs`` value the template reads, such as
  ``preserve_thinking``, found among its undeclared variables and kept only when it makes *now*
  start with *then* on the request the finding was found in).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
MAX_SCAN = 20_000
"""Characters of a rewritten turn :func:`change` compares (a longer turn is called rewritten)."""


@dataclass(frozen=True)
class Remedy:
    """One way to stop the template rewriting history: ``name`` is ``drop_reasoning``,
    ``reasoning_field`` or ``template_switch`` (then ``switch``=``value`` is the template kwarg)."""

    name: str
    """``drop_reasoning``, ``reasoning_field`` or ``template_switch``."""
    switch: str | None = None
    """The ``chat_template_kwargs`` key (``template_switch`` only)."""
    value: Any = None
    """Its value (``template_switch`` only)."""

    @property
    def how(self) -> str:
        if self.name == "drop_reasoning":
            return "the client drops the <think> block from the assistant content it sends back"
        if self.name == "reasoning_field":
            return ("the client sends the reasoning apart, in the assistant message's `reasoning` field (vLLM "
                    "passes it to the template as `reasoning_content`; a `reasoning_content` field is dropped by vLLM)")
        return f"the requests set chat_template_kwargs {{{json.dumps(self.switch)}: {json.dumps(self.value)}}}"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"remedy": self.name, "how": self.how}
        if self.switch is not None:
            out["chat_template_kwargs"] = {self.switch: self.value}
        return out


DROP = Remedy("drop_reasoning")
FIELD = Remedy("reasoning_field")


def split_reasoning(content: str) -> tuple[str, str] | None:
    """(reasoning, the rest) of an assistant content that holds a think block, split as Qwen3's
    template splits it (before the last ``</think>``, after the last ``<think>``); None without one."""
    if THINK_CLOSE not in content:
        return None
    head, _, _ = content.rpartition(THINK_CLOSE)
    reasoning = head.rstrip("\n").split(THINK_OPEN)[-1].lstrip("\n")
    return reasoning, content.split(THINK_CLOSE)[-1].lstrip("\n")


def rewrite(messages: Sequence[dict[str, Any]], remedy: Remedy) -> list[dict[str, Any]] | None:
    """The messages a client applying ``remedy`` sends (None when it changes nothing):
    ``drop_reasoning`` strips each assistant turn's think block from its content and its
    ``reasoning`` / ``reasoning_content`` fields; ``reasoning_field`` moves a think block from the
    content to the turn's ``reasoning`` field. A template switch rewrites no message (its kwarg
    is set by the caller)."""
    if remedy.name not in (DROP.name, FIELD.name):
        return None
    out: list[dict[str, Any]] = []
    changed = False
    for m in messages:
        if m.get("role") != "assistant":
            out.append(m)
            continue
        c = m.get("content")
        split = split_reasoning(c) if isinstance(c, str) else None
        fields = [k for k in ("reasoning", "reasoning_content") if k in m]
        if split is None and not (remedy == DROP and fields):
            out.append(m)
            continue
        changed = True
        if remedy == DROP:
            m = {k: v for k, v in m.items() if k not in fields}
        if split is not None:
            reasoning, rest = split
            m = {**m, "content": rest}
            if remedy == FIELD and reasoning:
                m["reasoning"] = reasoning
        out.append(m)
    return out if changed else None


def has_reasoning(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether an assistant turn carries reasoning (a think block in its content, or a field)."""
    return any(m.get("role") == "assistant" and (
        (isinstance(m.get("content"), str) and THINK_CLOSE in m["content"])
        or m.get("reasoning") or m.get("reasoning_content")) for m in messages)


def root_hash(root: object) -> int:
    """What :func:`message_hashes` chains from: the hash of ``root``'s sorted JSON."""
    return hash(json.dumps(root, sort_keys=True, default=str))


def message_hashes(messages: Sequence[dict[str, Any]], root: object = None, *, rooted: int | None = None) -> list[int]:
    """Chained hashes of a request's first 1, 2, ... messages (``root``: what else makes two
    conversations differ, e.g. the tools and template kwargs; ``rooted``: its :func:`root_hash`,
    if known): equal when the leading messages are."""
    out: list[int] = []
    h = root_hash(root) if rooted is None else rooted
    for m in messages:
        h = hash((h, _message_key(m)))
        out.append(h)
    return out


def _message_key(m: dict[str, Any]) -> object:
    """What a message's hash is taken of: its sorted JSON, or (a message of strings only, the
    common one: no tool calls, no content parts) its sorted items, equal exactly where the JSON
    is (a JSON string is a str and only a str) and cheaper."""
    if all(type(v) is str for v in m.values()):
        return tuple(sorted(m.items()))
    return json.dumps(m, sort_keys=True, default=str)


class Conversations:
    """The recent requests' message lists, by their chained hash (:func:`message_hashes`):
    which earlier request a new one continues. Bounded: past ``limit`` requests the oldest are
    forgotten (a conversation idle that long is cold anyway)."""

    def __init__(self, limit: int = 100_000):
        self.limit = limit
        self.seen: OrderedDict[int, tuple[str, int]] = OrderedDict()

    def continues(self, hashes: Sequence[int]) -> tuple[int, str, int] | None:
        """(k, label, prompt tokens) of the longest earlier request whose messages are this one's
        first k (k below its own count), or None."""
        for k in range(len(hashes) - 1, 0, -1):
            got = self.seen.get(hashes[k - 1])
            if got is not None:
                return k, got[0], got[1]
        return None

    def add(self, hashes: Sequence[int], label: str, prompt_tokens: int) -> None:
        if not hashes:
            return
        self.seen[hashes[-1]] = (label, prompt_tokens)
        self.seen.move_to_end(hashes[-1])
        while len(self.seen) > self.limit:
            self.seen.popitem(last=False)


@dataclass(frozen=True)
class Change:
    """What the template changed in a turn rendered as history, in shape only."""

    what: str
    """``dropped``, ``added`` or ``rewritten``."""
    think: bool
    """Whether the text that went (or came) holds a think block's tags."""
    tokens: int
    """Its size in tokens (about: tokenized on its own)."""

    def describe(self, role: str, index: int) -> str:
        thing = "a think block" if self.think else "text"
        return f"{thing} of about {self.tokens} tokens {self.what} from {role} turn {index} once it is history"


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on slices: C-speed comparisons
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def change(then: str, now: str, tokens: Callable[[str], int]) -> Change:
    """What differs between ``then`` (the conversation up to a turn, the turn last) and ``now``
    (a later request where it is history), from their first difference: text of ``then`` that
    ``now`` skips (``dropped``), text ``now`` has before the rest of ``then`` (``added``), else
    ``rewritten``. ``tokens`` counts a span's tokens (only its count leaves this function)."""
    d = common_prefix(then, now)
    rest_then, rest_now = then[d:d + MAX_SCAN], now[d:d + MAX_SCAN + len(then) - d]
    if rest_then and len(then) - d <= MAX_SCAN:
        first = rest_now[:1]
        e = rest_then.find(first, 1) if first else len(rest_then)
        while 0 < e:
            if rest_now.startswith(rest_then[e:]):
                gone = rest_then[:e]
                return Change("dropped", THINK_OPEN in gone or THINK_CLOSE in gone, tokens(gone))
            e = rest_then.find(first, e + 1)
        a = rest_now.find(rest_then[:1], 1)
        while 0 < a:
            if rest_now.startswith(rest_then, a):
                came = rest_now[:a]
                return Change("added", THINK_OPEN in came or THINK_CLOSE in came, tokens(came))
            a = rest_now.find(rest_then[:1], a + 1)
    gone = then[d:]
    return Change("rewritten", THINK_OPEN in gone or THINK_CLOSE in gone, tokens(gone))
