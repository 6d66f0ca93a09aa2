"""Every option of every ``kvplan`` command, given a bad value, ends the command cleanly: exit
code 2, a message naming the option, no traceback. The list of options is read off the
registered commands' signatures, so a new option is checked the day it is added, and a numeric
option without declared bounds fails here.

Bad values are refused while the command line is parsed, before the command does anything
(no database is opened, no server is started), which is what makes walking all of them safe.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app, config_app, prompts_app, stack_app
from kvplan.app.cli.common import finite, positive


def commands() -> Iterator[tuple[list[str], Callable[..., Any]]]:
    for prefix, typer_app in (([], app), (["config"], config_app), (["stack"], stack_app), (["prompts"], prompts_app)):
        for c in typer_app.registered_commands:
            fn = inspect.unwrap(c.callback)
            yield prefix + [c.name or fn.__name__.replace("_", "-")], fn


def options(fn: Callable[..., Any]) -> Iterator[tuple[str, Any, Any, Any]]:
    """(flag, base type, typer OptionInfo or ArgumentInfo, default) per parameter."""
    sig = inspect.signature(fn)
    for name, hint in typing.get_type_hints(fn, include_extras=True).items():
        if name == "return":
            continue
        base, info = typing.get_args(hint)[:2] if typing.get_origin(hint) is typing.Annotated else (hint, None)
        # inside Annotated, Option("--flag") holds its first name in ``default`` (typer.utils moves
        # it to param_decls when it reads the signature)
        first = (info.default,) if isinstance(getattr(info, "default", None), str) else ()
        decls = [d for d in first + tuple(getattr(info, "param_decls", None) or ()) if d.startswith("--")]
        flag = decls[0] if decls else "--" + name.rstrip("_").replace("_", "-")
        yield flag, base, info, sig.parameters[name].default


def _core(t: Any) -> Any:
    """``int | None`` -> int; ``Literal[...] | None`` -> the Literal."""
    args = [a for a in typing.get_args(t) if a is not type(None)]
    return args[0] if typing.get_origin(t) in (typing.Union, __import__("types").UnionType) and \
        len(args) == 1 else t


def required_args(fn: Callable[..., Any]) -> list[str]:
    """A plausible value for every required option and argument, so that parsing reaches the
    option under test."""
    out: list[str] = []
    for flag, base, info, default in options(fn):
        if default is not inspect.Parameter.empty:
            continue
        value = "/nonexistent/x" if _core(base) in (Path, list[Path]) else "x"
        out += [value] if type(info).__name__ == "ArgumentInfo" else [flag, value]
    return out


def bad_values(base: Any, info: Any) -> list[str]:
    t = _core(base)
    if t is int:
        vals = ["not-a-number"]
        if info.min is not None:
            vals.append(str(info.min - 1))
        if info.max is not None:
            vals.append(str(info.max + 1))
        return vals
    if t is float:
        vals = ["nan", "inf", "-inf", "not-a-number"]
        if info.max is not None:
            vals.append(repr(info.max * 10 + 1))
        if info.callback is positive:
            vals += ["0", "-1"]
        return vals
    if typing.get_origin(t) is Literal:
        return ["no-such-choice"]
    return []


CASES = [(cmd, flag, value, fn) for cmd, fn in commands() for flag, base, info, _ in options(fn)
         if type(info).__name__ == "OptionInfo" for value in bad_values(base, info)]


def test_the_walk_finds_the_options_that_matter():
    """Not an empty parametrisation: the options the issue named are in it."""
    seen = {(" ".join(c), f, v) for c, f, v, _ in CASES}
    assert ("pilot", "--users", "0") in seen
    assert ("pilot", "--turns", "0") in seen
    assert ("whatif", "--ranks", str(4096 + 1)) in seen
    assert ("whatif", "--configured-gb", "nan") in seen and ("whatif", "--seconds-per-token", "-1") in seen
    assert ("plan", "--gpus", "100001") in seen and ("pilot", "--scenario", "no-such-choice") in seen
    assert ("prompts check", "--gpu-blocks", "1") in seen and ("prompts check", "--block-size", "0") in seen
    assert len(CASES) > 80


def test_every_numeric_option_declares_its_range():
    """An int option has a minimum; a float option refuses nan/inf (``finite``/``positive``)."""
    missing = []
    for cmd, fn in commands():
        for flag, base, info, _ in options(fn):
            t = _core(base)
            if type(info).__name__ != "OptionInfo":
                continue
            if t is int and info.min is None:
                missing.append(f"{' '.join(cmd)} {flag}: no min")
            if t is float and info.callback not in (finite, positive):
                missing.append(f"{' '.join(cmd)} {flag}: no finite/positive check")
    assert missing == []


@pytest.mark.parametrize(("cmd", "flag", "value", "fn"), CASES,
                         ids=[f"{' '.join(c)} {f} {v}" for c, f, v, _ in CASES])
def test_a_bad_value_exits_2_naming_the_option(cmd, flag, value, fn, tmp_path):
    args = cmd + required_args(fn) + [flag, value]
    r = CliRunner().invoke(app, args, env={"KVPLAN_DB": str(tmp_path / "k.duckdb"), "COLUMNS": "200"})
    text = r.output
    assert r.exit_code == 2, (args, text)
    assert isinstance(r.exception, SystemExit), (args, r.exception)
    assert "Traceback" not in text
    assert flag in text, (args, text)
    assert not (tmp_path / "k.duckdb").exists(), "refused while parsing, before opening the database"


def test_the_range_checks_themselves():
    assert finite(1.5) == 1.5 and finite(None) is None
    assert positive(2.0) == 2.0
    for bad in (math.nan, math.inf):
        with pytest.raises(Exception, match="finite"):
            finite(bad)
    with pytest.raises(Exception, match="above 0"):
        positive(0.0)


@pytest.mark.parametrize("cmd", [["stats"], ["plan"], ["ingest"]])
def test_a_bad_time_exits_2_naming_the_option(cmd, tmp_path):
    r = CliRunner().invoke(app, cmd + ["--deployment", "d", "--from", "yesterday-ish", "--to", "2026-11-02"],
                           env={"KVPLAN_DB": str(tmp_path / "k.duckdb"), "COLUMNS": "200"})
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "--from" in r.output and "Traceback" not in r.output
