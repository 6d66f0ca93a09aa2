"""Altair charts of the prompts check (``kvplan.app.views.prompts``): data in, chart out, no
Streamlit. The Prompts page renders them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import pandas as pd

from .charts import LEGEND, Layered


def block_geometry_chart(rows: Sequence[dict[str, Any]], own: int) -> Layered:
    """Predicted hit rate against block size (log x: 16 to thousands), with the capacity given
    and with an unlimited cache; the deployment's own block size as a rule. Sizes whose rate is
    null (the capacity holds fewer than 2 blocks, a block-id trace) are left out."""
    data = [{"block_size": r["block_size"], "cache": cache, "hit_rate": r[key]}
            for r in rows for cache, key in (("capacity given", "hit_rate"), ("unlimited", "hit_rate_unlimited"))
            if r[key] is not None]
    df = pd.DataFrame(data, columns=["block_size", "cache", "hit_rate"])
    x = alt.X("block_size:Q", title="block size (tokens)", scale=alt.Scale(type="log", base=2))
    lines = (alt.Chart(df).mark_line(point=True)
             .encode(x=x, y=alt.Y("hit_rate:Q", title="predicted token hit rate", axis=alt.Axis(format="%"),
                                  scale=alt.Scale(domain=[0, 1])),
                     color=alt.Color("cache:N", legend=LEGEND),
                     tooltip=["cache:N", alt.Tooltip("block_size:Q", format=","),
                              alt.Tooltip("hit_rate:Q", format=".1%")]))
    mark = pd.DataFrame([{"block_size": own, "what": f"the deployment's own ({own})"}])
    rule = (alt.Chart(mark).mark_rule(strokeDash=[4, 3], color="gray")
            .encode(x="block_size:Q", tooltip=["what:N"]))
    return alt.layer(lines, rule, title="Hit rate against block size (the same log, the same capacity in "
                     "tokens)").properties(height=260)



def miss_reason_chart(reasons: Mapping[str, int]) -> alt.Chart:
    """Requests per miss reason (the first token each computed, ``models.prompts.reasons``), most first."""
    df = pd.DataFrame([{"reason": str(k), "requests": int(v)} for k, v in reasons.items()],
                      columns=["reason", "requests"])
    return alt.Chart(df, title="Why each request missed (its first computed token)").mark_bar().encode(
        x=alt.X("requests:Q", title="requests"),
        y=alt.Y("reason:N", sort="-x", title=None),
        tooltip=["reason", alt.Tooltip("requests:Q", format=",")],
    )
