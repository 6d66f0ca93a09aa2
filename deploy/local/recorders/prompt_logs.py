"""Write kvplan's own request logs: the inputs of the prompts validation (issue 26, item 11).

Deterministic (seeded): the same command writes the same bytes. Five files, in the formats
``kvplan prompts check`` reads, sized for the local stack: vLLM's CPU backend hashes blocks of
128 tokens, so each prompt is several blocks (about 600 to 3,000 tokens of the tiny Llama's
tokenizer), within its 8,192 positions and the stack's ``--max-model-len 4096``; a few dozen
requests a file, as the tiny model prefills about 5-10k tokens a second on one CPU core.

* ``agent-tools.jsonl``: OpenAI chat-completions bodies with ``tools``: 5 agent sessions of
  5 steps (system prompt, 6 tool definitions, the task, then assistant tool calls and tool
  results growing step by step), sessions interleaved.
* ``chats.batch.jsonl``: OpenAI Batch API input lines (``custom_id``, ``method``, ``url``,
  ``body``): 6 multi-turn conversations of 5 turns, interleaved, each turn carrying the whole
  history (the assistant replies as logged).
* ``rag.completions.jsonl.gz`` (gzip): completions bodies, ``prompt`` as text: RAG over 8
  shared documents, 3 retrieved a request (the popular ones first more often), then the question.
* ``ts-top.jsonl``: chat bodies whose system prompt starts with the request's time (ISO,
  milliseconds) and the session id (a UUID): the cache-buster case. 6 sessions of 5 requests.
* ``ts-end.jsonl``: the same requests with those two lines moved to the end of the user message
  (the fix the buster finding proposes: its measured hit rate is what "if fixed" must predict).
* ``agent-ts-top.jsonl`` / ``agent-ts-fixed.jsonl``: 6 multi-turn conversations of 4 turns, two
  system prompts, a third of the conversations with the time on line 1 of the system prompt; and
  the same requests as a client fixes them (the time appended to each new user message and kept
  in the history): the multi-turn case of "if fixed". Served live only (tests/test_prompts_stack.py).

Each line of every file but the RAG one starts with an ``arrival_time`` (ISO 8601, milliseconds,
UTC; in the timestamp files it equals the time written into the prompt): the field kvplan's
reader takes as the request's arrival (the RAG file has none: file order is arrival order).
The recorder drops it before sending. Every chat body passes
``chat_template_kwargs: {"date_string": ...}`` (a fixed date) to the stack's chat template
(deploy/local/templates/tiny-llama-tools.jinja), so the rendered prompt does not depend on the
day it is served or predicted. Every body has ``max_tokens`` (4) and
``model`` (the stack's served name). The text is generated from word lists: it reads as
nonsense prose, which is all a cache needs.

    .venv/bin/python deploy/local/recorders/prompt_logs.py [--out deploy/demo/prompts/logs]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OUT = ROOT / "deploy" / "demo" / "prompts" / "logs"
TEMPLATE = ROOT / "deploy" / "local" / "templates" / "tiny-llama-tools.jinja"
MODEL = "tiny-llama"
DATE_STRING = "01 Dec 2026"
MAX_TOKENS = 4
SEED = 26
FILES = ("agent-tools.jsonl", "chats.batch.jsonl", "rag.completions.jsonl.gz", "ts-top.jsonl", "ts-end.jsonl",
         "agent-ts-top.jsonl", "agent-ts-fixed.jsonl")

_NOUNS = ("invoice", "cluster", "ticket", "customer", "report", "server", "queue", "budget", "order",
          "account", "release", "schedule", "contract", "shipment", "dashboard", "policy", "tenant",
          "warehouse", "forecast", "incident", "backup", "region", "pipeline", "license", "quota",
          "payment", "catalog", "supplier", "cache", "replica", "request", "gateway", "model", "team")
_VERBS = ("checks", "updates", "reviews", "moves", "archives", "approves", "rejects", "summarises",
          "counts", "compares", "routes", "retries", "flags", "exports", "merges", "renews", "tracks")
_ADJS = ("pending", "overdue", "regional", "weekly", "critical", "internal", "external", "monthly",
         "shared", "private", "new", "older", "large", "small", "primary", "secondary", "annual")
_ADVS = ("quickly", "carefully", "once", "twice", "daily", "again", "first", "later", "only", "always")


def sentence(rng: random.Random) -> str:
    words = [rng.choice(("The", "Each", "Every", "A", "This")), rng.choice(_ADJS), rng.choice(_NOUNS),
             rng.choice(_VERBS), "the", rng.choice(_ADJS), rng.choice(_NOUNS)]
    for _ in range(rng.randint(0, 3)):
        words += [rng.choice(("for", "with", "after", "before", "in")), "the", rng.choice(_NOUNS)]
    words.append(rng.choice(_ADVS))
    return " ".join(words) + "."


def paragraph(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        s = sentence(rng)
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def text_block(rng: random.Random, chars: int, para: int = 400) -> str:
    paras = []
    left = chars
    while left > 0:
        p = paragraph(rng, min(para, left))
        paras.append(p)
        left -= len(p) + 2
    return "\n\n".join(paras)


def _chat_body(messages: list[dict], **extra: object) -> dict:
    body: dict = {"model": MODEL, "messages": messages}
    body.update(extra)
    body["max_tokens"] = MAX_TOKENS
    body["chat_template_kwargs"] = {"date_string": DATE_STRING}
    return body


def _interleave(rng: random.Random, sessions: list[list[dict]]) -> list[dict]:
    """Each session's requests in order; sessions interleaved at random (seeded)."""
    pos = [0] * len(sessions)
    out = []
    while any(p < len(s) for p, s in zip(pos, sessions, strict=True)):
        live = [i for i, s in enumerate(sessions) if pos[i] < len(s)]
        i = rng.choice(live)
        out.append(sessions[i][pos[i]])
        pos[i] += 1
    return out


# ---------------------------------------------------------------- agent with tools

_TOOLS = (
    ("search_tickets", "Search the ticket tracker. Returns matching tickets, newest first.",
     {"query": ("string", "Words to match"), "status": ("string", "open, closed or any"),
      "limit": ("integer", "Most tickets returned")}),
    ("get_ticket", "Read one ticket with its comments and history.",
     {"ticket_id": ("string", "The ticket's id, such as OPS-1234")}),
    ("run_query", "Run a read-only SQL query on the operations warehouse.",
     {"sql": ("string", "One SELECT statement"), "max_rows": ("integer", "Rows returned at most")}),
    ("list_servers", "List the servers of a region with their state and load.",
     {"region": ("string", "Region name"), "state": ("string", "running, stopped or any")}),
    ("restart_service", "Restart a service on one server. Needs a reason.",
     {"server": ("string", "Server name"), "service": ("string", "Service name"),
      "reason": ("string", "Why, for the audit log")}),
    ("post_message", "Post a message to a team channel.",
     {"channel": ("string", "Channel name"), "text": ("string", "Message text")}),
)


def tools() -> list[dict]:
    out = []
    for name, desc, params in _TOOLS:
        props = {k: {"type": t, "description": d} for k, (t, d) in params.items()}
        out.append({"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": [next(iter(params))]}}})
    return out


def agent_requests(rng: random.Random, sessions: int = 5, steps: int = 5) -> list[dict]:
    system = ("You are the operations agent of a mid-sized company. Work through the task step by "
              "step, calling one tool at a time, and say what you found when you are done.\n\n"
              + text_block(random.Random(SEED * 7), 1800))
    tl = tools()
    per_session = []
    for s in range(sessions):
        task = f"Task {s + 1}: " + paragraph(rng, rng.randint(200, 400))
        messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        reqs = []
        for step in range(steps):
            reqs.append(_chat_body([dict(m) for m in messages], tools=tl, tool_choice="auto"))
            name, _, params = _TOOLS[rng.randrange(len(_TOOLS))]
            args = {k: (rng.randint(1, 50) if t == "integer" else " ".join(rng.sample(_NOUNS, 2)))
                    for k, (t, _) in params.items()}
            call_id = f"call_{s}_{step}_{rng.getrandbits(32):08x}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}]})
            result = json.dumps({"ok": True, "rows": [paragraph(rng, 90) for _ in range(rng.randint(3, 6))]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        per_session.append(reqs)
    return _interleave(rng, per_session)


# ---------------------------------------------------------------- multi-turn chats (Batch API)

def chat_batch_lines(rng: random.Random, conversations: int = 6, turns: int = 5) -> list[dict]:
    system = ("You are a helpful assistant for the finance team. Answer briefly and cite the "
              "policy section you used.\n\n" + text_block(random.Random(SEED * 11), 900))
    per_conv = []
    for c in range(conversations):
        messages: list[dict] = [{"role": "system", "content": system}]
        reqs = []
        for t in range(turns):
            messages.append({"role": "user", "content": paragraph(rng, rng.randint(150, 450))})
            reqs.append({"custom_id": f"conv-{c + 1}-turn-{t + 1}", "method": "POST",
                         "url": "/v1/chat/completions", "body": _chat_body([dict(m) for m in messages])})
            messages.append({"role": "assistant", "content": paragraph(rng, rng.randint(200, 500))})
        per_conv.append(reqs)
    return _interleave(rng, per_conv)


# ---------------------------------------------------------------- RAG over shared documents

def rag_requests(rng: random.Random, docs: int = 8, requests: int = 30, per_request: int = 3) -> list[dict]:
    drng = random.Random(SEED * 13)
    corpus = [f"Document {i + 1}: {' '.join(drng.sample(_NOUNS, 3))} handbook\n\n" + text_block(drng, 1200)
              for i in range(docs)]
    weights = [1.0 / (i + 1) for i in range(docs)]  # Zipf-like: the first documents retrieved most
    instructions = ("Answer the question from the documents below only. If they do not hold the "
                    "answer, say so.\n\n")
    out = []
    for _ in range(requests):
        chosen: list[int] = []
        while len(chosen) < per_request:
            i = rng.choices(range(docs), weights)[0]
            if i not in chosen:
                chosen.append(i)
        question = "Question: " + paragraph(rng, rng.randint(80, 200))
        prompt = instructions + "\n\n".join(corpus[i] for i in chosen) + "\n\n" + question + "\nAnswer:"
        out.append({"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS})
    return out


# ---------------------------------------------------------------- timestamp at the top, and at the end

def ts_requests(rng: random.Random, sessions: int = 6, per_session: int = 5) -> tuple[list[dict], list[dict]]:
    """(top, end): the same requests, the time and session id lines first in the system prompt,
    or last in the user message."""
    system = ("You are the support assistant of an online shop. Be polite, answer in three "
              "sentences at most, and never promise refunds.\n\n" + text_block(random.Random(SEED * 17), 2600))
    t = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    plan = []
    for _ in range(sessions):
        sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        for _ in range(per_session):
            plan.append((sid, paragraph(rng, rng.randint(150, 350))))
    rng.shuffle(plan)
    top, end = [], []
    for sid, question in plan:
        t += timedelta(milliseconds=rng.randint(1500, 40_000))
        stamp = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        head = f"Current time: {stamp}\nSession: {sid}"
        top.append({"arrival_time": stamp, **_chat_body([{"role": "system", "content": head + "\n" + system},
                                                         {"role": "user", "content": question}])})
        end.append({"arrival_time": stamp, **_chat_body([{"role": "system", "content": system},
                                                         {"role": "user", "content": question + "\n" + head}])})
    return top, end


# ---------------------------------------------------------------- multi-turn agents, a third dated on top

def agent_ts_requests(rng: random.Random, conversations: int = 6, turns: int = 4) -> tuple[list[dict], list[dict]]:
    """(dated, fixed): multi-turn conversations interleaved in time, two system prompts; a third of
    the conversations put the current time on line 1 of the system prompt. ``fixed``: the same
    requests as a client makes the fix: the time appended to each new user message and kept there
    when the message comes back as history (what ``prompts check``'s fix of the first predicts)."""
    systems = [("You are the planning agent of a logistics company. Think in steps and name the data "
                "you used.\n\n" + text_block(random.Random(SEED * 19), 1800)),
               ("You are the billing agent of a software vendor. Answer in short paragraphs and cite "
                "the contract clause.\n\n" + text_block(random.Random(SEED * 23), 1800))]
    t = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
    hist: list[list[tuple[str, str, str]]] = [[] for _ in range(conversations)]  # (question, stamp, answer)
    dated_rows: list[dict] = []
    fixed_rows: list[dict] = []
    for _turn in range(turns):
        for c in range(conversations):
            t += timedelta(milliseconds=rng.randint(1500, 20_000))
            stamp = "Current time: " + t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            question = paragraph(rng, rng.randint(150, 300))
            dated = c % 3 == 0
            system = systems[c % 2]
            turns_so_far = hist[c] + [(question, stamp, "")]
            for fixed, rows in ((False, dated_rows), (True, fixed_rows)):
                msgs = [{"role": "system", "content": system if fixed or not dated else stamp + "\n" + system}]
                for k, (q, st, a) in enumerate(turns_so_far):
                    msgs.append({"role": "user", "content": q + "\n" + st if fixed and dated else q})
                    if k < len(turns_so_far) - 1:
                        msgs.append({"role": "assistant", "content": a})
                rows.append({"arrival_time": stamp.split(": ", 1)[1], **_chat_body(msgs)})
            hist[c].append((question, stamp, paragraph(rng, rng.randint(150, 300))))
    return dated_rows, fixed_rows


# ---------------------------------------------------------------- files

def _timed(rng: random.Random, rows: list[dict], start: datetime) -> list[dict]:
    """Each row with an ``arrival_time`` (ISO 8601, milliseconds, UTC) first, 1-20 s apart."""
    out = []
    t = start
    for r in rows:
        t += timedelta(milliseconds=rng.randint(1000, 20_000))
        out.append({"arrival_time": t.isoformat(timespec="milliseconds").replace("+00:00", "Z"), **r})
    return out


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as g:  # no time, no name: same bytes
        g.write(data)
    return buf.getvalue()


def build() -> dict[str, bytes]:
    """File name -> bytes, the same on every run."""
    top, end = ts_requests(random.Random(SEED + 4))
    agent_dated, agent_fixed = agent_ts_requests(random.Random(SEED + 7))
    t0 = datetime(2026, 12, 1, 8, 0, 0, tzinfo=UTC)
    return {
        "agent-tools.jsonl": _jsonl(_timed(random.Random(SEED + 5), agent_requests(random.Random(SEED + 1)), t0)),
        "chats.batch.jsonl": _jsonl(_timed(random.Random(SEED + 6), chat_batch_lines(random.Random(SEED + 2)), t0)),
        "rag.completions.jsonl.gz": _gzip(_jsonl(rag_requests(random.Random(SEED + 3)))),
        "ts-top.jsonl": _jsonl(top),
        "ts-end.jsonl": _jsonl(end),
        "agent-ts-top.jsonl": _jsonl(agent_dated),
        "agent-ts-fixed.jsonl": _jsonl(agent_fixed),
    }


def write(out: Path = DEFAULT_OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build().items():
        p = out / name
        p.write_bytes(data)
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    for p in write(args.out):
        print(f"{p} ({p.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
