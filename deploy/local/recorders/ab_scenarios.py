"""The request streams of the A/B validation, fixed in advance from a seed: ``Scenario`` (prompts
in segments), the calibration history and the four validation scenarios (unique, shared prefix,
multi-turn, loaded)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvplan.collectors.loadgen import workload as wl

OUTPUT_TOKENS = 8
MAX_PROMPT_CHARS = 12_800
"""Longest prompt, characters (~3,600 tokens of the stack's tokenizer; max_model_len 4096)."""


@dataclass
class Scenario:
    """A request stream in segments: ``segments[k][u]`` = the prompts user ``u`` sends, one
    after another, in segment ``k`` (users run concurrently)."""

    name: str
    segments: list[list[list[str]]]
    output_tokens: int = OUTPUT_TOKENS
    kind: wl.Scenario = "unique"
    """Workload scenario label stored with the runs."""

    @property
    def users(self) -> int:
        return max(len(seg) for seg in self.segments)

    @property
    def requests(self) -> int:
        return sum(len(p) for seg in self.segments for p in seg)


# ---- the validation scenarios -----------------------------------------------------------------------
def _chars(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randrange(lo, hi)


def _unique(seed: int, key: str, chars: int) -> str:
    head = f"Request {seed}-{key}. "
    return head + wl.text(seed, f"unique:{key}", max(chars - len(head), 0))


def calibration(seed: int, segments: int = 24) -> Scenario:
    """The history the fit may use besides the scenarios: segments of two alike requests sent
    back to back (as the scenarios send them: LMCache's stores then queue as they do under real
    traffic; alike, so each interval's per-request means stay exact), in turn unique requests
    (every token computed, and stored by LMCache) and shared-prefix requests (one of two
    prefixes, then a tail of 60 characters to most of the model's length: few to many computed
    tokens, mostly not stored), lengths spread over the model's range."""
    rng = random.Random(f"calibration:{seed}")
    prefixes = [wl.text(seed, f"calibration-prefix:{i}", n) for i, n in enumerate((4000, 9000))]
    segs = []
    for k in range(segments):
        if k % 2 == 0:
            n = _chars(rng, 600, MAX_PROMPT_CHARS - 600)
            prompts = [_unique(seed, f"cal:{k}:{j}", min(MAX_PROMPT_CHARS, int(n * rng.uniform(0.95, 1.05))))
                       for j in range(2)]
        else:
            p = prefixes[rng.randrange(2)]
            n = _chars(rng, 60, MAX_PROMPT_CHARS - len(p) - 100)
            prompts = [p + f"\nQ{k}.{j}: " + wl.text(seed, f"cal-q:{k}:{j}", int(n * rng.uniform(0.95, 1.05)))
                       for j in range(2)]
        segs.append([prompts])
    return Scenario("calibration", segs, kind="shared_prefix")


def validation_cases(seed: int, *, segments: int = 24, loaded_segments: int = 20,
                     loaded_users: int = 8) -> dict[str, Scenario]:
    """The four validation scenarios, prompts fixed from ``seed``, lengths varying:

    * ``unique``: one user, every prompt a new document (6,000-12,800 characters, about
      1,700-3,600 tokens; the two of a segment within 5 % of each other);
    * ``shared_prefix``: one user, one of two system prompts (7,000 or 11,000 characters, by
      segment) then a question of 100-1,500 characters;
    * ``multi_turn``: eight conversations of six turns, two per segment, turns interleaved,
      each turn re-sending the history (an opening of 4,000-7,000 characters, then per turn a
      300-700 character question and a fixed 200-character answer);
    * ``loaded``: ``loaded_users`` concurrent users, two requests each per segment, one system
      prompt (9,000 characters) and a 150-2,500 character question."""
    rng = random.Random(f"validation:{seed}")

    def near(n: int) -> int:  # a segment's requests are alike (per-interval means stay exact)
        return min(MAX_PROMPT_CHARS, int(n * rng.uniform(0.95, 1.05)))

    unique = []
    for k in range(segments):
        n = _chars(rng, 6000, MAX_PROMPT_CHARS - 600)
        unique.append([[_unique(seed, f"u:{k}:{j}", near(n)) for j in range(2)]])
    systems = [wl.text(seed, "system:a", 7000), wl.text(seed, "system:b", 11000)]
    shared = []
    for k in range(segments):
        system, n = systems[k % 2], _chars(rng, 100, 1500)
        shared.append([[system + f"\nUser {k}.{j}: " + wl.text(seed, f"q:{k}:{j}", near(n)) + "\nAssistant:"
                        for j in range(2)]])
    answer = " " + wl.text(seed, "answer", 200)
    pairs, turns = 4, max(1, segments // 4)
    history = []
    for i in range(pairs):  # two conversations per segment, openings of about the same length
        n = _chars(rng, 4000, 7000)
        history += [f"Session {seed}-{2 * i + j}. " + wl.text(seed, f"open:{2 * i + j}", near(n)) for j in range(2)]
    multi = []
    for turn in range(turns):
        for i in range(pairs):
            n = _chars(rng, 300, 700)
            seg = []
            for u in (2 * i, 2 * i + 1):
                prompt = history[u] + "\nUser: " + wl.text(seed, f"turn:{u}:{turn}", near(n)) + "\nAssistant:"
                history[u] = prompt + answer
                seg.append(prompt)
            multi.append([seg])
    system = wl.text(seed, "system:loaded", 9000)
    loaded = [[[system + f"\nUser {u}.{k}.{j}: " + wl.text(seed, f"lq:{u}:{k}:{j}", _chars(rng, 150, 2500))
                + "\nAssistant:" for j in range(2)] for u in range(loaded_users)]
              for k in range(loaded_segments)]
    return {
        "unique": Scenario("unique", unique, kind="unique"),
        "shared_prefix": Scenario("shared_prefix", shared, kind="shared_prefix"),
        "multi_turn": Scenario("multi_turn", multi, kind="multi_turn"),
        "loaded": Scenario("loaded", loaded, kind="shared_prefix"),
    }
