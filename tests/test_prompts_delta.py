"""A text as what it adds to its conversation's last one (``collectors/requests/delta.py``): made
again exactly, as text and as bytes, and two mirrors fed the same texts stay in step through
their evictions."""

from __future__ import annotations

import random

from kvplan.collectors.requests.delta import Mirror, delta, undelta

PIECES = ["a", "Bc", " ", "\n", "\n\n", "é", "🙂", "<s>", "now: 2026-12-07T05:00Z", "\r\n", "x" * 40]


def _turns(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(conversation, text) of interleaved conversations: a turn adds lines, rewrites one line
    (another length too), changes the last line, or starts over."""
    last: dict[str, list[str]] = {}
    out = []
    for _ in range(n):
        c = rng.choice("abcdef")
        lines = list(last.get(c, ["sys"]))
        op = rng.randrange(4)
        if op == 0:
            lines[rng.randrange(len(lines))] = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6)))
        elif op == 1:
            lines[-1] += rng.choice(PIECES)
        elif op == 2 and rng.random() < 0.2:
            lines = ["".join(rng.choice(PIECES) for _ in range(3))]
        lines += ["".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 8))) for _ in range(rng.randrange(0, 4))]
        last[c] = lines
        out.append((c, "\n".join(lines)))
    return out


def test_a_delta_makes_its_text_again_as_text_and_as_bytes():
    rng = random.Random(3)
    turns = _turns(rng, 400)
    last: dict[str, str] = {}
    own = total = 0
    for c, text in turns:
        ref = last.get(c, "")
        for a, b in ((ref, text), (ref.encode(), text.encode())):
            d = delta(a, b)
            assert undelta(a, d) == b
        own += len(delta(ref, text)[4])
        total += len(text)
        last[c] = text
    assert own < total / 4, (own, total)  # what a turn adds, not its whole text


def test_two_mirrors_fed_the_same_texts_stay_in_step_through_their_evictions():
    """A sender and a receiver with a budget of a few texts: every text comes out as it went in,
    sent whole when its conversation's last text was dropped, and as a delta otherwise: a delta
    of the text the sender says by its tag, its conversation's last one."""
    turns = _turns(random.Random(8), 600)
    sender, receiver = Mirror(budget=4000), Mirror(budget=4000)
    kinds = {str: 0, tuple: 0}
    last: dict[str, int] = {}
    for i, (c, text) in enumerate(turns):
        sent, tag = sender.send_tagged(c, text, i)
        kinds[type(sent)] += 1
        if isinstance(sent, str):
            assert tag is None
        else:
            assert tag == last[c] and undelta(turns[tag][1], sent) == text
        last[c] = i
        assert receiver.received(c, sent) == text
        assert [(k, t) for k, (t, _) in receiver.last.items()] == [(k, t) for k, (t, _) in sender.last.items()]
    assert kinds[str] > 100 and kinds[tuple] > 300, kinds
