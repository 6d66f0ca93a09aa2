"""PromQL for aggregated ingestion, and the recording-rule pack built from it.

One increase per step and series, summed over the per-engine labels:

    sum without (instance, pod, engine, ...) (
      (last_over_time(x[step] offset d) - last_over_time(x[lookback] offset d+step)) >= 0
      or
      last_over_time(x[step] offset d) - min_over_time(x[step] offset d)
    )

The first term is the last sample in the step minus the last sample before it, so steps
telescope: their sum is the raw samples' increase (``increase()`` extrapolates and leaves out
the pair across each step edge). After a drop (a restart), or for a series with no sample in
the ``lookback`` before the step (new, or back from a longer silence), the second term counts
the climb inside the step: what was counted before its first sample there is lost, at most
one step of one engine per event. Gauges: max (and in the pack also sum) over the engines of
each engine's last value in the step; engines: how many series of one per-engine gauge reported.

The families are kvplan's catalog (``FAMILIES``) plus the older spellings of the same
quantities (``EXTRA_SPELLINGS``, from the version table in shared/docs/metrics.md), so a family
added to the catalog is in both query-time aggregation and the pack (``kvplan rules``; the
checked-in ``deploy/prometheus/rules/kvplan.rules.yml`` must equal ``render()``, a test says).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models.inputs.settings_checks import PER_ENGINE_LABELS as PER_ENGINE_LABELS  # (importers take it from here)
from ...models.metrics.catalog import (
    ENGINE_COUNTS,
    EXTERNAL_HITS,
    FAMILIES,
    PREFIX_HITS,
    PROMPT_TOKENS_CACHED,
    ROUTER_MARKERS,
    RUNNING,
)

LEVEL = "deployment_model"
RULE_STEP_S = 60
DELAY_LABEL = "kvplan_delay"

EXTRA_SPELLINGS: dict[str, str] = {
    # vLLM before 0.11 (gpu_ prefix; V0 hit-rate gauge; per-token TPOT; old KV gauge)
    "vllm:gpu_prefix_cache_hits": "counter", "vllm:gpu_prefix_cache_queries": "counter",
    "vllm:time_per_output_token_seconds": "histogram", "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:gpu_prefix_cache_hit_rate": "gauge",
    # SGLang
    "sglang:prompt_tokens": "counter", "sglang:generation_tokens": "counter", "sglang:cached_tokens": "counter",
    "sglang:num_requests": "counter", "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram", "sglang:time_per_output_token_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram", "sglang:queue_time_seconds": "histogram",
    "sglang:token_usage": "gauge", "sglang:num_running_reqs": "gauge", "sglang:num_queue_reqs": "gauge",
    # LMCache in-process (lookup hit rate; usage)
    "lmcache:num_lookup_tokens": "counter", "lmcache:num_lookup_hits": "counter",
    "lmcache:local_cache_usage": "gauge",
}
KINDS = ("vllm", "sglang", "lmcache_mp", "lmcache_inproc")
ENGINE_GAUGES = {"vllm": (RUNNING, ()), "sglang": ("sglang:num_running_reqs", ()),
                 "lmcache_mp": ("lmcache_mp_l1_usage_ratio", ("backend", "l1_tag"))}
"""Per kind: a gauge every engine (server) exposes once, and labels to fold first."""


def kind_of(family: str) -> str:
    for kind, prefix in (("vllm", "vllm:"), ("sglang", "sglang:"), ("lmcache_mp", "lmcache_mp_"),
                         ("lmcache_inproc", "lmcache:")):
        if family.startswith(prefix):
            return kind
    raise ValueError(f"{family!r}: no known engine prefix")


def families() -> dict[str, str]:
    """Every family aggregated: the catalog's (less the router markers, which say what to leave
    out), then the older spellings (type by family)."""
    out = {f: t for f, t in FAMILIES.items() if f not in ROUTER_MARKERS}
    for f, t in EXTRA_SPELLINGS.items():
        out.setdefault(f, t)
    return out


def samples_of(family: str, typ: str) -> tuple[str, ...]:
    return {"counter": (f"{family}_total",), "histogram": tuple(family + s for s in ("_bucket", "_count", "_sum")),
            "gauge": (family,)}[typ]


# -- expressions -------------------------------------------------------------------------
def _dur(s: int) -> str:
    return f"{s // 60}m" if s % 60 == 0 else f"{s}s"


def _rng(name: str, selector: str, rng_s: int, off_s: int, left_open: bool = False) -> str:
    # Prometheus 2.x ranges hold both ends (3.x leave the left one out): for gauges, whose
    # last value belongs to one step only, leave out the step's first millisecond on both
    sel = f"{name}{{{selector}}}" if selector else name
    rng = f"{rng_s - 1}s999ms" if left_open else _dur(rng_s)
    return f"{sel}[{rng}]" + (f" offset {_dur(off_s)}" if off_s else "")


@dataclass(frozen=True)
class Window:
    """Step, how far back a series' previous sample may lie, and how long ago the step ended."""

    step_s: int = RULE_STEP_S
    lookback_s: int = 600
    delay_s: int = 60


MAX_COUNTER = 9007199254740992
"""2**53: a counter sample above it (or NaN, or infinite, or negative) is refused, as a direct
import refuses it (``collectors.scrape.parse_checks.MAX_COUNTER``)."""


ROUTER_MEMORY_S = 86400
"""How long a target that wrote a router marker stays a router for the sums: a day. Raw mode
refuses a target for a whole ingestion chunk once a marker is in it; a router that writes its
markers only now and then (they were 20 minutes apart, beyond the lookback) would otherwise
join the fleet at the steps between them (issue 33, F16)."""


def _routers(selector: str, w: Window) -> str:
    """The targets (job, instance) that are routers or gateways, as any marker they wrote in the
    last ``ROUTER_MEMORY_S`` (and the step) says: raw mode refuses them (``parse_checks.router_of``);
    the sums leave them out the same way."""
    names = "|".join(ROUTER_MARKERS)
    sel = f'{{__name__=~"{names}"{"," + selector if selector else ""}}}'
    return f"last_over_time({sel}[{_dur(ROUTER_MEMORY_S + w.step_s)}]" + (
        f" offset {_dur(w.delay_s)})" if w.delay_s else ")")


def _no_routers(expr: str, selector: str, w: Window) -> str:
    return f"(\n  (\n  {expr}\n  )\n  unless on (job, instance) {_routers(selector, w)}\n)"


def _good(expr: str) -> str:
    """``expr`` without the samples a direct import refuses: NaN, infinite, negative, above 2**53
    (a comparison drops them, NaN included)."""
    return f"({expr} >= 0 <= {MAX_COUNTER})"


def _inc(sample: str, w: Window, selector: str) -> str:
    cur = _good(f"last_over_time({_rng(sample, selector, w.step_s, w.delay_s)})")
    prev = _good(f"last_over_time({_rng(sample, selector, w.lookback_s, w.delay_s + w.step_s)})")
    low = _good(f"min_over_time({_rng(sample, selector, w.step_s, w.delay_s)})")
    return f"(({cur} - {prev}) >= 0\n  or\n  {cur} - {low})"


def increase_expr(sample: str, w: Window, *, selector: str = "", without: tuple[str, ...] = PER_ENGINE_LABELS) -> str:
    """Per series the step's increase (see the module doc), summed over the per-engine labels,
    routers left out. ``vllm:prompt_tokens_cached_total`` is each engine's cached tokens by its
    release's rule (the family where it has it, vLLM 0.16 on; else prefix-cache hits plus external
    hits), so a fleet mixing releases sums what raw mode sums per target."""
    term = _inc(sample, w, selector)
    if sample == f"{PROMPT_TOKENS_CACHED}_total":
        hits, ext = (_inc(f"{f}_total", w, selector) for f in (PREFIX_HITS, EXTERNAL_HITS))
        term = f"{term}\n  or\n  ({hits}\n  + {ext})\n  or\n  {hits}"
    return f"sum without ({', '.join(without)}) {_no_routers(term, selector, w)}"


def gauge_expr(sample: str, agg: str, w: Window, *, selector: str = "",
               without: tuple[str, ...] = PER_ENGINE_LABELS) -> str:
    x = f"last_over_time({_rng(sample, selector, w.step_s, w.delay_s, left_open=True)})"
    return f"{agg} without ({', '.join(without)}) {_no_routers(x, selector, w)}"


def engines_expr(kind: str, w: Window, *, selector: str = "", without: tuple[str, ...] = PER_ENGINE_LABELS) -> str:
    gauge, fold = ENGINE_GAUGES[kind]
    x = f"last_over_time({_rng(gauge, selector, w.step_s, w.delay_s, left_open=True)})"
    if fold:
        x = f"max without ({', '.join(fold)}) ({x})"
    return f"count without ({', '.join(without)}) {_no_routers(x, selector, w)}"


# -- what is asked for ---------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """One per-step sum kvplan stores: the expression (query-time), the pack's record name, and
    what it lands as (the raw sample name, family and type of the fleet series)."""

    record: str
    expr: str
    sample: str
    family: str
    typ: str
    kind: str


def metric_part(family: str) -> str:
    return family.replace(":", "_")


def queries(w: Window, *, selector: str = "", without: tuple[str, ...] = PER_ENGINE_LABELS,
            with_sums: bool = False) -> list[Query]:
    """Every per-step sum, by kind then catalog order. ``with_sums``: gauges' sums too (the
    pack records them for dashboards; kvplan stores the max)."""
    step = _dur(w.step_s)
    out: list[Query] = []
    fams = families()
    for kind in KINDS:
        for fam, typ in fams.items():
            if kind_of(fam) != kind:
                continue
            if typ == "gauge":
                for agg in ("max", "sum") if with_sums else ("max",):
                    out.append(Query(f"{LEVEL}:{metric_part(fam)}:{agg}{step}",
                                     gauge_expr(fam, agg, w, selector=selector, without=without), fam, fam, typ, kind))
                continue
            for sample in samples_of(fam, typ):
                part = metric_part(fam) + ("" if typ == "counter" else sample[len(fam):])
                out.append(Query(f"{LEVEL}:{part}:increase{step}",
                                 increase_expr(sample, w, selector=selector, without=without), sample, fam, typ, kind))
        if kind in ENGINE_GAUGES:
            family = ENGINE_COUNTS[kind]  # kvplan:vllm_engines, ... (the catalog spells them for sql/ too)
            name = family.removeprefix("kvplan:")
            out.append(Query(f"{LEVEL}:{name}:count{step}", engines_expr(kind, w, selector=selector, without=without),
                             family, family, "gauge", kind))
    return out


# -- the pack ------------------------------------------------------------------------------
HEADER = """\
# kvplan's recording rules: per-step sums across engines, per deployment, model and bucket.
# GENERATED by `kvplan rules` (collectors/prometheus/rules.py); edit the generator, not this file.
#
# Every rule records, each minute, the increase over the minute that ended {delay} before the
# evaluation (label kvplan_delay; the delay lets late scrapes and remote-write land first):
#   last sample in the minute - last sample before it (up to {lookback} earlier),
# summed over the per-engine labels
#   {without}
# keeping every other label (job, namespace, kvplan_deployment, model_name, le, source, ...),
# so a deployment's prometheus_selector selects the outputs as it selects the raw series.
# Consecutive minutes telescope: their sum is the exact increase of the raw samples (unlike
# increase(), which extrapolates and leaves out the pair across the minute's edge). A series
# that dropped (a restart) or has no sample in the {lookback} before the minute (new, or back
# from a longer silence) counts its climb inside the minute: what it counted before its first
# sample there (and before a drop inside the minute) is left out, at most one minute of one
# engine. Gauges: max and sum of each engine's last value in the minute; engines (servers)
# reporting: how many series of one gauge per engine. Checked by `promtool check rules` and
# unit-tested by kvplan.rules.test.yml (`promtool test rules`).
"""


def rule_groups(w: Window, without: tuple[str, ...] = PER_ENGINE_LABELS) -> list[dict]:
    labels = {DELAY_LABEL: _dur(w.delay_s)}
    groups = []
    qs = queries(w, without=without, with_sums=True)
    for kind in KINDS:
        rules = [{"record": q.record, "expr": q.expr, "labels": dict(labels)} for q in qs if q.kind == kind]
        groups.append({"name": f"kvplan_{kind}", "interval": _dur(w.step_s), "rules": rules})
    return groups


def render(w: Window = Window(), without: tuple[str, ...] = PER_ENGINE_LABELS) -> str:
    """The rule file (Prometheus, Thanos Ruler, Mimir ruler, vmalert)."""
    out = [HEADER.format(delay=_dur(w.delay_s), lookback=_dur(w.lookback_s), without=", ".join(without)), "groups:"]
    for g in rule_groups(w, without):
        out += [f"  - name: {g['name']}", f"    interval: {g['interval']}", "    rules:"]
        for r in g["rules"]:
            out += [f"      - record: {r['record']}", "        expr: |"]
            out += [f"          {line}" for line in r["expr"].splitlines()]
            out.append("        labels:")
            out += [f"          {k}: {v}" for k, v in r["labels"].items()]
    return "\n".join(out) + "\n"


def render_prometheusrule(w: Window = Window(), without: tuple[str, ...] = PER_ENGINE_LABELS, *,
                          namespace: str = "monitoring", labels: dict[str, str] | None = None) -> str:
    """The same groups as a Prometheus Operator ``PrometheusRule``."""
    import yaml  # pyyaml: only for this output

    class _Block(yaml.SafeDumper):
        """Multi-line strings (the expressions) as literal blocks."""

    _Block.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v,
                                                               style="|" if "\n" in v else None))
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "kvplan", "namespace": namespace, "labels": dict(labels or {})},
           "spec": {"groups": rule_groups(w, without)}}
    return "# GENERATED by `kvplan rules --format prometheusrule`\n" + yaml.dump(doc, Dumper=_Block, sort_keys=False,
                                                                             width=200)

