"""The first pass's renders made ahead in a forked process (``collectors/requests/forked.py``):
the same renders as the check's own process makes, the same results, and every way the
process can fail leaves the rest to the check's process."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import kvplan.collectors.requests.forked as forked
from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.delta import Mirror
from kvplan.collectors.requests.forked import RenderAhead, can_fork
from kvplan.collectors.requests.history import request_hashes
from kvplan.collectors.requests.kept import Kept
from kvplan.collectors.requests.prepare import Preparer, conversation
from kvplan.collectors.requests.read import LIGHT, LogRequest, Skipped, SlimRequest, read_requests
from kvplan.collectors.requests.render import Renderer, RequestRefused
from kvplan.models.prompts.busters import line_hashes

FIX = Path(__file__).resolve().parent / "fixtures" / "prompts"
TEMPLATE = FIX / "chat_template.jinja"
SYSTEM = "\n".join(f"Rule {i}: answer questions about topic {i} with care." for i in range(20))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forks only where os.fork exists")


@pytest.fixture
def forks(monkeypatch):
    """The check forks here even if an earlier test of this process left a thread of its own
    running (a loopback server's): ``can_fork``'s gate is tested apart, below."""
    import kvplan.collectors.requests.check as check_mod

    monkeypatch.setattr(check_mod, "can_fork", lambda: True)


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer(FIX / "tokenizer", TEMPLATE)


def agent_log(path: Path, n: int = 70) -> Path:
    """Conversations of a few turns, each repeating the one before; a timestamp on the system
    prompt's second line (a buster: the fix pass runs), tools, non-ASCII text, and one request
    vLLM refuses (tool-call arguments that are not JSON) at request 40."""
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "description": f"Does thing {k}.",
                                               "parameters": {"type": "object", "properties": {}}}} for k in range(3)]
    convs: dict[int, list[dict]] = {}
    lines = []
    for i in range(n):
        c = i % 5
        hist = convs.setdefault(c, [])
        if hist:
            hist.append({"role": "assistant", "content": f"Reply {i}: é ü ß done."})
        hist.append({"role": "user", "content": f"Question {i} of conversation {c} about topic {i % 7}?"})
        system = f"You are agent {c}.\nNow: 2026-12-07T05:{i // 60:02d}:{i % 60:02d}.{i * 37 % 1000:03d}Z\n{SYSTEM}"
        messages = [{"role": "system", "content": system}, *hist]
        if i == 40:
            messages = [*messages[:-1], {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "tool_1", "arguments": "{not json"}}]},
                messages[-1]]
        lines.append(json.dumps({"model": "m", "max_tokens": 8, "tools": tools, "messages": messages}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_renders_ahead_are_the_renders_made_here(tmp_path, renderer):
    """Every request the forked process read is the request read here, and its text, line map
    and finders' hashes equal ``Preparer.prepare``'s and the finders' own in this process; the
    refused request comes back without a render (rendered here, refused here). No request's
    messages are unpickled here until they are used."""
    import dataclasses

    log = agent_log(tmp_path / "a.jsonl")
    prep = Preparer(renderer, CheckOptions())
    requests = list(read_requests([log], Skipped()))
    first = prep.prepare(requests[0], encode=False)  # the template's date looked for, as the check does
    assert prep.date_checked and first.text is not None
    ahead = RenderAhead([log], None, prep, 1)
    try:
        refused = []
        got_requests = list(zip(ahead.requests(Skipped()), requests[1:], strict=False))
        assert len(got_requests) == len(requests) - 1 and ahead.complete
    finally:
        ahead.close()
    ahead = RenderAhead([log], None, prep, 1)
    try:
        for q, r in zip(ahead.requests(Skipped()), requests[1:], strict=True):
            assert "_b" not in q.__dict__ or q.where == f"{log}:41"  # sent slim, the refused one whole
            got = ahead.take(q)
            assert ahead.take(r) is None  # only the request it gave
            try:
                here = Preparer(renderer, CheckOptions()).prepare(r, encode=False)
            except RequestRefused:
                refused.append(r.where)
                assert got is None
                continue
            assert got is not None and here.text is not None and here.lines is not None, r.where
            assert "_b" not in q.__dict__  # rendered there: nothing of its messages unpickled here
            assert [getattr(q, f.name) for f in dataclasses.fields(r)] == \
                   [getattr(r, f.name) for f in dataclasses.fields(r)], r.where
            assert got.request is q and got.text == here.text
            assert got.lines == here.lines and got.lines.split_of == len(here.text)
            assert isinstance(got.lines.starts, np.ndarray) and got.lines.roles == here.lines.roles
            # the finders' hashes, computed there as here (a forked process hashes as its parent)
            assert got.line_hashes == line_hashes(here.text, here.lines)
            assert got.message_hashes == request_hashes(r) and len(got.message_hashes) == len(r.messages)
        assert refused == [f"{log}:41"]
        assert ahead.taken == len(requests) - 2 and ahead.complete
    finally:
        ahead.close()
    assert ahead.proc is None and ahead.take(requests[1]) is None  # closed: nothing more taken


def per_request(log: Path, renderer: Renderer, **opts) -> tuple[list, str, int]:
    rows: list = []
    res = check([log], renderer, CheckOptions(block_size=16, gpu_blocks=64, **opts),
                on_request=lambda q, o, m: rows.append((q.where, o.prompt_tokens, o.cached, o.cached_unlimited,
                                                        m.reason)))
    return rows, json.dumps(res.as_json(), sort_keys=True), res.rendered_ahead


def dies_after(monkeypatch, n: int, counts=lambda obj: True) -> None:  # type: ignore[no-untyped-def]
    """The forked process exits (code 3, as if killed) instead of making its ``n + 1``-th send of
    what ``counts`` picks (counted in the process: its copy of the counter)."""
    real_send = forked.Connection.send
    sent = [0]

    def send(self, obj):  # type: ignore[no-untyped-def]
        if counts(obj):
            if sent[0] == n:
                os._exit(3)
            sent[0] += 1
        real_send(self, obj)
    monkeypatch.setattr(forked.Connection, "send", send)


def test_the_check_gives_the_same_results_with_its_renders_made_ahead(tmp_path, renderer, forks):
    """Per request (prompt tokens, cached, cached unlimited, miss reason), totals, findings, the
    fix pass and the notes, with renders made ahead and without; the process made all but the
    first (the date's) and the refused one."""
    log = agent_log(tmp_path / "a.jsonl")
    here, here_json, n_here = per_request(log, renderer, render_ahead=False)
    ahead, ahead_json, n_ahead = per_request(log, renderer)
    assert n_here == 0 and n_ahead == 68
    assert len(here) == 69  # one refused
    assert ahead == here and ahead_json == here_json
    assert json.loads(here_json)["findings"], "a buster found: the fix pass ran"


def test_a_renderer_that_dies_leaves_the_rest_to_the_check(tmp_path, renderer, monkeypatch, forks):
    """The process ends after two batches (as if killed): the check renders the rest itself,
    with the same results."""
    log = agent_log(tmp_path / "a.jsonl")
    here, here_json, _ = per_request(log, renderer, render_ahead=False)
    dies_after(monkeypatch, 2)  # the process dies in the middle of the log
    rows, js, n = per_request(log, renderer)
    assert n == 2 * forked.BATCH
    assert rows == here and js == here_json


def _json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def test_bad_lines_read_ahead_are_named_where_they_were_met(tmp_path, renderer, monkeypatch, forks):
    """Lines that are not requests among the requests the forked process reads (not JSON, a
    number for messages, an unfinished last line): named in the same notes and in the same
    order as when this process reads them, with the same results, a sample's counts included;
    this process parses only the line before the fork. Past the budget of bad lines, the same
    error."""
    import kvplan.collectors.requests.read as read_mod
    from kvplan.collectors.requests.sample import SessionSample
    from kvplan.models.core.errors import KvplanError

    lines = agent_log(tmp_path / "a.jsonl").read_text().splitlines()
    for at, bad in ((60, '{"messages": 7}'), (33, "not json"), (3, "{"), (2, "[1, 2]")):
        lines.insert(at, bad)
    log = tmp_path / "bad.jsonl"
    log.write_text("\n".join(lines) + "\n" + '{"messages": [{"role": "user"')  # a last line being written
    parsed = [0]
    real = read_mod.parse_line

    def counted(*a):  # type: ignore[no-untyped-def]
        parsed[0] += 1
        return real(*a)
    monkeypatch.setattr(read_mod, "parse_line", counted)
    for fraction in (None, 0.5):
        samples = [SessionSample(fraction) if fraction is not None else None for _ in range(2)]
        here, here_json, _ = per_request(log, renderer, render_ahead=False, sample=samples[0])
        parsed[0] = 0
        ahead, ahead_json, n = per_request(log, renderer, sample=samples[1])
        got = parsed[0]
        # parsed here: the lines up to the first request checked (the template's date), no more
        first = next(iter(SessionSample(fraction).keep(read_requests([log], Skipped())))) if fraction is not None \
            else read_requests([log], Skipped()).__next__()
        objects = [json.loads(x) for x in log.read_text().splitlines()[:first.line] if _json(x)]
        assert got == len(objects) and n > 0, (got, n, first.line)
        assert ahead == here and ahead_json == here_json
        notes = json.loads(here_json)["notes"]
        # the bad lines read there and the request refused here (line 44, when sampled), in the order of the log
        at = [3, 5, 36, 44, 64] if fraction is None else [3, 5, 36, 64]
        note = next(x for x in notes if "bad line(s) skipped" in x)
        assert note.startswith(f"{len(at)} bad line(s)") or fraction is not None, note
        assert [note.index(f"bad.jsonl:{n}:") for n in at] == sorted(note.index(f"bad.jsonl:{n}:") for n in at)
        assert any("unfinished last line" in x and "bad.jsonl:75" in x for x in notes), notes
        if fraction is not None:  # the sample's counts, the forked process's reading's
            a, b = (x.as_json() for x in samples if x is not None)
            assert a == b and 0 < a["requests_kept"] < a["requests"] == 70, a
    # the process dies after two batches: the rest is read here, each bad line named once
    here, here_json, _ = per_request(log, renderer, render_ahead=False)
    real_send = forked.Connection.send
    dies_after(monkeypatch, 2)
    rows, js, n = per_request(log, renderer)
    assert n == 2 * forked.BATCH and rows == here and js == here_json
    monkeypatch.setattr(forked.Connection, "send", real_send)
    monkeypatch.setattr(read_mod, "MAX_SKIPPED", 3)
    errors = []
    for ahead_on in (False, True):
        with pytest.raises(KvplanError) as e:
            check([log], renderer, CheckOptions(block_size=16, render_ahead=ahead_on))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "more than 3 bad lines" in errors[0], errors


def test_no_fork_while_another_thread_runs(tmp_path, renderer):
    """A process running another thread (a Streamlit server) renders in process: no fork."""
    log = agent_log(tmp_path / "a.jsonl", 20)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert not can_fork()
        assert per_request(log, renderer)[2] == 0
    finally:
        stop.set()
        t.join()


class Recorded(forked.RenderAhead):
    """The real RenderAhead, each one kept (its fix pass's batches and end are on it)."""

    made: list[Recorded] = []

    def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
        super().__init__(*a, **k)
        self.fix_items: list = []
        Recorded.made.append(self)

    def fix(self, spec):  # type: ignore[no-untyped-def]
        for x in super().fix(spec):
            self.fix_items.extend(x[1])  # (the request as sent, its rewritten text)
            yield x


@pytest.fixture
def recorded(monkeypatch, forks):
    import kvplan.collectors.requests.check as check_mod

    Recorded.made = []
    monkeypatch.setattr(check_mod, "RenderAhead", Recorded)
    return Recorded.made


def test_the_fix_pass_rewritten_in_a_forked_process_gives_the_same_results(tmp_path, renderer, recorded):
    """The fix pass's rewrites come from the process that rendered ahead (from the renders it
    kept), every batch of them (the 69 requests it renders, in batches of ``BATCH_REQUESTS``), to its
    end; the results are the same as in one process."""
    log = agent_log(tmp_path / "a.jsonl")
    here, here_json, _ = per_request(log, renderer, render_ahead=False)
    assert not recorded
    rows, js, _ = per_request(log, renderer)
    from kvplan.collectors.requests.check import BATCH_REQUESTS
    batches = -(-69 // BATCH_REQUESTS)
    assert [(a.taken, a.fix_batches, a.fix_ended, a.proc) for a in recorded] == [(68, batches, "end", None)]
    assert rows == here and js == here_json
    # each rewritten request crossed light: its fields for keying, not its messages
    sent = recorded[0].fix_items
    read = {r.where: r for r in read_requests([log], Skipped())}
    assert {SlimRequest.of(*x).where for x, _ in sent} == set(read) - {f"{log}:41"}  # all but the refused one
    for (fields, bulky, conv), _ in sent:
        r = SlimRequest.of(fields, bulky, conv)
        assert bulky is None and conversation(r) == conversation(read[r.where])
        assert (r.kind, r.model, r.cache_salt, r.output_tokens) == (read[r.where].kind, "m", None, 8)
        with pytest.raises(RuntimeError, match="without its messages"):
            r.messages  # noqa: B018


def test_a_slim_request_reads_every_field_as_read_whatever_its_values(tmp_path):
    """A request crosses slim (``read.slimmed``: its bulky fields pickled, a value that is not
    JSON's too) and reads back every field as read, its messages and tools included, after
    ``dataclasses.replace`` too."""
    import dataclasses
    from fractions import Fraction

    from kvplan.collectors.requests.read import slimmed

    reqs = list(read_requests([agent_log(tmp_path / "a.jsonl")], Skipped()))
    odd = dataclasses.replace(reqs[0], chat_template_kwargs={"ratio": Fraction(1, 3)})  # not JSON
    for r in [*reqs, odd]:
        x = SlimRequest.of(*slimmed(r, conversation(r)))
        assert all(getattr(x, f.name) == getattr(r, f.name) for f in dataclasses.fields(LogRequest))
        y = dataclasses.replace(x, model="other")
        assert (y.messages, y.tools, y.model) == (r.messages, r.tools, "other")


def _kept_from(log: Path, renderer: Renderer, kept_from: int, not_kept: set[int]) -> tuple[Kept, list, dict]:
    """The log's requests rendered as the process rendering ahead renders them, each put in a
    ``Kept`` as that process puts it (its place; its text as the process sends it, a delta
    against its conversation's last text, which may be one not kept) from ``kept_from`` on, but
    for ``not_kept``; one vLLM refuses is not put (it is not rendered)."""
    prep = Preparer(renderer, CheckOptions())
    reqs = list(read_requests([log], Skipped()))
    renders = {}
    kept = Kept()
    mirror = Mirror()
    for i, r in enumerate(reqs):
        try:
            p = prep.prepare(r, encode=False)
        except RequestRefused:
            continue
        renders[r.where] = p
        sent = mirror.send_tagged(conversation(r), p.text, r.where)
        if i >= kept_from and i not in not_kept:
            kept.put(p, i, conversation(r), sent)
    kept.end(len(reqs), [log])
    return kept, reqs, renders


def _counted(log: Path, consumed: list):  # type: ignore[no-untyped-def]
    def read():  # type: ignore[no-untyped-def]
        for r in read_requests([log], Skipped()):
            consumed.append(r.where)
            yield r
    return read


def _as_the_fix_pass(kept: Kept, stream, renders: dict) -> list:  # type: ignore[no-untyped-def]
    """``stream``'s requests, each one read taken back or rendered again, as the fix pass does."""
    out = []
    for x in stream:
        if isinstance(x, LogRequest) and kept.take(x) is None and x.where in renders:
            kept.seen(x, renders[x.where].text)
        out.append(x)
    return out


def test_kept_requests_after_the_last_one_not_kept_are_made_again_without_reading(tmp_path, renderer):
    """Read up to the last request not kept (the refused one, request 40: after the gaps at 0-4
    and 20), then each kept one made again from what was kept: its text, its line map, its
    light fields and conversation as read; no line after it read."""
    log = agent_log(tmp_path / "a.jsonl")
    kept, reqs, renders = _kept_from(log, renderer, 5, {20})
    consumed: list[str] = []
    got = _as_the_fix_pass(kept, kept.requests(_counted(log, consumed), [log]), renders)
    assert consumed == [r.where for r in reqs[:41]]
    assert [type(x).__name__ for x in got] == ["LogRequest"] * 41 + ["Prepared"] * 29
    assert [x.where for x in got[:41]] == consumed
    for x, r in zip(got[41:], reqs[41:], strict=True):
        mine = renders[r.where]
        assert x.text == mine.text and x.lines == mine.lines and x.lines.split_of == mine.lines.split_of
        assert all(getattr(x.request, k) == getattr(r, k) for k in LIGHT)
        assert conversation(x.request) == conversation(r)
    assert kept.made_again == 29 and not kept.by


def test_kept_requests_are_read_again_where_one_cannot_be_made_again_or_the_log_changed(tmp_path, renderer):
    """A kept text whose previous turn the fix pass no longer holds: from it on, the rest is
    read again (the ones given passed over), each request once and in order. A log changed
    since the first pass (its time of change): every request read."""
    log = agent_log(tmp_path / "a.jsonl")
    kept, reqs, renders = _kept_from(log, renderer, 5, set())
    kept.take_texts.budget = 0  # no previous turn held: request 41 (a later turn) cannot be made again
    consumed: list[str] = []
    got = _as_the_fix_pass(kept, kept.requests(_counted(log, consumed), [log]), renders)
    assert [x.where for x in got] == [r.where for r in reqs]
    assert all(type(x).__name__ == "LogRequest" for x in got)
    assert consumed == [r.where for r in reqs[:41]] + [r.where for r in reqs]
    assert kept.made_again == 0

    kept, reqs, renders = _kept_from(log, renderer, 5, set())
    st = log.stat()
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    consumed = []
    got = _as_the_fix_pass(kept, kept.requests(_counted(log, consumed), [log]), renders)
    assert consumed == [x.where for x in got] == [r.where for r in reqs] and kept.made_again == 0


def test_the_fix_pass_makes_kept_requests_again_in_the_forked_process(tmp_path, renderer, monkeypatch, recorded):
    """With the process held a few requests ahead (a small pipe and batch), it keeps most
    requests before the first pass ends: its fix pass makes them again without reading, and
    the results are those of one process."""
    log = agent_log(tmp_path / "a.jsonl", 200)
    here, here_json, _ = per_request(log, renderer, render_ahead=False)
    monkeypatch.setattr(forked, "PIPE_BYTES", 4096)
    monkeypatch.setattr(forked, "BATCH", 2)
    rows, js, _ = per_request(log, renderer)
    assert [(a.fix_ended, a.proc) for a in recorded] == [("end", None)]
    assert 100 < recorded[0].made_again < 159, recorded[0].made_again  # those after request 40 (refused), most
    assert rows == here and js == here_json


def test_a_fix_pass_process_that_dies_is_done_again_here(tmp_path, renderer, monkeypatch, recorded):
    """The fix pass's process ends after two batches (as if killed): the fix pass runs again in
    this process from the start, with the same results (nothing counted twice)."""
    log = agent_log(tmp_path / "a.jsonl")
    here, here_json, _ = per_request(log, renderer, render_ahead=False)
    dies_after(monkeypatch, 2, lambda obj: isinstance(obj, tuple) and obj[0] == "item")  # the fix pass's batches
    rows, js, _ = per_request(log, renderer)
    assert [(a.fix_batches, a.fix_ended) for a in recorded] == [(2, "failed: the process ended (exit code 3)")]
    assert rows == here and js == here_json


def test_a_log_that_grows_between_the_passes_is_named_as_before(tmp_path, renderer, recorded):
    """Lines added to the log after the first pass: the fix pass's process meets more requests
    than the first pass read and stops; this process, doing it again, refuses the log naming the
    first extra line, as a check in one process does."""
    from kvplan.models.core.errors import KvplanError

    errors = []
    for ahead in (False, True):
        log = agent_log(tmp_path / f"grows-{ahead}.jsonl")
        extra = log.read_text().splitlines()[:2]

        def progress(stage: str, n: int, log: Path = log, extra: list[str] = extra) -> None:
            if stage == "predicted":
                with log.open("a") as f:
                    f.write("\n".join(extra) + "\n")

        with pytest.raises(KvplanError) as e:
            check([log], renderer, CheckOptions(block_size=16, render_ahead=ahead), progress=progress)
        errors.append(str(e.value).replace(f"grows-{ahead}", "grows"))
    assert errors[0] == errors[1] and "the log changed while it was read" in errors[0]
    assert "grows.jsonl:71" in errors[0], errors[0]
    # it met the extra lines in its first pass (renders left unread) or in the fix pass (the error)
    assert len(recorded) == 1 and str(recorded[0].fix_ended).startswith("failed: "), recorded[0].fix_ended


def test_ctrl_c_is_left_to_the_check(tmp_path, renderer):
    """Ctrl-C reaches every process of the terminal's group: the forked one ignores it (no
    second traceback; the check's process stops it when it stops) and goes on rendering."""
    import signal

    log = agent_log(tmp_path / "a.jsonl", 30)
    prep = Preparer(renderer, CheckOptions())
    requests = list(read_requests([log], Skipped()))
    prep.prepare(requests[0], encode=False)
    ahead = RenderAhead([log], None, prep, 1, fix=lambda spec, kept: iter([("made", spec)]))
    try:
        assert all(ahead.take(q) is not None for q in ahead.requests(Skipped()))
        os.kill(ahead.proc.pid, signal.SIGINT)  # it waits for the fix pass now
        ahead.proc.join(2)  # a process that took it would be gone within this
        assert ahead.proc.is_alive()
        assert list(ahead.fix("spec")) == [("made", "spec")]  # and still makes the fix pass
    finally:
        ahead.close()


def test_prompts_tokenized_whole_are_rendered_here(tmp_path, forks):
    """All-distinct prompts (nothing for the piece cache to find): once it tokenizes them whole
    (after its first 64), the tokenizer takes both cores, and the process rendering ahead is
    stopped; the rest is rendered here, with the same results."""
    import random

    rng = random.Random(3)
    words = "cache block prefix token engine request policy answer careful brief topic".split()
    bodies = [{"model": "m", "max_tokens": 4, "messages": [
        {"role": "system", "content": "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(30))},
        {"role": "user", "content": " ".join(rng.choices(words, k=20))}]} for _ in range(200)]
    log = tmp_path / "distinct.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    here, here_json, _ = per_request(log, Renderer(FIX / "tokenizer", TEMPLATE), render_ahead=False)
    renderer = Renderer(FIX / "tokenizer", TEMPLATE)  # a piece cache of its own, new
    assert not renderer.tokenizing_whole()
    rows, js, n = per_request(log, renderer)
    assert renderer.tokenizing_whole()
    assert 0 < n < 100, n  # taken until the piece cache gave up on pieces, not to the end
    assert rows == here and js == here_json
