"""Cost & decision: the benefit waterfall, the capacity projection, the sensitivity tornado,
the editable price book and planning inputs, and the articles' planning presets."""

from typing import Any

import pandas as pd
import streamlit as st

from kvplan.app import charts_cost, state
from kvplan.app.data.store import save_facts, save_price_form
from kvplan.app.report import fmt
from kvplan.app.views.cost import CostView, cost_view
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.fields import FieldSpec
from kvplan.models.decision.presets import PRESETS
from kvplan.models.inputs.deployment import DEPLOYMENT_FIELDS, DeploymentFacts
from kvplan.models.inputs.planning import PLANNING_FIELDS, PlanningInputs
from kvplan.models.inputs.pricebook import FIELDS, PriceBook


def save(deployment: str) -> None:
    """Form callback (runs before the rerun, so the page shows the new plan at once)."""
    pb = {f.name: st.session_state[f"pb_{deployment}_{f.name}"] for f in FIELDS}
    pl = {f.name: st.session_state[f"pl_{deployment}_{f.name}"] for f in PLANNING_FIELDS}
    try:
        save_price_form(state.db(), deployment, pb, pl)
        st.session_state["pricebook_msg"] = ("success", f"Price book saved for {deployment!r}.")
    except KvplanError as e:
        st.session_state["pricebook_msg"] = ("error", f"Not saved: {e}")


def save_deployment_facts(deployment: str) -> None:
    """Form callback for the deployment facts."""
    values = {f.name: st.session_state[f"df_{deployment}_{f.name}"] for f in DEPLOYMENT_FIELDS}
    try:
        save_facts(state.db(), deployment, values)
        st.session_state["facts_msg"] = ("success", f"Deployment facts saved for {deployment!r}.")
    except KvplanError as e:
        st.session_state["facts_msg"] = ("error", f"Not saved: {e}")


def field(prefix: str, spec: FieldSpec, value: Any) -> None:
    key, label = f"{prefix}_{spec.name}", f"{spec.name} ({spec.unit})" if spec.unit else spec.name
    if spec.kind == "choice":
        st.selectbox(label, spec.choices, index=spec.choices.index(value), key=key, help=spec.help)
    elif spec.kind == "str":
        st.text_input(label, value=value, key=key, help=spec.help)
    elif spec.kind in ("int", "optional_int"):
        st.number_input(label, value=value, step=1, key=key, help=spec.help, placeholder="measured")
    elif spec.kind == "optional_float":
        st.number_input(label, value=None if value is None else float(value), step=None, format="%g", key=key,
                        help=spec.help, placeholder="not given")
    else:
        st.number_input(label, value=float(value), step=None, format="%g", key=key, help=spec.help)


@st.cache_resource(show_spinner=False)
def preset_plans() -> dict:
    return {k: p.plan() for k, p in PRESETS.items()}


def plan_sections(sel: state.Selection, v: Any) -> None:
    """The plan of the window: decision, waterfall, tiers, capacity, sensitivity."""
    p = v.plan
    state.caption(sel, f"price book: {v.pricebook_origin}")
    state.badge(p.decision)
    state.tier_decisions(p)
    for f in p.decision.flips:
        st.markdown(f"- would change if: {f}")

    c = st.columns(4)
    c[0].metric("Monthly benefit", fmt.usd(p.monthly_benefit_usd))
    c[1].metric("Benefit band", fmt.usd_band(p.monthly_benefit_low_usd, p.monthly_benefit_high_usd))
    c[2].metric("Saved prefill GPU-hours / month", fmt.number(p.saved_prefill_gpu_hours))
    c[3].metric("Purchase deferred", "n/a" if p.deferral_months is None else f"{p.deferral_months:.1f} months")
    if p.waterfall:
        state.chart(charts_cost.waterfall_chart(p.waterfall))
        st.dataframe(pd.DataFrame([{"term": r.label, "$ / month": fmt.usd(r.usd),
                                    "band": fmt.usd_band(r.low, r.high)} for r in p.waterfall]), hide_index=True)

    st.subheader("Saved prefill by cache tier")
    state.prefill_summary(p)
    st.caption("The decision on LMCache weighs only LMCache's part; vLLM's own prefix cache comes free with vLLM.")

    st.subheader("Capacity projection")
    c = st.columns(4)
    c[0].metric("GPUs today", fmt.gpus(p.current_gpus), help=f"{v.gpus_origin}.")
    c[1].metric("Needed with reuse", fmt.gpus(p.gpus_needed_with_reuse), help=p.why_no_gpus_with_reuse)
    c[2].metric("Needed without reuse", fmt.gpus(p.gpus_needed_without_reuse), help=p.why_no_gpus_without_reuse)
    c[3].metric("Runs out (with / without)", f"{fmt.months(p.runout_month_with_reuse, 'never')} / "
                f"{fmt.months(p.runout_month_without_reuse, 'never')}",
                help=f"Within the {v.planning.horizon_months}-month horizon at "
                     f"{v.planning.growth_rate_per_month:.0%}/month growth; 'never' = not within it.")
    c = st.columns(4)
    c[0].metric("Sized by", "goodput" if p.capacity_method == "goodput" else "queueing",
                help=fmt.capacity_method(p) + ". A `kvplan pilot --sweep` replaces the formula with measured goodput.")
    c[1].metric("GPUs per replica", fmt.gpus(p.gpus_per_replica),
                help="Tensor x pipeline parallel, or more when weights + KV do not fit in one GPU's memory.")
    c[2].metric("Busiest hour", fmt.number(p.peak_hour_requests_per_s, "req/s"),
                help="Requests per second of the busiest hour in the window: what the fleet is sized for.")
    c[3].metric("Decision flips in", fmt.pct(p.flip_probability),
                help="Share of 200 resampled scenarios (hit rate, per-token cost, price, growth ranges) whose "
                     "decision differs from this one.")
    if p.replica_message:
        st.warning(p.replica_message)
    hz = p.horizon_cost_usd or {}
    st.dataframe(pd.DataFrame([
        {"path": "without reuse (buy when the SLO breaks)",
         "purchases": fmt.schedule(p.purchase_schedule_without_reuse),
         "cost over the horizon": fmt.usd(hz.get("baseline"))},
        {"path": "with reuse (cache overhead now, buy later)",
         "purchases": fmt.schedule(p.purchase_schedule_with_reuse),
         "cost over the horizon": fmt.usd(hz.get("reuse"))}]), hide_index=True)
    if v.schedule:
        state.chart(charts_cost.capacity_chart(v.schedule, p.current_gpus))
    sw = v.sweep
    if sw is not None and sw.pair is not None:
        st.markdown(f"**{sw.pair.label[0].upper() + sw.pair.label[1:]}**")
        if sw.cpu_scale:
            st.caption("Measured on a CPU stack with a tiny model: CPU-scale seconds, not GPU results.")
        state.chart(charts_cost.sweep_curves_chart(sw.rows, sw.ttft_slo_s, sw.goodput_rows,
                                                   sw.load_kind or "concurrency"))
        st.dataframe(pd.DataFrame([{"side": r["side"], "goodput (req/s)": fmt.number(r["goodput_rps"]),
                                    "limited by": r["limited_by"], "note": r["note"]} for r in sw.goodput_rows]),
                     hide_index=True)
    else:
        st.caption("No load sweep stored: sized with the queueing formula. `kvplan pilot --sweep --off-url URL "
                   "--on-url URL --rates 2,4,8,16` measures each replica's goodput at the SLOs.")

    st.subheader("Sensitivity")
    if p.sensitivity:
        state.chart(charts_cost.tornado_chart(p.sensitivity))
    else:
        st.info("No sensitivity without a priced plan (see the decision above).")


def forms(sel: state.Selection, v: Any) -> None:
    """The editable price book, planning inputs and deployment facts. Shown even when the saved
    values cannot be read (the view failed): then with the defaults, so a bad saved value can be
    overwritten from here."""
    pricebook = v.pricebook if v is not None else PriceBook()
    planning = v.planning if v is not None else PlanningInputs()
    facts = v.facts if v is not None else None
    st.subheader("Price book and planning inputs")
    kind, text = st.session_state.pop("pricebook_msg", (None, None))
    if kind:
        (st.success if kind == "success" else st.error)(text)
    with st.form(f"pricebook_{sel.deployment}"):
        left, right = st.columns(2)
        with left:
            st.caption("Price book (yours to set; defaults are placeholders)")
            for spec in FIELDS:
                field(f"pb_{sel.deployment}", spec, getattr(pricebook, spec.name))
        with right:
            st.caption("Planning inputs")
            for spec in PLANNING_FIELDS:
                field(f"pl_{sel.deployment}", spec, getattr(planning, spec.name))
        st.form_submit_button("Save price book", on_click=save, args=(sel.deployment,))

    st.subheader("Deployment facts")
    st.caption("What the metrics cannot know: GPUs per engine (tensor x pipeline parallel), the GPU and the model. "
               f"In force: {facts.origin if facts else 'defaults'}. The FLOP-based estimators run when peak FLOP/s "
               "and model parameters are given.")
    kind, text = st.session_state.pop("facts_msg", (None, None))
    if kind:
        (st.success if kind == "success" else st.error)(text)
    with st.form(f"facts_{sel.deployment}"):
        cols = st.columns(3)
        for i, spec in enumerate(DEPLOYMENT_FIELDS):
            with cols[i % 3]:
                field(f"df_{sel.deployment}", spec, getattr(facts.facts if facts else DeploymentFacts(), spec.name))
        st.form_submit_button("Save deployment facts", on_click=save_deployment_facts, args=(sel.deployment,))


st.title("Cost & decision")
sel = state.selection()
if sel is not None:
    v: CostView | None
    try:
        v = state.view(cost_view, sel.deployment, sel.t_from, sel.t_to, sel.model_name, cfg=state.cfg(sel.deployment))
    except KvplanError as e:  # e.g. a saved value that no longer validates: the forms below fix it
        st.error(f"{e}")
        v = None
    if v is not None:
        plan_sections(sel, v)
    forms(sel, v)

st.subheader("Published planning presets")
st.warning("These are the source articles' published scenarios turned into model inputs: PLANNING PRESETS, "
           "not measurements of your deployment. Each lists what is published and what we assumed.")
for key, preset in PRESETS.items():
    r = preset_plans()[key]
    with st.expander(f"PLANNING PRESET · {preset.title}"):
        st.markdown(f"**{r.decision.kind}**: {r.decision.reason} Monthly benefit {fmt.usd(r.monthly_benefit_usd)} "
                    f"({fmt.usd_band(r.monthly_benefit_low_usd, r.monthly_benefit_high_usd)}).")
        st.caption(f"Published in {preset.source_file}:")
        st.dataframe(pd.DataFrame([{"figure": k, "published": x} for k, x in preset.published.items()]),
                     hide_index=True)
        st.caption("Assumed or derived by us:")
        st.markdown("\n".join(f"- {a}" for a in preset.assumed))
