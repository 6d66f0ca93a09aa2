"""Workload-driver runs (``kvplan pilot``) with their request-weighted cache shares: the Runs page
shows them, the Cache page and the report read their shares."""

from __future__ import annotations

from dataclasses import dataclass

from ...models.metrics.runs import default_pair, is_cpu_scale
from ...models.metrics.window import ratio
from ...sql.db import Source


@dataclass(frozen=True)
class RunsView:
    runs: list[dict]
    """run_summaries rows (newest first) plus requests_with_cache_share, cached_token_share,
    cpu_scale."""

    def default_pair(self) -> tuple[dict, dict] | None:
        return default_pair(self.runs)


def runs_view(source: Source, deployment: str) -> RunsView:
    shares = {r["run_id"]: r for r in source.fetch("run_cache_shares", deployment=deployment)}
    out = []
    for r in source.fetch("run_summaries", deployment=deployment):
        s = shares.get(r["run_id"], {})
        out.append(dict(r, requests_with_cache_share=ratio(s.get("requests_with_cache"), s.get("requests_reporting")),
                        cached_token_share=ratio(s.get("cached_tokens"), s.get("prompt_tokens")),
                        cpu_scale=is_cpu_scale(r["measured_on"])))
    return RunsView(out)
