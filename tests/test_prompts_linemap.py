"""The line map of a rendered prompt (``busters.line_map``, built with ``str.split`` and numpy)
equals the per-line Python loop it replaced (``tests/prompts_reference.line_map_reference``) on
tricky texts and on random ones; its look-ups (by place, by role, the message ends) agree with
the lines it lists; and string-only messages hash as their JSON does."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from kvplan.models.prompts.busters import Finder, Finding, LineInfo, LineMap, apply_fix, line_hashes, line_map
from kvplan.models.prompts.history import message_hashes
from tests.prompts_reference import line_map_reference

TRICKY = [
    # (text, contents, tool names)
    ("", [("user", "hi")], ()),  # nothing found in an empty text
    ("\n", [], ()),
    ("<s>\nA\n\nB\n", [("system", "A\n\nB")], ()),  # an empty line inside a message
    ("<s>\nA\n\n\nB", [("system", "A\n")], ()),  # a message ending where empty lines start
    ("<|user|>\n  Q  \n<|end|>", [("user", "  Q  \n\n")], ()),  # found only stripped
    ("<|user|>\nnot here\n", [("user", "missing")], ()),  # content not found
    ("x\n\n\ny", [("user", ""), ("assistant", None), ("user", "y")], ()),  # consecutive empty messages
    ("<s>\nÉté 日本語 ü\nnext\n", [("system", "Été 日本語 ü\nnext")], ()),  # non-ASCII offsets
    ("<s>\nline\n", [("system", "line\n")], ()),  # trailing newline, in the content
    ("<s>\nline\n", [("system", "line")], ()),  # trailing newline after it
    ('Tools:\n{"name": "f1"}\n{"name": "g"}\nsys\n', [("system", "sys")], ("f1", "g", "")),  # tool lines
    ("A<|user|>B\nC", [("system", "A"), ("user", "B\nC")], ()),  # two messages on one line
    ("ab\nab\nab", [("user", "ab"), ("user", "ab"), ("user", "ab")], ()),  # the same text thrice, in order
    ("\n\n", [("user", "\n")], ()),  # content of newlines only
    ("q\n\n", [("user", "q\n\n")], ()),  # ending in empty lines
]


def _tuples(lm: LineMap) -> list[tuple]:
    return [dataclasses.astuple(li) for li in lm]


@pytest.mark.parametrize("text,contents,names", TRICKY)
def test_line_map_equals_the_per_line_reference_on_tricky_texts(text, contents, names):
    lm = line_map(text, contents, names)
    want = line_map_reference(text, contents, names)
    assert _tuples(lm) == want
    assert [dataclasses.astuple(lm[i]) for i in range(-len(lm), len(lm))] == want + want
    assert [text[s:e] for s, e, *_ in want] == text.split("\n") == lm.texts(text)


def test_line_map_by_hand():
    """Expected lines written out by hand (not from either implementation)."""
    text = '<s>Tools:\n{"name": "f"}\nÉté\n\nB\n<|user|>\nQ'
    got = _tuples(line_map(text, [("system", "Été\n\nB"), ("user", "Q")], ["f"]))
    assert got == [(0, 9, 0, "template", 1, None), (10, 23, 0, "tools", 2, None), (24, 27, 0, "system", 1, 30),
                   (28, 28, 0, "system", 2, 30), (29, 30, 0, "system", 3, 30), (31, 39, 1, "template", 6, None),
                   (40, 41, 1, "user", 1, 41)]
    # an empty line right where a message ends is the template's, tied to that message
    assert _tuples(line_map("A\n\nB", [("system", "A\n")])) == [
        (0, 1, 0, "system", 1, 2), (2, 2, 0, "template", 2, None), (3, 4, None, "template", 3, None)]


def test_line_map_equals_the_reference_on_random_texts():
    rng = random.Random(35)
    alphabet = ["a", "b", "\n", "\n", " ", "é", "日", "x\n", '"t"', "\n\n", "\t"]

    def s(lo: int, hi: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))
    for _ in range(3000):
        msgs = [s(0, 6) if rng.random() > 0.15 else rng.choice([None, ""]) for _ in range(rng.randint(0, 4))]
        parts = []
        for m in msgs:
            parts.append(s(0, 3))
            if m and rng.random() > 0.1:
                parts.append(m if rng.random() > 0.2 else m.strip())
        parts.append(s(0, 3))
        text = "".join(parts)
        contents = [(rng.choice(["system", "user", "assistant", "tool"]), m) for m in msgs]
        names = rng.choice([(), ("t",), ("t", "b"), ("",)])
        assert _tuples(line_map(text, contents, names)) == line_map_reference(text, contents, names), (text, contents)


def test_the_map_finds_lines_as_a_scan_of_its_lines_does():
    text = '<s>\n{"name": "f"}\n{"name": "g"}\nA\nB\n<|user|>\nQ\n<|assistant|>\n'
    lm = line_map(text, [("system", "A\nB"), ("user", "Q")], ["f", "g"])
    lines = list(lm)
    for li in lines:
        assert lm.line_at(li.place) == li
    assert lm.line_at((0, "system", 3)) is None and lm.line_at((0, "nobody", 1)) is None
    assert lm.with_role("tools") == [i for i, li in enumerate(lines) if li.role == "tools"] == [1, 2]
    assert lm.message_ends() == sorted({li.content_end for li in lines if li.content_end is not None}) == [
        text.index("B") + 1, text.index("Q") + 1]
    assert lm[1:3] == lines[1:3]
    with pytest.raises(IndexError):
        lm[len(lines)]
    again = LineMap.of(lines)  # a list of lines as a map: the same lines, the same look-ups
    assert list(again) == lines and again.texts(text) == lm.texts(text) and again.message_ends() == lm.message_ends()


def test_a_list_of_lines_and_its_map_fix_and_find_the_same():
    """apply_fix and Finder take a map or a plain list of LineInfo and answer the same."""
    base = "<s>\nYou are agent 7.\nNow: {t}\n" + "\n".join(f"rule {i} about caching" for i in range(12))
    texts = [base.format(t=f"2026-12-0{1 + i % 8}T10:0{i}:00Z") + f"\n<|user|>\nQ{i}" for i in range(8)]
    maps = [line_map(t, [("system", t[4:t.index("\n<|user|>")]), ("user", f"Q{i}")]) for i, t in enumerate(texts)]
    a, b = Finder(), Finder()
    for i, (t, lm) in enumerate(zip(texts, maps, strict=True)):
        fa = a.observe(t, lm, 0, True, f"x:{i}")
        fb = b.observe(t, list(lm), 0, True, f"x:{i}")
        assert fa == fb
    (f,) = a.findings.values()
    assert (f.kind, f.place, f.requests_affected) == ("iso_timestamp", (0, "system", 2), 7)
    fix = Finding(f.kind, f.message_index, f.role, f.line, f.example, 0)
    for t, lm in zip(texts, maps, strict=True):
        fixed = apply_fix(t, lm, [fix])
        assert fixed == apply_fix(t, list(lm), [fix])
        stamp = t.split("\n")[2]
        assert fixed == t.replace(stamp + "\n", "") + "\n" + stamp  # moved to the end of the last message


@pytest.mark.parametrize("a,b", [
    ({"role": "user", "content": "hi"}, {"content": "hi", "role": "user"}),  # key order
    ({"role": "user", "content": "1"}, {"role": "user", "content": 1}),  # a string is not a number
    ({"role": "user", "content": None}, {"role": "user", "content": "None"}),
    ({"role": "user", "content": "hi"}, {"role": "user", "content": "hi", "name": "x"}),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}]},
     {"tool_calls": [{"function": {"arguments": "{}", "name": "f"}, "id": "1"}], "content": "", "role": "assistant"}),
    ({"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "user", "content": "hi"}),
])
def test_message_hashes_are_equal_exactly_where_the_sorted_json_is(a, b):
    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    root = ([{"type": "function"}], {}, None, "m")
    assert (message_hashes([a], root) == message_hashes([b], root)) == same
    assert (message_hashes([a, a], root)[1] == message_hashes([b, a], root)[1]) == same


@pytest.mark.parametrize("a,b", [
    ({"required": True}, {"required": 1}),  # equal in Python, not in JSON
    ({"x": 1.0}, {"x": 1}),
    ({"type": "object", "x": "y"}, {"x": "y", "type": "object"}),  # key order: the same JSON sorted
    ({"x": [1, 2]}, {"x": [2, 1]}),
])
def test_a_request_is_rooted_in_its_tools_sorted_json_whatever_was_rooted_before(a, b):
    """``request_hashes`` remembers recent roots by their pickle: a root equal in Python but
    not in JSON is told apart, one whose keys come in another order is not, in either order seen."""
    from kvplan.collectors.requests.history import request_hashes
    from kvplan.collectors.requests.read import LogRequest

    same = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    msgs = [{"role": "user", "content": "hi"}]
    reqs = [LogRequest(source="log", line=i, kind="chat", messages=msgs, tools=[t]) for i, t in enumerate((a, b, a))]
    got = [request_hashes(r) for r in reqs]
    assert got == [message_hashes(msgs, (r.tools, r.chat_template_kwargs, r.documents, r.model)) for r in reqs]
    assert (got[0] == got[1]) == same and got[0] == got[2]


def test_line_info_is_what_the_map_lists():
    lm = line_map("<s>\nA", [("system", "A")])
    assert lm[1] == LineInfo(4, 5, 0, "system", 1, 5) and lm[0] == LineInfo(0, 3, 0, "template", 1)


def test_a_map_equals_its_lines_and_crosses_processes_whole():
    import pickle

    text = "<s>\nÉté\n\nB\n<|user|>\nQ"
    lm = line_map(text, [("system", "Été\n\nB"), ("user", "Q")])
    assert lm == list(lm) == line_map(text, [("system", "Été\n\nB"), ("user", "Q")])
    assert lm != line_map(text, [("system", "Été\n\nB")]) and lm != list(lm)[:-1]
    back = pickle.loads(pickle.dumps(lm))
    assert back == lm and back.texts(text) == text.split("\n") and back.message_ends() == lm.message_ends()


def test_the_finder_holds_only_its_first_lines_of_a_long_map():
    text = "\n".join(f"line {i}" for i in range(50))
    f = Finder(window=4, max_lines=5)
    lm = line_map(text, [("system", text)])
    f.observe(text, lm, 0, True)
    (seen,) = f.recent.values()
    assert list(seen.infos) == list(lm)[:5] and [seen.text(k) for k in range(5)] == text.split("\n")[:5]
    assert seen.head == "\n".join(text.split("\n")[:5])  # its first lines' text, not the whole text
    assert seen.infos.starts.base is None  # a copy, not a view holding the whole map


def test_a_line_votes_its_length_unless_it_is_blank_in_any_script():
    """A line's size is its length + 1 and its vote the same, but 0 for a line of nothing but
    white space (``str.strip``'s: tabs, vertical tabs, no-break and ideographic spaces), the
    same whether the finder hashes the lines or is given ``line_hashes`` made ahead."""
    lines = ["<system>", "", "  ", "\t\x0b", "\u3000\u00a0", "a", " a ", "é", "\x1c", "\u200b", "end"]
    text = "\n".join(lines)
    lm = line_map(text, [("system", text)])
    blank = [i for i, t in enumerate(lines) if not t.strip()]
    assert line_hashes(text, lm)[2] == blank == [1, 2, 3, 4, 8]  # U+200B (zero width) is no white space
    for hashed in (None, line_hashes(text, lm)):
        f = Finder()
        f.observe(text, lm, 0, True, hashed=hashed)
        (seen,) = f.recent.values()
        assert seen.sizes == [len(t) + 1 for t in lines] and seen.chars == len(text) + 1
        assert seen.weights == [len(t) + 1 if t.strip() else 0 for t in lines]
