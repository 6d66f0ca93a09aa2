"""HTML pieces every report section uses: a chart as inline SVG (vl-convert renders the
dashboard's own Altair spec) and a table. Both the report (``kvplan.app.report.html``) and its what-if
section (``kvplan.app.report.whatif``) import them from here."""

from __future__ import annotations

from collections.abc import Collection
from html import escape
from typing import Any

import altair as alt


def svg(chart: alt.TopLevelMixin) -> str:
    import vl_convert

    return f'<div class="chart">{vl_convert.vegalite_to_svg(chart.properties(width=620).to_dict())}</div>'


def table(headers: list[str], rows: list[list[Any]], numeric: Collection[int] = frozenset()) -> str:
    if not rows:
        return '<p class="meta">none</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
