"""The prompts check (``kvplan prompts check``, the Prompts page, the report's section): a request
log's predicted prefix-cache hits, its cache-busters, and what fixing them is worth.

* **Engine settings**: the block size and ``num_gpu_blocks`` come from the deployment's newest
  ``vllm:cache_config_info`` when kvplan has its metrics; an option given explicitly wins; else
  16 and an unlimited cache. On a hybrid model, whose hits land on a scheduling block larger
  than its cache block (``models.prompts.geometry.scheduling_block``), that block is the block
  size, and the capacity is the same tokens in blocks of it.
* **Block geometry** (``block_geometry`` in the JSON; :func:`block_geometry` for the page): the
  hit rate at 16, 32, 64, 128, 256, the deployment's own block size and LMCache's chunk, the
  same capacity in tokens at each (``CheckOptions.geometry``). The own one: the scheduling block
  from ``vllm:cache_config_info`` when larger than the cache block, else ``--block-size``, else
  the check's (``own_source`` says which).
* **Pricing** (``pricing``): the same computation the what-if prices capacities with
  (``kvplan.models.cache.value``): saved GPU-seconds = cached tokens x the GPU-seconds one cached
  prompt token saves (``kvplan.models.prefill.savings`` on the deployment's measurement, what the
  plan prices), at the price book's $/GPU-hour; without a deployment (or its metrics) the
  labelled planning preset of the L40S article. Per month from the log's own rate (its arrival
  times), else per million prompt tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...collectors.requests.check import CheckOptions, CheckResult, OnRequest, Progress, check
from ...collectors.requests.distributed import on_ray
from ...collectors.requests.read import LogRequest
from ...collectors.requests.render import Renderer
from ...collectors.requests.sample import SessionSample
from ...models.core.errors import KvplanError
from ...models.prompts.geometry import SchedulingBlock, pool_blocks, scheduling_block, table_sizes
from ...models.prompts.predict import Outcome
from ...models.prompts.reasons import RequestMiss
from ...sql.db import Database
from ..data.store import DeploymentSettings, cache_config_rows, deployment_names, deployment_span

DEFAULT_BLOCK_SIZE = 16


def engine_config(db: Database | None, deployment: str | None) -> dict[str, Any] | None:
    """``block_size`` and ``num_gpu_blocks`` of the deployment's newest ``vllm:cache_config_info``
    (None when kvplan has none)."""
    if db is None or deployment is None:
        return None
    for row in cache_config_rows(db, deployment):
        labels = json.loads(row["labels"])
        try:
            bs = int(labels["block_size"])
        except (KeyError, ValueError):
            continue
        try:
            gb: int | None = int(labels.get("num_gpu_blocks_override") or "x")
        except ValueError:
            try:
                gb = int(labels.get("num_gpu_blocks") or "x")
            except ValueError:
                gb = None
        return {"block_size": bs, "num_gpu_blocks": gb, "target": row["target"],
                "source": f"vllm:cache_config_info of {row['target']}", "scheduling": scheduling_block(labels)}
    return None


def settings_for(db: Database | None, deployment: str | None, block_size: int | None,
                 gpu_blocks: int | None) -> tuple[int, int | None, list[str]]:
    """(block size, gpu blocks, notes saying where each came from)."""
    cfg = engine_config(db, deployment)
    notes = []
    sched: SchedulingBlock | None = cfg["scheduling"] if cfg else None
    if block_size is None and cfg and sched is not None:
        block_size = sched.size  # a hybrid model: its hits land on the scheduler's block, not the cache block
        notes.append(f"block size {block_size}: the block the deployment's prefix-cache hits land on, "
                     f"{sched.describe()} ({cfg['source']})")
    elif block_size is None:
        block_size = cfg["block_size"] if cfg else DEFAULT_BLOCK_SIZE
        notes.append(f"block size {block_size}: " + (cfg["source"] if cfg else "the default (GPU); vLLM's CPU "
                                                       "backend uses 128: give --block-size"))
    elif cfg and cfg["block_size"] != block_size:
        notes.append(f"block size {block_size} (--block-size) differs from the deployment's {cfg['block_size']}")
    if gpu_blocks is None and cfg and cfg["num_gpu_blocks"]:
        gpu_blocks = cfg["num_gpu_blocks"]
        notes.append(f"capacity {gpu_blocks} blocks: {cfg['source']}")
    elif gpu_blocks is None:
        notes.append("capacity: unlimited (no --gpu-blocks, no vllm:cache_config_info)")
    if gpu_blocks is not None and sched is not None and block_size == sched.size:
        # num_gpu_blocks counts the engine's cache blocks: the same tokens in blocks of the scheduling block
        n = gpu_blocks
        gpu_blocks = pool_blocks(n * sched.cache_block, block_size)
        notes.append(f"capacity {gpu_blocks} blocks of {block_size} tokens: the same tokens as {n} blocks of "
                     f"{sched.cache_block} (num_gpu_blocks counts the cache blocks)")
    return block_size, gpu_blocks, notes


def own_block(cfg: dict[str, Any] | None, block_size: int | None, used: int) -> dict[str, Any]:
    """The deployment's own block size for the geometry table, and where it came from
    (``source``: ``cache_config_info``, ``--block-size`` or ``default``; ``detail``: a sentence).
    A scheduling block larger than the cache block (a hybrid model) in the deployment's
    ``vllm:cache_config_info`` wins; else ``--block-size``; else the block size the check
    used (the deployment's ``block_size`` label, or 16). ``cfg``: :func:`engine_config`'s."""
    sched: SchedulingBlock | None = cfg["scheduling"] if cfg else None
    if cfg is not None and sched is not None:
        return {"block_size": sched.size, "source": "cache_config_info",
                "detail": f"the scheduling block, {sched.describe()} ({cfg['source']})"}
    if block_size is not None:
        return {"block_size": block_size, "source": "--block-size",
                "detail": f"--block-size {block_size}" + (f" ({cfg['source']} shows no scheduling block larger than "
                                                          f"its block_size {cfg['block_size']})" if cfg else "")}
    if cfg is not None:
        return {"block_size": cfg["block_size"], "source": "cache_config_info",
                "detail": f"block_size={cfg['block_size']}, no larger scheduling block ({cfg['source']})"}
    return {"block_size": used, "source": "default",
            "detail": f"vLLM's default on GPUs ({used}): no --block-size, no deployment"}


def geometry_json(result: CheckResult, own: dict[str, Any], lmcache_chunk: int) -> dict[str, Any] | None:
    """``block_geometry`` of the ``--json`` object: the check's rows (``CheckResult.as_json``),
    each marked with what its size is (``own``, ``lmcache_chunk``, ``check``), and the deployment's
    own block size with its source."""
    g = result.as_json()["block_geometry"]
    if g is None:
        return None
    for r in g["rows"]:
        r["is"] = [w for w, size in (("own", own["block_size"]), ("lmcache_chunk", lmcache_chunk),
                                     ("check", result.block_size)) if size == r["block_size"]]
    return {"own_block_size": own["block_size"], "own_source": own["source"], "own_detail": own["detail"],
            "check_block_size": result.block_size, "lmcache_chunk": lmcache_chunk, **g}


@dataclass(frozen=True)
class BlockGeometry:
    """The Prompts page's block-geometry section: one display row per block size, the chart
    (hit rate against block size, the deployment's own marked) and a caption saying where the
    own block size came from."""

    rows: list[dict[str, Any]]
    chart: Any
    caption: str


def block_geometry(d: dict[str, Any]) -> BlockGeometry | None:
    """The page's block-geometry table and chart from a check's JSON (:func:`prompts_check`);
    None when it has no table."""
    from ..charts_prompts import block_geometry_chart

    g = d.get("block_geometry")
    if not g:
        return None
    rows = [{"block size": r["block_size"], "what": ", ".join(WHAT[w] for w in r["is"]),
             "hit rate": r["hit_rate"], "hit rate, unlimited cache": r["hit_rate_unlimited"],
             "cached tokens": r["cached_tokens"], "GPU blocks": r["gpu_blocks"], "why null": r["why_null"]}
            for r in g["rows"]]
    cap = (f"{g['capacity_tokens']:,} tokens of cache at every block size" if g["capacity_tokens"] is not None
           else "an unlimited cache")
    caption = (f"The same log replayed at each block size with {cap}; only full blocks are cached, so a prompt "
               f"shorter than one block never hits. The deployment's own block size, {g['own_block_size']}: "
               f"{g['own_detail']}. LMCache's chunk: {g['lmcache_chunk']} tokens.")
    return BlockGeometry(rows, block_geometry_chart(g["rows"], g["own_block_size"]), caption)


WHAT = {"own": "the deployment's own", "lmcache_chunk": "LMCache's chunk", "check": "the check's"}


def _deployment_price(db: Database, deployment: str, t0: float, t1: float,
                      cfg: DeploymentSettings) -> tuple[float | None, float | None]:
    """(GPU-seconds one cached prompt token saves, $ per GPU-hour) over the deployment's data
    [t0, t1] (unix): ``kvplan.models.prefill.savings`` on the measurement the plan prices, with the
    deployment's history (cost model, price book); (None, None) when not measurable."""
    from ...models.core.timeutil import from_epoch_s
    from ...models.prefill.savings import estimate_savings
    from ..data.history import load_history
    from ..data.plan import window_measurement
    from ..data.window import load_window

    if t1 - t0 < 1:
        return None, None
    a, b = from_epoch_s(t0), from_epoch_s(t1)
    try:
        history = load_history(db, deployment, b, t_from=a, cfg=cfg)
        m, _ = window_measurement(db, load_window(db, deployment, a, b), history)
        spt = estimate_savings(m).gpu_seconds_per_token
    except (KvplanError, ValueError):  # no metrics for that span: priced with the preset
        return None, None
    return spt, history.prices.pricebook.effective_usd_per_gpu_hour()


def pricing(result: CheckResult, db: Database | None, deployment: str | None,
            cfg: DeploymentSettings = DeploymentSettings()) -> dict[str, Any]:
    """What the predicted hits save now and with every finding fixed (see the module docstring)."""
    from ...models.cache.value import tokens_per_month
    from ...models.decision.presets import l40s_agent

    spt = usd = None
    source = None
    if db is not None and deployment is not None:
        span = deployment_span(db, deployment)
        if span is not None:
            spt, usd = _deployment_price(db, deployment, span[0], span[1], cfg)
        if spt is not None:
            source = f"deployment {deployment}: its fitted prefill cost per cached token and its price book"
    if spt is None or usd is None:
        preset = l40s_agent()
        from ...models.prefill.savings import estimate_savings
        spt = estimate_savings(preset.inputs.measurement).gpu_seconds_per_token
        usd = preset.inputs.pricebook.effective_usd_per_gpu_hour()
        why = (f"deployment {deployment}'s metrics give no prefill cost per cached token (too little data?)"
               if deployment is not None else "no --deployment")
        source = f"PLANNING PRESET: {preset.title} (not your deployment: {why})"
    t = result.totals
    fixed = result.fixed.cached if result.fixed is not None else t.cached
    tpm = None
    if result.first_arrival is not None and result.last_arrival is not None \
            and result.last_arrival - result.first_arrival >= 60:
        tpm = tokens_per_month(t.prompt_tokens, result.last_arrival - result.first_arrival)

    def per_month(cached: int) -> float | None:
        if tpm is None or not t.prompt_tokens or spt is None:
            return None
        return cached / t.prompt_tokens * tpm * spt / 3600.0

    now_h, fix_h = per_month(t.cached), per_month(fixed)
    per_m = (fixed - t.cached) / t.prompt_tokens * 1e6 * (spt or 0) / 3600.0 * (usd or 0) if t.prompt_tokens else None
    return {
        "source": source, "seconds_per_cached_token": spt, "usd_per_gpu_hour": usd,
        "prompt_tokens_per_month": tpm,
        "saved_gpu_hours_per_month": now_h,
        "saved_gpu_hours_per_month_if_fixed": fix_h,
        "extra_usd_per_month_if_fixed": (fix_h - now_h) * usd if now_h is not None and fix_h is not None and usd
        is not None else None,
        "extra_usd_per_1m_prompt_tokens_if_fixed": per_m,
    }


def request_row(r: LogRequest, o: Outcome, miss: RequestMiss) -> dict[str, Any]:
    """One request as ``kvplan prompts check --per-request`` writes it (and the page lists it)."""
    return {"file": r.source, "line": r.line, "custom_id": r.custom_id, "prompt_tokens": o.prompt_tokens,
            "cached_tokens_predicted": o.cached, "cached_tokens_unlimited": o.cached_unlimited,
            "cached_tokens_measured": r.measured_cached_tokens, **miss.as_json()}


def prompts_check(paths: Sequence[Path], *, tokenizer: str | Path | None, chat_template: Path | None = None,
                  block_size: int | None = None, gpu_blocks: int | None = None, lmcache_chunk: int = 256,
                  lora: Sequence[str] = (), deployment: str | None = None, db: Database | None = None,
                  cfg: DeploymentSettings = DeploymentSettings(), progress: Progress | None = None,
                  on_request: OnRequest | None = None,
                  with_example: bool = False, keep_requests: int = 0,
                  sample_sessions: float | None = None, ray: str | None = None,
                  workers: int = 1) -> dict[str, Any]:
    """The whole check as one JSON-ready dict (``kvplan prompts check --json``). ``with_example``
    (the dashboard only, never the CLI or the report) adds ``example_prompt``: the first request
    the top finding broke, its rendered text and the divergent line's range, for highlighting.
    ``keep_requests`` (the dashboard) adds ``per_request``: the first that many requests' rows, as
    ``--per-request`` writes them (lengths, hits and the miss reason; no text).
    ``sample_sessions``: the share of conversations checked (``collectors.requests.sample``),
    stated in ``sample`` (null: the whole log). ``ray``: a Ray cluster's address for the first
    pass's rendering and tokenizing (``collectors.requests.distributed``). ``workers``: processes
    rendering and tokenizing here (``collectors.requests.workers``; 1: this one)."""
    if deployment is not None and db is not None and not cache_config_rows(db, deployment) \
            and deployment_span(db, deployment) is None:
        known = deployment_names(db)
        if deployment not in known:
            raise KvplanError(f"no such deployment (known: {', '.join(known) or 'none'})", source="--deployment")
    bs, gb, notes = settings_for(db, deployment, block_size, gpu_blocks)
    own = own_block(engine_config(db, deployment), block_size, bs)
    renderer = Renderer(tokenizer, chat_template) if tokenizer is not None else None
    if renderer is None and chat_template is not None:
        raise KvplanError("--chat-template needs --tokenizer", source="--chat-template")
    sample = SessionSample(sample_sessions) if sample_sessions is not None else None
    rows: list[dict[str, Any]] = []

    def each(r: LogRequest, o: Outcome, miss: RequestMiss) -> None:
        if len(rows) < keep_requests:
            rows.append(request_row(r, o, miss))
        if on_request is not None:
            on_request(r, o, miss)

    sizes = tuple(table_sizes(own["block_size"], lmcache_chunk, (bs,)))
    result = check(paths, renderer, CheckOptions(bs, gb, lmcache_chunk, frozenset(lora), geometry=sizes,
                                                 sample=sample, workers=workers), progress=progress,
                   on_request=each, first_pass=on_ray(ray) if ray is not None else None)
    d = result.as_json()
    d["sample"] = sample.as_json() if sample is not None else None
    if sample is not None:
        notes = [f"{sample.line()}: every figure is the sample's; the per-month figures count only the sampled "
                 "requests' tokens; a prefix shared across conversations (a system prompt, a tool list) is first "
                 "seen once in a sample as in the whole log, over fewer requests, so a sample's hit rate tends to "
                 "read low (collectors/requests/README.md)", *notes]
    d["block_geometry"] = geometry_json(result, own, lmcache_chunk)
    d["notes"] = notes + d["notes"]
    d["pricing"] = pricing(result, db, deployment, cfg)
    d["tokenizer"] = renderer.name if renderer is not None else None
    if keep_requests:
        d["per_request"] = rows
    if with_example and result.examples:
        text, start, end = next(iter(result.examples.values()))
        d["example_prompt"] = {"text": text, "start": start, "end": end}
    return d
