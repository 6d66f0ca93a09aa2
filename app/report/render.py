"""HTML pieces every report section uses: a chart as inline SVG (vl-convert renders the
dashboard's own Altair spec) and a table. Both the report (``kvplan.app.report.html``) and its what-if
section (``kvplan.app.report.whatif``) import them from here.

Inside ``charts_in_background()`` (the report's ``render_html``) a chart is handed to vl-convert
on one background thread and a marker stands in for it until ``fill``: vl-convert renders in
Rust and Deno without the GIL, so its rendering of one chart overlaps the Python that builds
the next chart's spec and the tables (one thread: vl-convert renders one chart at a time
anyway). The HTML is the same bytes either way."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from html import escape
from typing import Any
from uuid import uuid4

import altair as alt

WIDTH = 620
"""Every report chart's width in pixels (A4 less the margins)."""


class BackgroundCharts:
    """Charts handed to vl-convert on one background thread, in the order they were asked for;
    ``fill`` puts each one's SVG in place of its marker."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kvplan-report-svg")
        self._jobs: list[Future[str]] = []
        self._tag = uuid4().hex  # markers no escaped report text can spell

    def add(self, spec: dict) -> str:
        import vl_convert

        self._jobs.append(self._pool.submit(vl_convert.vegalite_to_svg, spec))
        return f"<!--chart {self._tag} {len(self._jobs) - 1}-->"

    def fill(self, html: str) -> str:
        """``html`` with every marker replaced by its chart's SVG (an error in a chart is raised here)."""
        svgs = [job.result() for job in self._jobs]
        return re.sub(f"<!--chart {self._tag} ([0-9]+)-->", lambda m: svgs[int(m.group(1))], html)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_background: ContextVar[BackgroundCharts | None] = ContextVar("kvplan_report_charts", default=None)


@contextmanager
def charts_in_background() -> Iterator[BackgroundCharts]:
    """While open, ``svg`` hands its chart to one background thread and returns a marker; call
    ``fill`` on the finished HTML (module doc)."""
    bg = BackgroundCharts()
    token = _background.set(bg)
    try:
        yield bg
    finally:
        _background.reset(token)
        bg.close()


def svg(chart: alt.TopLevelMixin) -> str:
    """The chart as inline SVG in a ``div.chart`` (or its marker inside ``charts_in_background``)."""
    # not validated against the Vega-Lite schema again (a quarter of the report's Altair time): these
    # are the dashboard's specs, validated where tests/test_charts.py builds them
    spec = chart.properties(width=WIDTH).to_dict(validate=False)
    bg = _background.get()
    if bg is not None:
        return f'<div class="chart">{bg.add(spec)}</div>'
    import vl_convert

    return f'<div class="chart">{vl_convert.vegalite_to_svg(spec)}</div>'


def table(headers: list[str], rows: list[list[Any]], numeric: Collection[int] = frozenset()) -> str:
    if not rows:
        return '<p class="meta">none</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
