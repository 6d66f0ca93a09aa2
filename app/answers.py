"""Typed answers as JSON: the views return frozen dataclasses; ``--json`` (and only it) turns
them into plain dicts through ``Answer.to_dict``.

``Answer.to_dict`` writes every field under its own name, recursively (nested answers, tuples as
lists, enums as their values, model objects through their own ``to_dict``), so a field added to
an answer appears in its JSON without further code. A field named in ``OMIT_IF_NONE`` is left out
while it is None (a key the JSON has only in some cases); ``flat`` merges a nested answer's keys
into its parent's (``Answer.FLATTEN``).
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum
from typing import Any, ClassVar


def plain(v: Any) -> Any:
    """``v`` as JSON-able Python: dicts, lists, str, numbers, bool, None."""
    if isinstance(v, Enum):
        return v.value
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


class Answer:
    """Mixin of the views' frozen dataclasses: ``to_dict`` for ``--json``."""

    OMIT_IF_NONE: ClassVar[tuple[str, ...]] = ()
    """Fields left out of the dict while None."""
    FLATTEN: ClassVar[tuple[str, ...]] = ()
    """Fields (nested answers) whose keys join the parent's dict; nothing while None."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if f.name in self.FLATTEN:
                out.update(plain(v) if v is not None else {})
            elif v is not None or f.name not in self.OMIT_IF_NONE:
                out[f.name] = plain(v)
        return out
