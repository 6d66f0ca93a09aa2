"""``busters.Finder``'s tables and answers against direct scans of the requests it holds: its line
and prefix indexes hold exactly the newest recent holder of each line and leading run of lines
(entries leave with their request, found by bisection), its divergence is the longest run of
leading lines any recent request shares, and its votes are the same summed per holder or in one
pass; ``line_map`` finds long contents whose first characters repeat as ``str.find`` does."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kvplan.models.prompts import busters
from kvplan.models.prompts.busters import Finder, line_map
from tests.prompts_reference import line_map_reference

POOL = ["You are agent 1.", "You are agent 2.", "rule one", "rule two", "", "  ", "Now: 2026-12-0{d}T10:0{m}:00Z",
        '{"a": 1, "b": 2}', '{"b": 2, "a": 1}', "rule three", "tool list", "id 1a2b3c4d5e6f", "rule one"]


def _stream(seed: int, n: int = 300) -> list[str]:
    """Requests that share leading lines (agents, conversations), hold blank and repeated lines,
    a timestamp now and then, and lines picked from many earlier requests."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(n):
        if out and rng.random() < 0.5:
            base = rng.choice(out[-8:]).split("\n")
            cut = rng.randrange(len(base) + 1)
            lines = base[:cut] + [rng.choice(POOL) for _ in range(rng.randrange(4))]
        elif len(out) > 12 and rng.random() < 0.3:  # lines from many earlier requests
            lines = [rng.choice(rng.choice(out[-12:]).split("\n")) for _ in range(rng.randrange(6, 16))]
        else:
            lines = [rng.choice(POOL) for _ in range(rng.randrange(1, 10))]
        lines = [x.replace("{d}", str(rng.randrange(1, 9))).replace("{m}", str(rng.randrange(10))) for x in lines]
        lines.append(f"request {i % 17}")
        out.append("\n".join(lines))
    return out


def _leading(a: list[str], b: list[str]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@pytest.mark.parametrize("seed,slack", [(1, 10**6), (2, 10**6), (3, 10**6), (1, None), (2, 0), (3, 20)])
def test_the_tables_and_divergences_are_what_a_scan_of_the_recent_requests_finds(seed, slack):
    """The line index and the prefixes name, for each line and run of leading lines the window's
    requests hold, the newest of them; entries naming a request out of the window are left in
    (they read as none) until a table holds more than twice the window's lines and ``slack``,
    then both are made again from the window."""
    f = Finder(window=6, max_lines=9, slack=slack) if slack is not None else Finder(window=6, max_lines=9)
    held: dict[int, list[str]] = {}  # seq -> its first lines, the window's requests
    rebuilt = 0
    for n, text in enumerate(_stream(seed), 1):
        lines = text.split("\n")[:9]
        best = max(((_leading(lines, theirs), s) for s, theirs in held.items()), default=(0, 0))
        got = f.observe(text, line_map(text, [("user", text)]), 0, True, f"x:{n}").divergence
        if best[0] == 0:
            assert got is None
        else:
            assert got is not None and (got.shared_lines, got.earlier) == (best[0], f"x:{best[1]}")
        held[n] = lines
        held.pop(n - 6, None)
        index: dict[int, int] = {}
        prefix: dict[int, int] = {}
        for s, theirs in sorted(held.items()):  # the newest holder last
            index.update((hash(x), s) for x in theirs if x.strip())
            prefix.update((h, s) for h in f.recent[s].prefixes)
        assert list(f.recent) == sorted(held)
        live = {h: s for h, s in f.index.items() if s in f.recent}
        assert live == index and {h: s for h, s in f.prefix.items() if s in f.recent} == prefix
        if rebuilt < f.rebuilt:  # made again from the window just now: nothing else left in
            assert f.index == index and f.prefix == prefix
        rebuilt = f.rebuilt
        bound = 2 * sum(map(len, held.values())) + f.slack  # twice the lines the window holds, and the slack
        assert len(f.index) <= bound and len(f.prefix) <= bound
    # 300 requests x 9 lines held (2,700 entries) outgrow neither 4096 nor 10**6
    assert (f.rebuilt > 0) == (f.slack <= 20)


def test_prefix_hashes_are_equal_exactly_where_the_leading_lines_are():
    rng = random.Random(5)
    reqs = [[rng.choice(["a", "b", "", " "]) for _ in range(rng.randrange(0, 7))] for _ in range(300)]
    keys = {}
    for lines in reqs:
        for k, h in enumerate(busters._prefix_hashes(list(map(hash, lines))), 1):
            keys.setdefault(h, set()).add(tuple(lines[:k]))
    assert all(len(v) == 1 for v in keys.values())  # one run of lines a hash
    assert len(keys) == len({tuple(x[:k]) for x in reqs for k in range(1, len(x) + 1)})


def _observed(texts: list[str]) -> tuple[list, list]:
    f = Finder(window=10, max_lines=20)
    seen = [f.observe(t, line_map(t, [("system", t)]), 0, True, f"x:{i}") for i, t in enumerate(texts)]
    return seen, sorted((k, dataclasses.astuple(v)) for k, v in f.findings.items())


@pytest.mark.parametrize("seed", [4, 5])
def test_votes_summed_per_holder_or_in_one_pass_agree(seed, monkeypatch):
    texts = _stream(seed, 400)
    monkeypatch.setattr(busters, "_FEW_HOLDERS", 10**6)
    apart = _observed(texts)
    monkeypatch.setattr(busters, "_FEW_HOLDERS", 0)
    one_pass = _observed(texts)
    assert apart == one_pass and apart[1]  # findings were made


def test_line_map_finds_long_contents_whose_start_repeats():
    head = "You are a careful agent. "
    for text, contents in [
        ((head + "x\n") * 12 + head + "the real one\nend", [("system", head + "the real one")]),
        ((head + "x\n") * 12 + "end", [("system", head + "missing")]),  # not found: nor stripped
        ((head + "x\n") * 3 + "  " + head + "y  \n", [("user", "  " + head + "y  \n\n")]),  # found stripped
        ("\n".join([head] * 20) + "\n" + head + "Q", [("system", head + "\n" + head), ("user", head + "Q")]),
    ]:
        assert [dataclasses.astuple(li) for li in line_map(text, contents)] == line_map_reference(text, contents)


def test_tool_lines_are_found_in_any_order():
    lines = ['{"name": "c"}', '{"name": "a"}', "<|system|>", '{"name": "b", "see": "a"}', '{"name": "zz"}',
             '"a" "c"', '{"name": "b"}', 'x"', "sys"]
    text = "\n".join(lines)
    for names in (["a", "b", "c"], ["c", "a", "b"], ["b"], ["zz", "", "c"], ["x"]):
        got = [dataclasses.astuple(li) for li in line_map(text, [("system", "sys")], names)]
        assert got == line_map_reference(text, [("system", "sys")], names)
