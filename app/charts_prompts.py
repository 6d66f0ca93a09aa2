"""Altair charts of the prompts check (``kvplan.app.views.prompts``): data in, chart out, no
Streamlit. The Prompts page renders them."""

from __future__ import annotations

from collections.abc import Mapping

import altair as alt
import pandas as pd


def miss_reason_chart(reasons: Mapping[str, int]) -> alt.Chart:
    """Requests per miss reason (the first token each computed, ``models.prompts.reasons``), most first."""
    df = pd.DataFrame([{"reason": str(k), "requests": int(v)} for k, v in reasons.items()],
                      columns=["reason", "requests"])
    return alt.Chart(df, title="Why each request missed (its first computed token)").mark_bar().encode(
        x=alt.X("requests:Q", title="requests"),
        y=alt.Y("reason:N", sort="-x", title=None),
        tooltip=["reason", alt.Tooltip("requests:Q", format=",")],
    )
