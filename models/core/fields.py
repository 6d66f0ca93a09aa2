"""Settings as data: dataclass fields that carry their unit, help and bounds.

``PriceBook``, ``PlanningInputs`` and the deployment facts declare each field with ``spec``;
the dashboard form, the validation (``check``/``from_dict``), ``kvplan config check`` and the
README table all derive from that one declaration (``specs``). Errors are ``KvplanError``
naming ``Class.field``.
"""

from __future__ import annotations

import math
from dataclasses import field, fields
from typing import Any, NamedTuple, TypeVar

from .errors import KvplanError

T = TypeVar("T")

OPTIONAL_KINDS = ("optional_int", "optional_float")
"""Kinds whose value may be None (not given)."""


class FieldSpec(NamedTuple):
    """How to show, edit and validate one field."""

    name: str
    """The dataclass field's name (the key in forms, TOML tables and saved JSON)."""
    unit: str
    """Unit shown next to the value."""
    help: str
    """One-sentence explanation."""
    kind: str
    """'str', 'choice', 'float', 'int', 'optional_int' or 'optional_float' (None allowed)."""
    default: Any
    """The field's default value."""
    minimum: float | None = None
    """Smallest allowed value (None: no bound)."""
    maximum: float | None = None
    """Largest allowed value (None: no bound)."""
    choices: tuple[str, ...] = ()
    """Allowed values of a 'choice' field."""
    exclusive_minimum: bool = False
    """The minimum itself is not allowed (e.g. a share that must be > 0)."""

    def bounds_text(self) -> str:
        lo = "" if self.minimum is None else ("> " if self.exclusive_minimum else ">= ") + f"{self.minimum:g}"
        hi = "" if self.maximum is None else f"<= {self.maximum:g}"
        return " and ".join(x for x in (lo, hi) if x)


def spec(default: Any, unit: str, help: str, kind: str = "float", minimum: float | None = 0.0,
         maximum: float | None = None, choices: tuple[str, ...] = (), exclusive_minimum: bool = False) -> Any:
    """A dataclass field carrying its documentation (unit, help, bounds) as metadata."""
    meta = {"unit": unit, "help": " ".join(help.split()), "kind": kind, "minimum": minimum, "maximum": maximum,
            "choices": choices, "exclusive_minimum": exclusive_minimum}
    return field(default=default, metadata=meta)


def specs(cls: type[Any]) -> tuple[FieldSpec, ...]:
    """One ``FieldSpec`` per field of a dataclass declared with ``spec``."""
    return tuple(FieldSpec(name=f.name, default=f.default, **f.metadata) for f in fields(cls))


def coerce(owner: str, s: FieldSpec, value: Any) -> Any:
    """Accept what a form, a TOML file or the database hands back (an int where a float is
    expected, a float with no fraction where an int is expected); reject everything else."""
    where = f"{owner}.{s.name}"
    if s.kind in ("str", "choice"):
        if not isinstance(value, str):
            raise KvplanError(f"expected text, got {value!r}", source=where)
        return value
    if value is None and s.kind in OPTIONAL_KINDS:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise KvplanError(f"expected a finite number ({s.unit}), got {value!r}", source=where)
    if s.kind in ("int", "optional_int"):
        if float(value) != int(value):
            raise KvplanError(f"expected a whole number, got {value!r}", source=where)
        return int(value)
    return float(value)


def check(owner: str, s: FieldSpec, value: Any) -> None:
    """Raise ``KvplanError`` naming ``owner.field`` when ``value`` breaks the field's spec."""
    where = f"{owner}.{s.name}"
    if s.kind == "choice":
        if value not in s.choices:
            raise KvplanError(f"must be one of {', '.join(s.choices)}; got {value!r}", source=where)
        return
    if s.kind == "str":
        if not isinstance(value, str):
            raise KvplanError(f"expected text, got {value!r}", source=where)
        return
    if value is None and s.kind in OPTIONAL_KINDS:
        return
    coerce(owner, s, value)  # type and finiteness
    low = s.minimum is not None and (value <= s.minimum if s.exclusive_minimum else value < s.minimum)
    high = s.maximum is not None and value > s.maximum
    if low or high:
        raise KvplanError(f"must be {s.bounds_text()} {s.unit}; got {value!r}".replace("  ", " "), source=where)


def check_all(obj: Any) -> None:
    """``check`` every field of a dataclass instance (call from ``__post_init__``)."""
    for s in specs(type(obj)):
        check(type(obj).__name__, s, getattr(obj, s.name))


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build ``cls`` from a dict (a form, TOML table or saved JSON); missing keys take defaults.
    ``KvplanError`` names the field for unknown keys, wrong types or out-of-range values."""
    known = {s.name: s for s in specs(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise KvplanError(f"unknown field (known: {', '.join(known)})", source=f"{cls.__name__}.{unknown[0]}")
    return cls(**{name: coerce(cls.__name__, known[name], v) for name, v in data.items()})


NAME_MAX = 200
_UNSEEN = ("Cc", "Cf", "Zl", "Zp", "Cs")
"""Unicode categories refused in names: control and format characters (the bidi overrides
U+202A-U+202E and isolates U+2066-U+2069 reorder what a terminal or a report shows; zero-width
characters make two names look alike), line and paragraph separators, lone surrogates."""


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a usable deployment or target name (None: it is): non-empty, no
    leading or trailing blanks, at most 200 characters, no control, format (bidi, zero-width) or
    separator character."""
    import unicodedata

    if not isinstance(name, str) or not name.strip():
        return "it is empty"
    if name != name.strip():
        return "it has leading or trailing blanks"
    if len(name) > NAME_MAX:
        return f"it is longer than {NAME_MAX} characters"
    bad = next((c for c in name if unicodedata.category(c) in _UNSEEN), None)
    if bad is not None:
        return (f"it holds U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')}), a control or "
                "invisible formatting character")
    return None


def scenario(obj: T, **changes: Any) -> T:
    """A copy of a frozen settings dataclass with ``changes`` applied and NOT checked against the
    fields' bounds: for the what-ifs a plan computes itself (the GPU price +-20 %, growth + 5
    points, overhead x 1.5). The bounds are for what a user enters; a saved price of $1,000/GPU-hour
    (the bound) must still give a plan whose +25 % scenario is $1,250."""
    import copy

    out = copy.copy(obj)
    for name, value in changes.items():
        if name not in {s.name for s in specs(type(obj))}:
            raise AttributeError(f"{type(obj).__name__} has no field {name!r}")
        object.__setattr__(out, name, value)
    return out


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain dict (JSON-serialisable), one key per field."""
    return {s.name: getattr(obj, s.name) for s in specs(type(obj))}
