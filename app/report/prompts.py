"""The capacity report's prompts section: a request log's predicted prefix-cache hits, the first
miss per request, the cache-busters and what fixing them is worth (each remedy's rate for a turn
the template rewrites) and the block-geometry table, from the output of ``kvplan prompts check
--json`` (``kvplan report --prompts-check FILE``). Only numbers and the findings' redacted span shapes:
the JSON holds no prompt text, and neither does this section."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from ...models.core.errors import KvplanError
from . import fmt
from .render import table

TITLE = "9. Prompt cacheability (request log)"
REQUIRED = ("requests", "prompt_tokens", "cached_tokens_predicted", "hit_rate_predicted", "hit_rate_unlimited",
            "hit_rate_if_fixed", "findings", "missed_by_cause")


def load_check(path: Path) -> dict[str, Any]:
    """A saved ``kvplan prompts check --json`` output; ``KvplanError`` naming the file otherwise."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise KvplanError(f"cannot read: {e.strerror or e}", source=f"--prompts-check {path}") from None
    except ValueError as e:
        raise KvplanError(f"not JSON: {e}", source=f"--prompts-check {path}") from None
    missing = [k for k in REQUIRED if not isinstance(d, dict) or k not in d]
    if missing:
        raise KvplanError(f"not a `kvplan prompts check --json` output (no {', '.join(missing)})",
                          source=f"--prompts-check {path}")
    return d


def render_section(d: dict[str, Any]) -> str:
    """The section for one check."""
    cap = f"{d['gpu_blocks']:,} GPU blocks" if d.get("gpu_blocks") else "an unlimited cache"
    out = [f"<h2>{TITLE}</h2>",
           f"<p>{d['requests']:,} logged requests, {d['prompt_tokens']:,} prompt tokens, rendered with the model's "
           f"tokenizer and chat template and hashed as vLLM does (block size {d.get('block_size', '?')}, {cap}), "
           "served one request at a time in arrival order.</p>",
           table(["", "token hit rate"], [["predicted", fmt.pct(d["hit_rate_predicted"])],
                                          ["with an unlimited cache", fmt.pct(d["hit_rate_unlimited"])],
                                          ["with every finding fixed", fmt.pct(d["hit_rate_if_fixed"])]], {1})]
    m = d["missed_by_cause"]
    out.append("<h3>Why the missed tokens missed</h3>" + table(
        ["first seen (cold)", "evicted", "busted", "partial last block / last token"],
        [[f"{m['cold']:,}", f"{m['evicted']:,}", f"{m['busted']:,}", f"{m['partial']:,}"]], {0, 1, 2, 3}))
    reasons = d.get("miss_reasons") or {}
    if reasons:
        out.append("<h3>First miss per request</h3><p>Each request that computed tokens, by why its first computed "
                   "token was not cached (against the earlier request it shares the most with).</p>" + table(
                       ["miss reason", "requests"], [[k, f"{v:,}"] for k, v in reasons.items()], {1}))
    rows = [[f["kind"], _where(f), f.get("change") or f["example"], f"{f['requests_affected']:,}",
             f"{f['tokens_lost']:,}" if f["tokens_lost"] is not None else "-", fmt.pct(f["hit_rate_if_fixed"]),
             _fix(f)] for f in d["findings"]]
    out.append("<h3>Cache-busters</h3>" + table(
        ["kind", "where", "shape of the span", "requests", "tokens lost", "hit rate if fixed", "fix"], rows,
        {3, 4, 5}))
    out.append(geometry_section(d.get("block_geometry")))
    p = d.get("pricing") or {}
    if p.get("extra_usd_per_month_if_fixed") is not None:
        out.append(f"<p>Fixing them: <b>${p['extra_usd_per_month_if_fixed']:,.0f} per month</b> of prefill GPU time "
                   f"at the log's rate. Priced with: {escape(str(p.get('source')))}.</p>")
    elif p.get("extra_usd_per_1m_prompt_tokens_if_fixed") is not None:
        out.append(f"<p>Fixing them saves ${p['extra_usd_per_1m_prompt_tokens_if_fixed']:,.4f} per million prompt "
                   f"tokens (the log has no arrival times for a monthly figure). Priced with: "
                   f"{escape(str(p.get('source')))}.</p>")
    out.extend(f'<p class="meta">note: {escape(str(n))}</p>' for n in d.get("notes", []))
    return "".join(out)


def _where(f: dict[str, Any]) -> str:
    if f.get("template"):
        return f"template, before message {f['message_index']}"
    if f.get("change"):  # a turn the template renders differently once it is history: no line of its own
        return f"message {f['message_index']} ({f['role']})"
    return f"message {f['message_index']} ({f['role']}), line {f['line']}"


def _fix(f: dict[str, Any]) -> str:
    """The finding's fix; for a turn the template rewrites, each remedy with its own rate (as
    ``kvplan prompts check`` prints them); with the reason when a fix's rate is below today's."""
    if f.get("remedies"):
        return "; ".join(f"{fmt.pct(rm['hit_rate_if_fixed'])} if {rm['how']}" for rm in f["remedies"])
    fix = str(f.get("fix", ""))
    return fix + (f" (below today's rate: {f['below_today']})" if f.get("below_today") else "")


def geometry_section(g: dict[str, Any] | None) -> str:
    """The block-geometry table (``block_geometry`` of the check's JSON): the same log's hit rate
    at each block size with the same capacity in tokens, the deployment's own size marked; empty
    when the check has none."""
    if not g:
        return ""
    cap = f"{g['capacity_tokens']:,} tokens of cache" if g.get("capacity_tokens") is not None else "an unlimited cache"
    rows = [[f"{r['block_size']:,}", fmt.pct(r["hit_rate"]) if r.get("why_null") is None else f"- ({r['why_null']})",
             fmt.pct(r["hit_rate_unlimited"]) if r.get("hit_rate_unlimited") is not None else "-",
             ", ".join(r.get("is") or [])] for r in g["rows"]]
    own = (f" The deployment's own block, {g['own_block_size']:,} tokens, comes from {escape(str(g['own_source']))}: "
           f"{escape(str(g['own_detail']))}." if g.get("own_block_size") is not None else "")
    return (f"<h3>Hit rate by block size</h3><p>The same log replayed at each block size, with {cap} at each.{own}</p>"
            + table(["block size (tokens)", "token hit rate", "with an unlimited cache", "is"], rows, {0, 1, 2}))
