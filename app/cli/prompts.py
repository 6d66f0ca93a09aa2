"""kvplan CLI: ``kvplan prompts check``, a request log's predicted prefix-cache hits, its
cache-busters and what fixing them is worth (issue 26)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from ...models.core.errors import KvplanError
from .common import ConfigOpt, DbOpt, err, json_text, open_reader, out, positive, refuse_overwriting, settings


def prompts_check(
    paths: Annotated[list[Path], typer.Argument(help="Request logs (.jsonl or .jsonl.gz): OpenAI chat / completions "
                                                      "bodies, Batch API input, Bailian or Mooncake traces.")],
    deployment: Annotated[str | None, typer.Option(help="Deployment whose vllm:cache_config_info (block size, "
                                                        "num_gpu_blocks), prefill cost and price book to use.")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="The model's tokenizer: a local directory, or a model id in "
                                                      "the local Hugging Face cache (never downloaded).")] = None,
    chat_template: Annotated[Path | None, typer.Option(help="A Jinja chat template overriding the tokenizer's "
                                                           "(vLLM's --chat-template).")] = None,
    block_size: Annotated[int | None, typer.Option(min=1, max=1_000_000, help="vLLM's block size (default: the "
                                                   "deployment's, its scheduling block on a hybrid model, else 16; "
                                                   "vLLM's CPU backend uses 128).")] = None,
    gpu_blocks: Annotated[int | None, typer.Option(min=2, max=2**40, help="The engine's num_gpu_blocks, for the "
                                                   "capacity-bound prediction (default: the deployment's, else "
                                                   "unlimited).")] = None,
    lmcache_chunk: Annotated[int, typer.Option(min=1, max=1_000_000, help="LMCache's chunk_size.")] = 256,
    lora: Annotated[list[str] | None, typer.Option(help="A model name that is a LoRA adapter (repeatable): its "
                                                        "name is mixed into block keys.")] = None,
    per_request: Annotated[Path | None, typer.Option(help="Write each request's predicted cached tokens here "
                                                          "(JSON lines: file, line, custom_id, prompt_tokens, "
                                                          "cached_tokens_predicted, cached_tokens_unlimited, "
                                                          "cached_tokens_measured, miss_reason, missed_tokens, "
                                                          "first_divergent_block, miss_message_index, miss_role, "
                                                          "diverged_from).")] = None,
    measured: Annotated[bool, typer.Option("--measured", help="Compare each prediction with the engine's own usage "
                                                              "logged beside the request (usage.prompt_tokens_"
                                                              "details.cached_tokens).")] = False,
    sample_sessions: Annotated[float | None, typer.Option(
        callback=positive, max=1.0, help="Check only this share of the conversations (0 < FRACTION <= 1), whole: "
        "by a session field (session_id, conversation_id), else by a hash of the first user message; the same "
        "log and fraction keep the same requests. The output says it is a sample.")] = None,
    workers: Annotated[int, typer.Option(min=1, max=256, help="Processes that render, tokenize and hash the "
                                         "prompts (each loads the tokenizer); the replay stays in one, in "
                                         "arrival order. 1: all in this process.")] = 1,
    ray: Annotated[str | None, typer.Option(metavar="ADDRESS", help="Render and tokenize the log (the first pass) "
                                            "on this Ray cluster (HOST:PORT, ray://HOST:PORT, auto; local: start "
                                            "one here); the same results. Needs pip install 'kvplan[ray]', and "
                                            "the tokenizer's path and kvplan on every worker.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Predict the prefix-cache hit rate of a request log as vLLM would serve it (one request at
    a time, in arrival order), find the cache-busters (a timestamp or id early in the prompt,
    reordered JSON or tools, a date the template writes), and what fixing them is worth."""
    from ..data.store import deployment_settings
    from ..views.prompts import prompts_check as run
    from ..views.prompts import request_row

    s = settings(config, db)
    database = open_reader(s) if deployment is not None else None
    fh: IO[str] | None = None
    if per_request is not None:
        tok_dir = Path(tokenizer) if tokenizer is not None and Path(tokenizer).is_dir() else None
        refuse_overwriting(per_request, "--per-request",
                           [("log", p) for p in paths] + [("--chat-template", chat_template), ("--db", s.db),
                                                          ("--config", config)]
                           + [("--tokenizer", f) for f in (tok_dir.iterdir() if tok_dir else ())])
        try:
            fh = open(per_request, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError as e:
            raise KvplanError(f"cannot write: {e.strerror or e}", source=f"--per-request {per_request}") from None

    def write_error(e: OSError) -> KvplanError:
        return KvplanError(f"cannot write: {e.strerror or e}", source=f"--per-request {per_request}")

    def on_request(r: Any, o: Any, miss: Any) -> None:
        if fh is not None:
            try:
                fh.write(json.dumps(request_row(r, o, miss)) + "\n")
            except OSError as e:
                raise write_error(e) from None

    def progress(stage: str, n: int) -> None:
        err.print(f"[dim]{stage}: {n:,} requests[/dim]", highlight=False)

    try:
        d = run(paths, tokenizer=tokenizer, chat_template=chat_template, block_size=block_size,
                gpu_blocks=gpu_blocks, lmcache_chunk=lmcache_chunk, lora=lora or (), deployment=deployment,
                db=database, cfg=deployment_settings(s, deployment) if deployment else deployment_settings(None, ""),
                progress=progress, on_request=on_request, sample_sessions=sample_sessions, ray=ray,
                workers=workers)
    finally:
        if fh is not None:
            try:
                fh.close()
            except OSError as e:  # a full disk shows at the last flush (e.g. /dev/full)
                raise write_error(e) from None
    if measured and not d["measured"]["requests"]:
        raise KvplanError("--measured: no request carries the engine's usage.prompt_tokens_details.cached_tokens "
                          "(log the responses with vLLM's --enable-prompt-tokens-details)",
                          source=", ".join(map(str, paths)))
    if as_json:
        sys.stdout.write(json_text(d, indent=2) + "\n")
        return
    print_check(d, measured=measured)




def _pct(v: float | None) -> str:
    return f"{v:.1%}" if v is not None else "-"


def print_check(d: dict[str, Any], *, measured: bool = False) -> None:
    sample = d.get("sample")
    if sample:
        out.print(f"SAMPLE, {sample['fraction']:g} of the conversations: {sample['conversations_kept']:,} of "
                  f"{sample['conversations']:,} conversations, {sample['requests_kept']:,} of {sample['requests']:,} "
                  f"requests (conversations keyed by {sample['key']}); every figure below is the sample's",
                  highlight=False, markup=False)
    out.print(f"{d['requests']:,} requests, {d['prompt_tokens']:,} prompt tokens, block size {d['block_size']}"
              + (f", {d['gpu_blocks']:,} GPU blocks" if d["gpu_blocks"] else ", unlimited cache"))
    out.print(f"predicted hit rate {_pct(d['hit_rate_predicted'])} ({d['cached_tokens_predicted']:,} cached "
              f"tokens); unlimited cache {_pct(d['hit_rate_unlimited'])}; every finding fixed "
              f"{_pct(d['hit_rate_if_fixed'])}", highlight=False)
    m = d["missed_by_cause"]
    out.print(f"missed: {m['cold']:,} first seen, {m['evicted']:,} evicted, {m['busted']:,} busted, "
              f"{m['partial']:,} partial last block / last token", highlight=False)
    reasons = d.get("miss_reasons") or {}
    if reasons:
        out.print("first miss per request: " + ", ".join(f"{k} {v:,}" for k, v in reasons.items()), highlight=False)
    if measured:
        _print_measured(d["measured"])
    for f in d["findings"]:
        if f.get("change"):  # a turn the template renders differently once it is history: one rate per remedy
            out.print(f"- {f['kind']} at message {f['message_index']} ({f['role']}): {f['change']}; "
                      f"{f['requests_affected']:,} requests, {f['tokens_missed']:,} cached tokens missed",
                      highlight=False, markup=False)
            for rm in f["remedies"]:
                out.print(f"  {_pct(rm['hit_rate_if_fixed'])} if {rm['how']}", highlight=False, markup=False)
            continue
        where = (f"template text before message {f['message_index']}" if f["template"] else
                 f"line {f['line']} of message {f['message_index']} ({f['role']})")
        lost = f"{f['tokens_lost']:,}" if f["tokens_lost"] is not None else "-"
        out.print(f"- {f['kind']} at {where}, e.g. {f['example']!r}: {f['requests_affected']:,} requests, "
                  f"{lost} tokens; {_pct(f['hit_rate_if_fixed'])} if {f['fix']}",
                  highlight=False, markup=False)
        if f.get("below_today"):
            out.print(f"  below today's rate: {f['below_today']}", highlight=False, markup=False)
    print_geometry(d.get("block_geometry"))
    p = d["pricing"]
    if p["extra_usd_per_month_if_fixed"] is not None:
        out.print(f"fixing them: {p['saved_gpu_hours_per_month_if_fixed'] - p['saved_gpu_hours_per_month']:,.1f} "
                  f"more GPU-hours saved a month, ${p['extra_usd_per_month_if_fixed']:,.0f}/month", highlight=False)
    elif p["extra_usd_per_1m_prompt_tokens_if_fixed"] is not None:
        out.print(f"fixing them saves ${p['extra_usd_per_1m_prompt_tokens_if_fixed']:,.4f} per million prompt "
                  "tokens (the log has no arrival times for a monthly figure)", highlight=False)
    out.print(f"[dim]priced with: {p['source']}[/dim]", highlight=False)
    for n in d["notes"]:
        out.print(f"[dim]note: {n}[/dim]", highlight=False)


def _print_measured(c: dict[str, Any]) -> None:
    out.print(f"measured ({c['requests']:,} requests with the engine's usage"
              + (f"; {c['unmeasured']:,} without" if c["unmeasured"] else "") + f"): predicted "
              f"{_pct(c['hit_rate_predicted'])}, measured {_pct(c['hit_rate_measured'])}; cached tokens equal on "
              f"{c['cached_equal']:,}, prompt length equal on {c['prompt_tokens_equal']:,}", highlight=False)
    for m in c["mismatches"]:
        out.print(f"- {m['where']}: predicted {m['cached_predicted']:,} cached of {m['prompt_tokens_predicted']:,}, "
                  f"measured {m['cached_measured']:,}"
                  + (f" of {m['prompt_tokens_measured']:,}" if m["prompt_tokens_measured"] is not None else "")
                  + f" (predicted miss: {m['miss_reason']})", highlight=False, markup=False, soft_wrap=True)


def print_geometry(g: dict[str, Any] | None) -> None:
    """The block-geometry table: the hit rate at each block size, the deployment's own marked."""
    if not g:
        return
    cap = f"{g['capacity_tokens']:,} tokens of cache" if g["capacity_tokens"] is not None else "an unlimited cache"
    out.print(f"hit rate by block size (the same log, {cap} at each; own {g['own_block_size']} from "
              f"{g['own_source']}: {g['own_detail']}):", highlight=False, markup=False)
    for r in g["rows"]:
        what = f"  ({', '.join(r['is'])})" if r["is"] else ""
        rate = _pct(r["hit_rate"]) if r["why_null"] is None else f"- ({r['why_null']})"
        out.print(f"  {r['block_size']:>6,}  {rate:>6}  unlimited {_pct(r['hit_rate_unlimited']):>6}{what}",
                  highlight=False, markup=False)
