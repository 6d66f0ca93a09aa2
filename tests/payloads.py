"""Build small vLLM-shaped exposition texts for tests whose expected values are worked
out by hand. (Tests on real server output use the recorded files in fixtures/payloads.)"""

from __future__ import annotations

TTFT_BOUNDS = [0.1, 1.0, float("inf")]


def vllm_text(series: dict[tuple[str, str], dict]) -> str:
    """series: {(model_name, engine): {"hits": h, "queries": q, "ttft": [c0.1, c1.0, cInf],
    "created": unix_s}}; ttft counts are cumulative."""
    out = ["# HELP vllm:prefix_cache_hits_total hits", "# TYPE vllm:prefix_cache_hits_total counter"]
    for (m, e), v in series.items():
        out.append(f'vllm:prefix_cache_hits_total{{engine="{e}",model_name="{m}"}} {float(v["hits"])}')
    out += ["# TYPE vllm:prefix_cache_hits_created gauge"]
    for (m, e), v in series.items():
        out.append(f'vllm:prefix_cache_hits_created{{engine="{e}",model_name="{m}"}} {v["created"]}')
    out += ["# TYPE vllm:prefix_cache_queries_total counter"]
    for (m, e), v in series.items():
        out.append(f'vllm:prefix_cache_queries_total{{engine="{e}",model_name="{m}"}} {float(v["queries"])}')
    out += ["# TYPE vllm:prefix_cache_queries_created gauge"]
    for (m, e), v in series.items():
        out.append(f'vllm:prefix_cache_queries_created{{engine="{e}",model_name="{m}"}} {v["created"]}')
    out += ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for (m, e), v in series.items():
        for le, c in zip(TTFT_BOUNDS, v["ttft"], strict=True):
            les = "+Inf" if le == float("inf") else repr(le)
            out.append(f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="{les}",model_name="{m}"}} '
                       f'{float(c)}')
        out.append(f'vllm:time_to_first_token_seconds_count{{engine="{e}",model_name="{m}"}} {float(v["ttft"][-1])}')
        out.append(f'vllm:time_to_first_token_seconds_sum{{engine="{e}",model_name="{m}"}} 1.0')
    out += ["# TYPE vllm:time_to_first_token_seconds_created gauge"]
    for (m, e), v in series.items():
        out.append(f'vllm:time_to_first_token_seconds_created{{engine="{e}",model_name="{m}"}} {v["created"]}')
    return "\n".join(out) + "\n"
