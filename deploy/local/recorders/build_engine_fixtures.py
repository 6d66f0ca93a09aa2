"""Build /metrics payloads of engine releases that cannot run on this machine.

For every release below, the metric families (names, types, label names, bucket bounds,
HELP text) are the ones that release's source declares; the file, the release and where
the source was read are cited in each payload's header and in ``workload.json``. The
*values* are constructed (nothing here was measured): one "before" payload and one "after"
payload whose differences are the window below, so every figure a reader derives from the
pair can be worked out by hand:

    window: 10 requests, 10,000 prompt tokens (1,000 each), 6,000 of them cached
            (token hit rate 0.6), 160 output tokens (16 each, so 150 inter-token gaps)
    TTFT (s) of the 10 requests: 0.03 0.05 0.07 0.07 0.09 0.2 0.2 0.3 0.45 0.9
    inter-token gaps (s): 100 x 0.02, 40 x 0.04, 10 x 0.3
    e2e (s): TTFT + 15 gaps; the window's gaps are spread over requests so that the
             e2e latencies are 0.9, 0.9, 1.0, 1.0, 1.1, 1.2, 1.2, 1.4, 1.6, 2.2

The "before" payload holds an earlier, smaller history (5 requests, 4,800 prompt tokens,
1,920 cached, 80 output tokens; TTFT 0.03 0.05 0.07 0.2 0.3; gaps 50 x 0.02, 20 x 0.04,
5 x 0.3). Exposition text is written by prometheus_client (the library every one of these
servers uses), with or without ``_created`` samples as the release's server writes them
(vLLM V0 and SGLang run prometheus_client in multiprocess mode: no ``_created``).

The families each release declares are in fixture_vllm.py, fixture_sglang.py and
fixture_routers.py; the constructed traffic and the exposition writer in fixture_families.py.
This module holds the list of builds and writes each one's payloads and workload.json.

    .venv/bin/python deploy/local/recorders/build_engine_fixtures.py [--out tests/fixtures/payloads/engines]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvplan.deploy.local.recorders.fixture_families import E2E, TTFT, Fam, exposition
from kvplan.deploy.local.recorders.fixture_routers import dynamo_frontend, llmd_epp, production_stack_router
from kvplan.deploy.local.recorders.fixture_sglang import sglang_0523, sglang_054
from kvplan.deploy.local.recorders.fixture_vllm import lmcache_inproc_tp2, vllm_0102, vllm_066, vllm_073, vllm_0901

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "tests" / "fixtures" / "payloads" / "engines"


BUILDS: dict[str, Callable[[], tuple[list[Fam], dict[str, Any]]]] = {
    "vllm-0.6.6": vllm_066,
    "vllm-0.7.3": vllm_073,
    "vllm-0.9.0.1": vllm_0901,
    "vllm-0.10.2": vllm_0102,
    "sglang-0.5.4": sglang_054,
    "sglang-0.5.23": sglang_0523,
    "router-production-stack": production_stack_router,
    "gateway-llm-d-epp": llmd_epp,
    "frontend-dynamo": dynamo_frontend,
    "vllm-0.32.0-lmcache-inproc-tp2": lmcache_inproc_tp2,
}


def header(name: str, meta: dict[str, Any]) -> str:
    src = meta["source"]
    at = src.get("tag") or src.get("commit", "")
    lines = [f"# kvplan fixture {name}: BUILT, not recorded ({meta['why_built']}).",
             f"# Families (names, types, labels, buckets, help) from {src['repo']} {src['file']} at {at}.",
             "# Values are constructed (deploy/local/recorders/build_engine_fixtures.py): window = 10 requests,",
             "# 10,000 prompt tokens, 6,000 cached (hit rate 0.6), 160 output tokens; see workload.json."]
    return "\n".join(lines) + "\n"


def build(name: str, out_root: Path) -> Path:
    fams, meta = BUILDS[name]()
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.prom"):
        old.unlink()
    for i, phase in enumerate(("before", "after")):
        text = exposition(fams, phase, meta["created"])
        (out / f"{i:02d}_{phase}.prom").write_text(header(name, meta) + text)
    facts = {
        "header": ("BUILT from the release's source, not recorded: the names, types, label names and bucket "
                   "bounds are the release's; every value is constructed by "
                   "deploy/local/recorders/build_engine_fixtures.py"),
        "release": name, **meta,
        "workload": {"what": "constructed window between 00_before.prom and 01_after.prom",
                     "requests": 10, "prompt_tokens": 10000, "cached_tokens": 6000, "hit_rate": 0.6,
                     "output_tokens": 160, "ttft_s": TTFT["window"], "itl_gaps_s": "100 x 0.02, 40 x 0.04, 10 x 0.3",
                     "e2e_s": E2E["window"]},
        "before": {"requests": 5, "prompt_tokens": 4800, "cached_tokens": 1920, "output_tokens": 80},
    }
    (out / "workload.json").write_text(json.dumps(facts, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", action="append", choices=sorted(BUILDS))
    args = ap.parse_args(argv)
    for name in args.only or BUILDS:
        print(build(name, args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
