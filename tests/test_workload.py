"""Unit tests of the workload driver that need no server (prompts, routing, bounds)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter

import httpx
import pytest

from kvplan.collectors.loadgen import client as lg_client
from kvplan.collectors.loadgen import workload as wl
from kvplan.collectors.loadgen.workload import RunResult, Workload, prompt_for, request_schedule, route
from kvplan.models.core.errors import KvplanError


def common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=True):
        if x != y:
            break
        n += 1
    return n


def test_text_is_deterministic_and_exact_length():
    a = wl.text(0, "system", 4000)
    assert a == wl.text(0, "system", 4000)
    assert len(a) == 4000
    assert a != wl.text(1, "system", 4000)
    assert a != wl.text(0, "other", 4000)
    assert set(a.split()) <= set(wl.VOCABULARY) | {a.split()[-1]}  # last word may be cut
    assert wl.text(0, "x", 0) == ""


def test_text_known_value_is_stable_across_runs():
    """Prompts must be the same on every machine, Python build and run (no hash randomisation):
    the recorded A/Bs and fixtures were sent with them. The values were read off this
    generator when the fixtures were recorded."""
    assert wl.text(0, "system", 40) == "now agent them be label get assistant ye"
    assert hashlib.sha256(wl.text(3, "user-1", 4000).encode()).hexdigest() == \
        "f7a1281a3abdc9c5814fd62b05f87d837659b714e914b2f45e9a372faa0695c8"
    code = "from kvplan.collectors.loadgen import workload as wl; print(wl.text(0, 'system', 40))"
    for seed in ("1", "2"):
        other = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                               capture_output=True, text=True, check=True).stdout.strip()
        assert other == "now agent them be label get assistant ye"


def test_shared_prefix_prompts_share_the_system_prompt():
    w = Workload(scenario="shared_prefix", users=4, turns=2, prefix_chars=4000, tail_chars=200)
    prompts = [prompt_for(w, u, t) for u in range(w.users) for t in range(w.turns)]
    assert len(set(prompts)) == len(prompts)
    sysp = wl.system_prompt(w)
    assert len(sysp) == 4000
    for p in prompts:
        assert p.startswith(sysp)
    # they differ only after the shared part
    assert common_prefix_len(prompts[0], prompts[2]) >= 4000


def test_unique_prompts_share_no_prefix():
    w = Workload(scenario="unique", users=5, turns=3, prefix_chars=4000, tail_chars=200)
    prompts = [prompt_for(w, u, t) for u in range(w.users) for t in range(w.turns)]
    assert len(set(prompts)) == len(prompts)
    for i, a in enumerate(prompts):
        assert len(a) >= 4200
        for b in prompts[i + 1:]:
            # Only the fixed word "Request " may be common: far less than one KV block.
            assert common_prefix_len(a, b) < 16


def test_multi_turn_resends_growing_history():
    w = Workload(scenario="multi_turn", users=3, turns=3, prefix_chars=1000, tail_chars=100)
    p0 = prompt_for(w, 1, 0)
    h1 = wl.extend_history(p0, " some answer")
    p1 = prompt_for(w, 1, 1, h1)
    h2 = wl.extend_history(p1, " another answer")
    p2 = prompt_for(w, 1, 2, h2)
    assert p1.startswith(h1) and p2.startswith(h2) and p2.startswith(p0)
    assert len(p0) < len(p1) < len(p2)
    # different users do not share their opening context
    assert common_prefix_len(prompt_for(w, 0, 0), prompt_for(w, 1, 0)) < 16
    # same inputs, same prompts
    assert prompt_for(w, 1, 1, h1) == p1


def test_round_robin_moves_each_turn_to_the_next_server():
    w = Workload(users=4, turns=3, routing="round_robin")
    assert [route(w, 0, t, 2) for t in range(3)] == [0, 1, 0]
    assert [route(w, 1, t, 2) for t in range(3)] == [1, 0, 1]
    counts = Counter(s for _, _, s in request_schedule(w, 2))
    assert counts[0] == counts[1] == 6
    for u in range(w.users):
        assert route(w, u, 0, 2) != route(w, u, 1, 2)


def test_affinity_keeps_a_user_on_one_server():
    w = Workload(users=50, turns=4, routing="affinity")
    for u in range(w.users):
        assert len({route(w, u, t, 3) for t in range(w.turns)}) == 1
    # and spreads users over servers
    assert len({route(w, u, 0, 3) for u in range(w.users)}) == 3
    # independent of the seed: the same user lands on the same server across runs
    w2 = Workload(users=50, turns=4, routing="affinity", seed=9)
    assert [route(w, u, 0, 3) for u in range(50)] == [route(w2, u, 0, 3) for u in range(50)]


def test_random_routing_is_seeded():
    w = Workload(users=20, turns=3, routing="random", seed=3)
    assert request_schedule(w, 4) == request_schedule(Workload(users=20, turns=3, routing="random", seed=3), 4)
    assert request_schedule(w, 4) != request_schedule(Workload(users=20, turns=3, routing="random", seed=4), 4)
    assert {s for _, _, s in request_schedule(w, 4)} == {0, 1, 2, 3}


def test_workload_validates_naming_the_field():
    with pytest.raises(KvplanError, match="^scenario: must be one of"):
        Workload(scenario="nope")  # type: ignore[arg-type]
    with pytest.raises(KvplanError, match="^routing: "):
        Workload(routing="sticky")  # type: ignore[arg-type]
    with pytest.raises(KvplanError, match="^users: must be >= 1; got 0"):
        Workload(users=0)
    with pytest.raises(KvplanError, match="^max_seconds: "):
        Workload(max_seconds=float("nan"))


def test_percentile():
    assert wl.percentile([], 50) is None
    assert wl.percentile([3.0], 99) == 3.0
    assert wl.percentile([1, 2, 3, 4], 50) == 2.5
    assert wl.percentile([0, 10], 90) == pytest.approx(9.0)


def test_normalize_base_url():
    assert lg_client.normalize_base_url("http://h:1/v1/") == "http://h:1"
    assert lg_client.normalize_base_url("http://h:1") == "http://h:1"


# ------------------------------------------------------- driver against a fake server


def _sse(events: list[dict]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def fake_transport(seen: list[tuple[str, dict]], fail_server: str | None = None,
                   cached=None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        seen.append((base, body))
        if base == fail_server:
            return httpx.Response(500, text="boom")
        n = body["max_tokens"]
        events = [{"choices": [{"index": 0, "text": f"t{i} "}]} for i in range(n)]
        usage = {"prompt_tokens": len(body["prompt"]) // 4, "completion_tokens": n, "total_tokens": 0}
        if cached is not None:  # vLLM with --enable-prompt-tokens-details
            usage["prompt_tokens_details"] = {"cached_tokens": cached(body["prompt"])}
        events.append({"choices": [], "usage": usage})
        return httpx.Response(200, content=_sse(events),
                              headers={"content-type": "text/event-stream"})
    return httpx.MockTransport(handler)


def _run_fake(servers, w, fail_server=None, cached=None) -> tuple[RunResult, list]:
    seen: list = []

    async def go():
        async with httpx.AsyncClient(transport=fake_transport(seen, fail_server, cached)) as client:
            return await lg_client.run_async(servers, "m", w, client=client)

    return asyncio.run(go()), seen


def test_driver_sends_stream_requests_and_records_usage():
    servers = ["http://a:1", "http://b:2/v1"]
    w = Workload(scenario="multi_turn", users=3, turns=2, output_tokens=5, prefix_chars=300,
                 tail_chars=50)
    res, seen = _run_fake(servers, w)
    assert len(res.results) == 6 and all(r.ok for r in res.results)
    for _, body in seen:
        assert body["stream"] is True and body["ignore_eos"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 5 and body["model"] == "m"
    for r in res.results:
        assert r.output_tokens == 5 and r.prompt_tokens and r.ttft_s is not None
        assert r.server == ["http://a:1", "http://b:2"][route(w, r.user, r.turn, 2)]
    # turn 2 of a multi-turn user re-sends turn 1 and its answer
    by_user = {}
    for _base, body in seen:
        by_user.setdefault(body["prompt"][:40], []).append(body["prompt"])
    for prompts in by_user.values():
        assert len(prompts) == 2
        first, second = sorted(prompts, key=len)
        assert second.startswith(first + "t0 t1 t2 t3 t4 ")
    s = res.summary()
    assert s["ok"] == 6 and s["failed"] == 0 and s["output_tokens"] == 30


def test_driver_records_errors_without_raising():
    w = Workload(scenario="shared_prefix", users=2, turns=2, output_tokens=2, prefix_chars=100,
                 tail_chars=10)
    res, _ = _run_fake(["http://a:1", "http://b:2"], w, fail_server="http://b:2")
    assert len(res.results) == 4
    bad = [r for r in res.results if not r.ok]
    assert len(bad) == 2 and all("HTTP 500" in r.error for r in bad)
    assert all(r.server == "http://b:2" for r in bad)


def test_driver_connection_errors_are_recorded():
    # Nothing listens on port 9 of loopback: connection refused, recorded per request.
    w = Workload(scenario="unique", users=2, turns=1, output_tokens=2, prefix_chars=50,
                 tail_chars=5, max_seconds=20)
    res = lg_client.run(["http://127.0.0.1:9"], "m", w)
    assert len(res.results) == 2
    assert all(not r.ok and r.error for r in res.results)


def test_max_requests_bounds_the_run():
    w = Workload(scenario="shared_prefix", users=4, turns=5, output_tokens=1, prefix_chars=50,
                 tail_chars=5, max_requests=7)
    res, seen = _run_fake(["http://a:1"], w)
    assert len(seen) == 7 and len(res.results) == 7
    assert res.stopped_by == "max_requests"


def test_max_seconds_bounds_the_run():
    async def slow_handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, content=b"data: [DONE]\n\n")

    w = Workload(scenario="unique", users=2, turns=3, output_tokens=1, prefix_chars=10,
                 tail_chars=1, max_seconds=0.5)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(slow_handler)) as client:
            return await lg_client.run_async(["http://a:1"], "m", w, client=client)

    import time
    t0 = time.monotonic()
    res = asyncio.run(go())
    assert time.monotonic() - t0 < 10
    assert len(res.results) == 2 and not any(r.ok for r in res.results)
    assert res.stopped_by == "max_seconds"


def test_run_result_is_json_serialisable():
    w = Workload(users=1, turns=1, output_tokens=1, prefix_chars=10, tail_chars=1)
    res, _ = _run_fake(["http://a:1"], w)
    d = json.loads(res.to_json())
    assert d["workload"]["scenario"] == "shared_prefix" and len(d["results"]) == 1


def test_complete_records_connection_error():
    res, text = lg_client.complete("http://127.0.0.1:9/v1", "m", "hello", output_tokens=1, timeout_s=10)
    assert not res.ok and res.error and text == ""
    assert res.server == "http://127.0.0.1:9"


def test_sync_run_works_inside_a_running_event_loop():
    """Playwright's sync API (browser tests), Jupyter and Streamlit keep a loop running in the
    main thread: the sync wrapper must not call asyncio.run() there."""
    import asyncio


    async def inside():
        # a dead loopback port: the request fails, recorded as an error, not raised
        r, _ = lg_client.complete("http://127.0.0.1:9", "m", "hello", timeout_s=2)
        return r

    r = asyncio.run(inside())
    assert not r.ok and r.error


def test_cached_tokens_per_request_are_recorded_stored_and_give_the_request_weighted_share(tmp_path):
    """usage.prompt_tokens_details.cached_tokens (vLLM --enable-prompt-tokens-details) per
    request -> run_requests.cached_tokens -> the Runs page's request-weighted share."""
    from kvplan.app.views.runs import runs_view
    from kvplan.collectors.loadgen.runs import save_run
    from kvplan.sql.db import Database

    w = Workload(scenario="multi_turn", users=3, turns=2, output_tokens=5, prefix_chars=300, tail_chars=50)
    # turn 2 re-sends turn 1 (longer prompt): the server found 64 of its tokens cached
    res, _ = _run_fake(["http://a:1"], w, cached=lambda prompt: 64 if len(prompt) > 400 else 0)
    assert sorted((r.turn, r.cached_tokens) for r in res.results) == [(0, 0)] * 3 + [(1, 64)] * 3
    db = Database(tmp_path / "runs.duckdb")
    db.migrate()
    save_run(db, "d", res, measured_on="test")
    # a server without the flag reports nothing: "not recorded", not 0 %
    plain, _ = _run_fake(["http://a:1"], w)
    assert {r.cached_tokens for r in plain.results} == {None}
    save_run(db, "d", plain, measured_on="test")
    runs = {r["run_id"]: r for r in runs_view(db, "d").runs}
    assert runs[1]["requests_with_cache_share"] == 0.5
    assert runs[1]["cached_token_share"] == pytest.approx(3 * 64 / sum(r.prompt_tokens for r in res.results))
    assert runs[2]["requests_with_cache_share"] is None and runs[2]["cached_token_share"] is None


def test_the_local_stack_asks_vllm_for_per_request_cached_tokens(tmp_path):
    """Without --enable-prompt-tokens-details vLLM leaves usage.prompt_tokens_details out and
    every run's request-weighted share reads 'not recorded'."""
    from kvplan.deploy.local import stack as stk

    for extra in ((), ("--no-enable-prefix-caching",)):
        s = stk.vllm_server("vllm-0", 8000, py=tmp_path / "python", model_path=tmp_path / "m", model_name="m",
                             run_dir=tmp_path, lmcache_rpc_port=None, kv_space_gib=1, max_model_len=4096,
                             extra_args=extra)
        assert "--enable-prompt-tokens-details" in s.cmd
def test_fixed_prompts_make_the_same_stream_on_any_server():
    prompts = [["a" * 40, "b" * 80], ["c" * 120]]
    seen: list = []

    async def go():
        async with httpx.AsyncClient(transport=fake_transport(seen)) as client:
            return await lg_client.run_prompts_async(["http://a:1", "http://b:2"], "m", prompts, output_tokens=3,
                                              client=client)

    res = asyncio.run(go())
    assert len(res.results) == 3 and all(r.ok for r in res.results)
    # user 0 on server a, in order; user 1 on server b
    assert [(b, body["prompt"]) for b, body in seen if b == "http://a:1"] == [("http://a:1", "a" * 40),
                                                                           ("http://a:1", "b" * 80)]
    assert [body["prompt"] for b, body in seen if b == "http://b:2"] == ["c" * 120]
    assert all(body["max_tokens"] == 3 for _, body in seen)
