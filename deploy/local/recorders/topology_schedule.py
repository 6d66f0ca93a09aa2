"""The request schedule of the topology A/B (``record_topology_ab``): every request, prompt
included, fixed from the seed before anything runs, and the vLLM server each one goes to
(request ``i`` to ``vllm-(i mod 2)``). Two phases: ``sequential`` (one request at a time) and
``concurrent`` (bursts of every client's turn); see record_topology_ab.py's module doc."""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvplan.collectors.loadgen import workload as wl

RANKS = 2
ANSWER_CHARS = 200
BURST_SPREAD_S = 0.15
"""Concurrent phase: each request of a burst is due within this long after its segment starts."""


@dataclass(frozen=True)
class Planned:
    """One request of the schedule."""

    idx: int
    phase: str
    segment: int
    """Segments run one after the other, on one side and then on the other."""
    client: int
    turn: int
    kind: str
    """conversation | shared_prefix | unique"""
    rank: int
    """vLLM server index: ``idx % RANKS``."""
    at_s: float | None
    """Concurrent phase: send time after the segment's start; None = sequential."""
    prompt: str


def _conversation(seed: int, key: str, opening: str, turns: int, q_lo: int, q_hi: int,
                  rng: random.Random, answer: str) -> list[str]:
    """The prompts of one conversation: each turn re-sends the history (a fixed answer text
    after every turn) plus a new question."""
    out, history = [], opening
    for t in range(turns):
        prompt = history + "\nUser: " + wl.text(seed, f"{key}:q:{t}", rng.randrange(q_lo, q_hi)) + "\nAssistant:"
        out.append(prompt)
        history = prompt + answer
    return out


def schedule(seed: int, clients: int = 4, turns: int = 10, rounds: int = 6) -> list[Planned]:
    """The whole request schedule, fixed from ``seed`` (module doc)."""
    rng = random.Random(f"topology-ab:{seed}")
    answer = " " + wl.text(seed, "ab-answer", ANSWER_CHARS)
    # sequential: 3 conversations of `rounds` turns, 2 shared-prefix questions per round, up to
    # 8 unique documents; a round (one segment) = one turn of each conversation, two questions
    # and (rounds 0-3) two documents
    convs = [_conversation(seed, f"seq{k}", f"Session {seed}-{k}. " + wl.text(seed, f"seq-open:{k}",
                                                                              rng.randrange(4000, 6000)),
                           rounds, 300, 700, rng, answer) for k in range(3)]
    system = "System: " + wl.text(seed, "ab-system-1", 8000)
    questions = [f"{system}\nUser {j}: " + wl.text(seed, f"seq-q:{j}", rng.randrange(100, 1500)) + "\nAssistant:"
                 for j in range(2 * rounds)]
    lengths = [800, 13000, 2500, 8000, 1500, 11000, 4000, 6000]
    uniques = [f"Request {seed}-{j}. " + wl.text(seed, f"seq-u:{j}", n) + "\nAssistant:"
               for j, n in enumerate(lengths)]
    rows: list[tuple[str, int, int, int, str, str]] = []
    for r in range(rounds):
        rows += [("sequential", r, k, r, "conversation", convs[k][r]) for k in range(3)]
        rows += [("sequential", r, 3, 2 * r + j, "shared_prefix", questions[2 * r + j]) for j in range(2)]
        # two at a time: a round stays odd-sized, so each conversation's next turn lands on
        # the other server (the article's case: turn two routed to another rank)
        rows += [("sequential", r, 4, j, "unique", uniques[j]) for j in (2 * r, 2 * r + 1) if j < len(uniques)]
    plan = [Planned(i, ph, seg, c, t, kind, i % RANKS, None, p) for i, (ph, seg, c, t, kind, p) in enumerate(rows)]

    # concurrent: `clients` conversations of `turns` turns behind one shared system prompt; turn
    # t of every client is one segment, each request due within BURST_SPREAD_S of its start
    system2 = "System: " + wl.text(seed, "ab-system-2", 4000)
    convs2 = [_conversation(seed, f"conc{c}", f"{system2}\nClient {seed}-{c}. "
                            + wl.text(seed, f"conc-open:{c}", rng.randrange(2000, 3000)), turns, 150, 400, rng, answer)
              for c in range(clients)]
    for t in range(turns):
        burst = sorted((rng.uniform(0.0, BURST_SPREAD_S), c) for c in range(clients))
        for at, c in burst:
            i = len(plan)
            plan.append(Planned(i, "concurrent", rounds + t, c, t, "conversation", i % RANKS, round(at, 3),
                                convs2[c][t]))
    return plan
