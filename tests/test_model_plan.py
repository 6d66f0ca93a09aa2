"""plan(): one JSON-serialisable result with everything a page or report needs; field docs."""

import ast
import json
import pathlib

import pytest

from kvplan.models.decision.plan import plan
from kvplan.models.decision.verdict import PlanInputs
from kvplan.models.inputs.planning import PlanningInputs
from kvplan.models.inputs.pricebook import PriceBook
from kvplan.models.prefill.measurement import PrefillMeasurement

DAY = 86400.0
PB = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5, ops_hours_per_month=4,
               usd_per_ops_hour=100)


def measured(**change):
    # 10 req/s of 10,000-token prompts, 80 % cached, 8 GPUs, estimator C only:
    # 2,337.792 saved GPU-hours/month -> $5,844.48 (see test_model_decision)
    total = DAY * 10 * 10_000
    return PrefillMeasurement(**{**dict(
        window_seconds=DAY, requests=DAY * 10, prompt_tokens=total,
        cached_prompt_tokens=total * 0.8, num_gpus=8, model_params=1e9, gpu_peak_flops=1e14,
        assumed_prefill_mfu=0.5), **change})


def test_plan_has_every_output():
    r = plan(PlanInputs(measured(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    assert r.decision.kind == "REUSE"
    assert r.source == "measured"
    assert r.monthly_benefit_usd == pytest.approx(5844.48 - 400)
    assert r.terms == pytest.approx({"saved_prefill_usd": 5844.48, "throughput_usd": 0.0,
                                     "deferral_usd": 0.0, "overhead_usd": 400.0})
    assert r.saved_prefill_gpu_hours == pytest.approx(2337.792)
    # u = sqrt(1/864000 + 0 + 0.3^2) (one estimator, a full day)
    u = (1 / 864000 + 0.09) ** 0.5
    assert r.saved_prefill_gpu_hours_low == pytest.approx(2337.792 * (1 - u))
    assert r.saved_prefill_gpu_hours_high == pytest.approx(2337.792 * (1 + u))
    # without reuse: 10,000 tokens / 25,000 tok/s = 0.4 s, a = 10 x 0.4 = 4, target 2 s
    #   c=5: C = 42.667/77 = 0.554, W99 = ln(55.4)/(12.5-10) = 1.606 -> 2.006 s (miss)
    #   c=6: C = 17.067/59.933 = 0.285, W99 = ln(28.5)/(15-10) = 0.670 -> 1.07 s
    assert r.gpus_needed_without_reuse == 6
    # with reuse: 0.08 s, a = 0.8, c=1: C = 0.8, W99 = ln(80)/(12.5-10) = 1.753 -> 1.83 s
    assert r.gpus_needed_with_reuse == 1
    assert r.current_gpus == 8
    assert len(r.waterfall) == 5 and len(r.sensitivity) == 4
    assert r.hit_rate == pytest.approx(0.8)
    assert len(r.estimators) == 3
    assert any("30.44 days" in a for a in r.assumptions)
    assert any("compute_params" in a for a in r.assumptions)


def test_to_dict_is_strict_json():
    r = plan(PlanInputs(measured(), PB, PlanningInputs(ttft_p99_slo_seconds=2.0)))
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    for key in ("decision", "reason", "monthly_benefit_usd", "terms", "saved_prefill_gpu_hours",
                "gpus_needed_with_reuse", "gpus_needed_without_reuse", "waterfall",
                "sensitivity", "assumptions", "inputs"):
        assert key in d, key
    assert d["decision"] == "REUSE" and d["reason"] == r.reason == r.decision.reason
    assert d["flips"] == list(r.decision.flips)
    assert d["waterfall"][0]["label"] == "Saved prefill GPU-hours"
    assert d["inputs"]["pricebook"]["usd_per_gpu_hour"] == 2.5
    assert d["sensitivity"][0]["name"] == "GPU price"


def test_need_data_plan_is_still_serialisable():
    m = PrefillMeasurement(window_seconds=600, requests=0, prompt_tokens=0,
                           cached_prompt_tokens=0, num_gpus=1)
    r = plan(PlanInputs(m, PB, PlanningInputs()))
    assert r.decision.kind == "NEED_DATA"
    assert r.monthly_benefit_usd is None and r.waterfall == [] and r.sensitivity == []
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["terms"]["overhead_usd"] is None


def test_everything_cached_is_still_strict_json():
    # 100 % hits: no prefill work, the fleet's maximum load is unbounded (kept out of JSON)
    r = plan(PlanInputs(measured(cached_prompt_tokens=DAY * 10 * 10_000 * 1.0), PB,
                        PlanningInputs(ttft_p99_slo_seconds=2.0, growth_rate_per_month=0.5)))
    assert r.evaluation.capacity.max_requests_per_second_with_reuse is None
    assert r.gpus_needed_with_reuse == 1
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["runout_month_with_reuse"] is None


def test_source_must_be_known():
    with pytest.raises(ValueError, match="source"):
        plan(PlanInputs(measured(), PB, PlanningInputs()), source="guess")


MODELS = pathlib.Path(__file__).resolve().parents[1] / "models"
MODEL_FILES = sorted(str(p.relative_to(MODELS)) for p in MODELS.rglob("*.py"))
"""Every module of models/, from the tree: a new one is checked the day it is added."""


def test_the_model_file_list_comes_from_the_tree():
    assert {"core/errors.py", "metrics/window.py", "decision/verdict.py"} <= set(MODEL_FILES)
    assert len(MODEL_FILES) >= 40


@pytest.mark.parametrize("name", MODEL_FILES)
def test_every_public_dataclass_field_is_documented(name):
    """A field of a public class is documented by a string right under it, or (PriceBook,
    PlanningInputs, DeploymentFacts) by its ``spec`` metadata. Every module with code has a
    docstring (the subpackages' empty ``__init__.py`` files have none to give)."""
    text = (MODELS / name).read_text()
    tree = ast.parse(text)
    undocumented = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")):
        for i, st in enumerate(cls.body):
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                nxt = cls.body[i + 1] if i + 1 < len(cls.body) else None
                doc = isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                    and isinstance(nxt.value.value, str)
                meta = isinstance(st.value, ast.Call) and (getattr(st.value.func, "id", "") in ("_f", "spec") or (
                    getattr(st.value.func, "id", "") == "Field"  # the settings: pydantic's description
                    and any(k.arg == "description" for k in st.value.keywords)))
                if not (doc or meta):
                    undocumented.append(f"{cls.name}.{st.target.id}")
    assert undocumented == []
    assert ast.get_docstring(tree) or not text.strip(), f"{name} needs a module docstring"
