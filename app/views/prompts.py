"""The prompts check (``kvplan prompts check``, the Prompts page, the report's section): a request
log's predicted prefix-cache hits, its cache-busters, and what fixing them is worth.

* **Engine settings**: the block size and ``num_gpu_blocks`` come from the deployment's newest
  ``vllm:cache_config_info`` when kvplan has its metrics; an option given explicitly wins; else
  16 and an unlimited cache.
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
from pathlib import Path
from typing import Any

from ...collectors.requests.check import CheckOptions, CheckResult, OnRequest, Progress, check
from ...collectors.requests.read import LogRequest
from ...collectors.requests.render import Renderer
from ...models.core.errors import KvplanError
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
                "source": f"vllm:cache_config_info of {row['target']}"}
    return None


def settings_for(db: Database | None, deployment: str | None, block_size: int | None,
                 gpu_blocks: int | None) -> tuple[int, int | None, list[str]]:
    """(block size, gpu blocks, notes saying where each came from)."""
    cfg = engine_config(db, deployment)
    notes = []
    if block_size is None:
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
    return block_size, gpu_blocks, notes


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
                  with_example: bool = False, keep_requests: int = 0) -> dict[str, Any]:
    """The whole check as one JSON-ready dict (``kvplan prompts check --json``). ``with_example``
    (the dashboard only, never the CLI or the report) adds ``example_prompt``: the first request
    the top finding broke, its rendered text and the divergent line's range, for highlighting.
    ``keep_requests`` (the dashboard) adds ``per_request``: the first that many requests' rows, as
    ``--per-request`` writes them (lengths, hits and the miss reason; no text)."""
    if deployment is not None and db is not None and not cache_config_rows(db, deployment) \
            and deployment_span(db, deployment) is None:
        known = deployment_names(db)
        if deployment not in known:
            raise KvplanError(f"no such deployment (known: {', '.join(known) or 'none'})", source="--deployment")
    bs, gb, notes = settings_for(db, deployment, block_size, gpu_blocks)
    renderer = Renderer(tokenizer, chat_template) if tokenizer is not None else None
    if renderer is None and chat_template is not None:
        raise KvplanError("--chat-template needs --tokenizer", source="--chat-template")
    rows: list[dict[str, Any]] = []

    def each(r: LogRequest, o: Outcome, miss: RequestMiss) -> None:
        if len(rows) < keep_requests:
            rows.append(request_row(r, o, miss))
        if on_request is not None:
            on_request(r, o, miss)

    result = check(paths, renderer, CheckOptions(bs, gb, lmcache_chunk, frozenset(lora)), progress=progress,
                   on_request=each)
    d = result.as_json()
    d["notes"] = notes + d["notes"]
    d["pricing"] = pricing(result, db, deployment, cfg)
    d["tokenizer"] = renderer.name if renderer is not None else None
    if keep_requests:
        d["per_request"] = rows
    if with_example and result.examples:
        text, start, end = next(iter(result.examples.values()))
        d["example_prompt"] = {"text": text, "start": start, "end": end}
    return d
