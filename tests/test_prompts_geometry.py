"""Block geometry in the prompts check (issue 34, item 4): the hit rate of the same log at block
sizes 16 to 256, the deployment's own block and LMCache's chunk, the same capacity in tokens at
each. Expected values: by hand on a tiny token-id log; from transformers called directly (the
longest common prefix in full blocks) on a text log; from a separate check run at the other
block size; and the deployment's own block size read from vllm:cache_config_info (a hybrid's
scheduling block) or --block-size, said in the output."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.views.prompts import block_geometry, prompts_check
from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.pieces import Batch, Run, now
from kvplan.collectors.requests.render import Renderer
from kvplan.models.prompts.geometry import scheduling_block, table_sizes
from tests.prompts_reference import hit_tokens
from tests.test_prompts_check import TOKENIZER, moved_to_the_end, timestamp_log

runner = CliRunner()
PAYLOADS = Path(__file__).resolve().parent / "fixtures" / "payloads" / "engines"


def write(path: Path, bodies: list[dict]) -> Path:
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


def rows_by_size(d: dict) -> dict[int, dict]:
    return {r["block_size"]: r for r in d["block_geometry"]["rows"]}


SHARED = "a" + " b" * 38
"""With the fixture tokenizer: the BOS token, "a", then one token per " b": 40 tokens."""


def two_requests(tmp_path: Path) -> Path:
    """Two text completions sharing their first 40 tokens: 60 and 70 tokens (" c" and " d" are
    one token each too)."""
    return write(tmp_path / "two.jsonl", [{"model": "m", "prompt": SHARED + " c" * 20, "max_tokens": 1},
                                          {"model": "m", "prompt": SHARED + " d" * 30, "max_tokens": 1}])


def test_two_requests_sharing_40_tokens_by_hand(tmp_path):
    """The second request hits the shared 40 tokens in full blocks: 32 at 16 (two blocks) and at
    32 (one), none at 64 or more (its first 64-token block differs), out of 60 + 70 tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    a, b = (tok(json.loads(x)["prompt"])["input_ids"] for x in two_requests(tmp_path).read_text().splitlines())
    assert (len(a), len(b)) == (60, 70) and a[:40] == b[:40] and a[40] != b[40]  # the premise, checked
    d = prompts_check([two_requests(tmp_path)], tokenizer=TOKENIZER, block_size=16)
    rows = rows_by_size(d)
    assert sorted(rows) == [16, 32, 64, 128, 256]
    want = {16: 32, 32: 32, 64: 0, 128: 0, 256: 0}
    assert {s: r["cached_tokens"] for s, r in rows.items()} == want
    assert {s: r["hit_rate"] for s, r in rows.items()} == {s: c / 130 for s, c in want.items()}
    # the shared 40 tokens at 64 would hit if they filled a block: 0 is the partial block, not a miss
    assert rows[64]["hittable_tokens"] == 64 and rows[256]["hittable_tokens"] == 0
    assert rows[16]["is"] == ["own", "check"] and rows[256]["is"] == ["lmcache_chunk"]
    assert rows[16]["hit_rate"] == d["hit_rate_predicted"]


def reference(texts: list[str], block: int) -> tuple[int, int]:
    """(cached, prompt tokens) with an unlimited cache, one request at a time: each request hits
    the longest prefix it shares with an earlier one, in full blocks within prompt_tokens - 1."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    seqs = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return sum(hit_tokens(seqs, i, block) for i in range(len(seqs))), sum(len(s) for s in seqs)


class CountingRenderer(Renderer):
    """The real renderer, counting the texts it tokenizes."""

    def __init__(self, tokenizer: Path):
        super().__init__(tokenizer)
        self.encoded = 0

    def begin_ids(self, texts: list[str], *, add_special_tokens: bool, run: Run = now,
                  streams: Sequence[Hashable | None] | None = None) -> Batch:
        self.encoded += len(texts)  # the check's one way to tokenize (whole or by pieces)
        return super().begin_ids(texts, add_special_tokens=add_special_tokens, run=run, streams=streams)


def test_a_text_log_at_every_size_matches_transformers_and_is_tokenized_once(tmp_path):
    from transformers import AutoTokenizer

    bodies = [moved_to_the_end(b) for b in timestamp_log(10)]  # a shared system prompt, no buster
    r = CountingRenderer(TOKENIZER)
    res = check([write(tmp_path / "l.jsonl", bodies)], r, CheckOptions(block_size=16, geometry=(16, 32, 64, 128,
                                                                                                  256, 512)))
    assert r.encoded == len(bodies) and not res.findings  # once per request, not once per block size
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    texts = [tok.apply_chat_template(b["messages"], tokenize=False, add_generation_prompt=True) for b in bodies]
    got = {g.block_size: g.totals for g in res.geometry}
    assert sorted(got) == [16, 32, 64, 128, 256, 512]
    for size, t in got.items():
        assert t is not None
        want, total = reference(texts, size)
        assert (t.cached_unlimited, t.prompt_tokens) == (want, total), size
    assert got[16].cached > got[512].cached > 0  # coarser blocks lose the tail of the shared prefix


def test_each_size_has_the_same_capacity_in_tokens_as_a_run_at_that_size(tmp_path):
    """A pool of 40 blocks of 16 (640 tokens) evicts on this log; the table's row at 32 is a check
    run at block size 32 with 20 blocks, at 64 with 10, at 128 with 5; at 512 the 640 tokens hold
    one block, too few for vLLM (null block + one): null, said why."""
    p = write(tmp_path / "l.jsonl", [moved_to_the_end(b) for b in timestamp_log(12)])
    renderer = Renderer(TOKENIZER)
    res = check([p], renderer, CheckOptions(block_size=16, gpu_blocks=40, geometry=(32, 64, 128, 512)))
    rows = {g.block_size: g for g in res.geometry}
    assert rows[16].totals == res.totals and rows[16].gpu_blocks == 40
    for size, blocks in ((32, 20), (64, 10), (128, 5)):
        alone = check([p], renderer, CheckOptions(block_size=size, gpu_blocks=blocks)).totals
        assert rows[size].gpu_blocks == blocks
        assert rows[size].totals == alone, size
    assert res.totals.cached < res.totals.cached_unlimited  # the capacity matters on this log
    assert rows[512].totals is None and "fewer than 2 blocks" in (rows[512].why or "")
    assert any("fewer than 2 blocks of 512" in n for n in res.notes)
    d = res.as_json()["block_geometry"]
    assert d["capacity_tokens"] == 640 and [r["block_size"] for r in d["rows"]] == [16, 32, 64, 128, 512]


def test_the_own_size_is_the_main_prediction_and_block_size_flag_is_named(tmp_path):
    p = write(tmp_path / "l.jsonl", [moved_to_the_end(b) for b in timestamp_log(8)])
    d = prompts_check([p], tokenizer=TOKENIZER, block_size=48, gpu_blocks=30, lmcache_chunk=96)
    g = d["block_geometry"]
    assert (g["own_block_size"], g["own_source"], g["lmcache_chunk"]) == (48, "--block-size", 96)
    assert [r["block_size"] for r in g["rows"]] == [16, 32, 48, 64, 96, 128, 256]
    rows = rows_by_size(d)
    assert rows[48]["is"] == ["own", "check"] and rows[96]["is"] == ["lmcache_chunk"]
    assert rows[48]["hit_rate"] == d["hit_rate_predicted"] and rows[48]["cached_tokens"] == d["cached_tokens_predicted"]
    assert g["capacity_tokens"] == 30 * 48 and rows[96]["gpu_blocks"] == 15


def hybrid_payload(tmp_path: Path) -> Path:
    """The recorded vLLM 0.32.0 payload with a hybrid model's cache_config_info labels: a cache
    block of 16, the attention and Mamba groups' blocks of 784 (vllm#47430's size)."""
    src = (PAYLOADS / "vllm-0.32.0" / "01_after.prom").read_text()
    line = next(x for x in src.splitlines() if x.startswith("vllm:cache_config_info{"))
    hybrid = (line.replace('block_size="128"', 'block_size="16"', 1)
              .replace('effective_attention_block_size="128"', 'effective_attention_block_size="784"')
              .replace('mamba_block_size="None"', 'mamba_block_size="784"'))
    assert hybrid.count('"784"') == 2 and ' block_size="16"' in hybrid.replace("{", " ").replace(",", " ")
    out = tmp_path / "hybrid.prom"
    out.write_text(src.replace(line, hybrid))
    return out


def imported(tmp_path: Path, payload: Path) -> Path:
    db = tmp_path / "k.duckdb"
    r = runner.invoke(app, ["import-metrics", "--db", str(db), "--deployment", "d", "--target", "vllm-0",
                            "--at", "2026-11-03T10:00:00Z", str(payload)])
    assert r.exit_code == 0, r.output
    return db


def check_on(db: Path, log: Path, *args: str):
    """``kvplan prompts check LOG`` against deployment ``d`` of ``db`` with the fixture tokenizer."""
    return runner.invoke(app, ["prompts", "check", str(log), "--db", str(db), "--deployment", "d",
                               "--tokenizer", str(TOKENIZER), *args])


def test_a_hybrid_scheduling_block_comes_from_cache_config_info(tmp_path):
    db = imported(tmp_path, hybrid_payload(tmp_path))
    log = write(tmp_path / "l.jsonl", [moved_to_the_end(b) for b in timestamp_log(8)])
    r = check_on(db, log, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    g = d["block_geometry"]
    assert (g["own_block_size"], g["own_source"]) == (784, "cache_config_info")
    assert "effective_attention_block_size" in g["own_detail"] and "vllm:cache_config_info of vllm-0" in g["own_detail"]
    # the check itself predicts at the block the hits land on, with the deployment's capacity in tokens
    # (4096 blocks of 16 = 65,536 tokens = 83 blocks of 784)
    assert (d["block_size"], d["gpu_blocks"]) == (784, 65536 // 784)
    rows = rows_by_size(d)
    assert sorted(rows) == [16, 32, 64, 128, 256, 784]
    assert rows[784]["is"] == ["own", "check"] and rows[784]["hit_rate"] == d["hit_rate_predicted"]
    assert d["block_geometry"]["capacity_tokens"] == 83 * 784 and rows[16]["gpu_blocks"] == 83 * 784 // 16
    # prompts of about 1,300 tokens share a prefix of several hundred: one 784-token block at most
    assert rows[16]["hit_rate"] > rows[784]["hit_rate"]
    # --gpu-blocks counts the engine's cache blocks (of 16) too
    r = check_on(db, log, "--gpu-blocks", "1000", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gpu_blocks"] == 16_000 // 784
    # --block-size given: the check runs at it, the own size is still the scheduling block
    r = check_on(db, log, "--block-size", "16")
    assert r.exit_code == 0, r.output
    assert "own 784 from cache_config_info" in " ".join(r.stdout.split())


def test_a_plain_deployment_and_the_cli_table(tmp_path):
    """The recorded vLLM 0.32.0 payload (block_size 128, effective_attention_block_size 128: no
    larger scheduling block): the own size is its block_size, from cache_config_info; the text
    output prints the table."""
    db = imported(tmp_path, PAYLOADS / "vllm-0.32.0" / "01_after.prom")
    log = write(tmp_path / "l.jsonl", [moved_to_the_end(b) for b in timestamp_log(8)])
    r = check_on(db, log, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    g = d["block_geometry"]
    assert (g["own_block_size"], g["own_source"], d["block_size"]) == (128, "cache_config_info", 128)
    assert rows_by_size(d)[128]["hit_rate"] == d["hit_rate_predicted"]
    text = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--block-size", "32"])
    assert text.exit_code == 0, text.output
    flat = " ".join(text.stdout.split())
    assert "hit rate by block size" in flat and "own 32 from --block-size" in flat
    for size in (16, 32, 64, 128, 256):
        assert any(line.split()[:1] == [str(size)] for line in text.stdout.splitlines()), size


def test_the_page_view_gives_the_table_and_the_chart(tmp_path):
    d = prompts_check([two_requests(tmp_path)], tokenizer=TOKENIZER, block_size=16)
    v = block_geometry(d)
    assert v is not None
    assert [(r["block size"], r["hit rate"], r["cached tokens"]) for r in v.rows] == \
        [(16, 32 / 130, 32), (32, 32 / 130, 32), (64, 0.0, 0), (128, 0.0, 0), (256, 0.0, 0)]
    assert v.rows[0]["what"] == "the deployment's own, the check's" and v.rows[-1]["what"] == "LMCache's chunk"
    assert "16" in v.caption and "--block-size" in v.caption
    spec = v.chart.to_dict()
    data = [row for ds in spec["datasets"].values() for row in ds]
    plotted = {(x["block_size"], x["cache"]): x["hit_rate"] for x in data if "cache" in x}
    assert plotted[(32, "capacity given")] == 32 / 130 and plotted[(64, "unlimited")] == 0.0
    assert any(x.get("block_size") == 16 and "own" in x.get("what", "") for x in data)
    assert block_geometry({"block_geometry": None}) is None


def test_a_block_id_trace_gives_only_its_own_size(tmp_path):
    """Bailian traces hold block ids, not tokens: other sizes cannot be rebuilt (null, said why)."""
    p = write(tmp_path / "t.jsonl", [{"chat_id": i, "timestamp": float(i), "input_length": 40, "output_length": 1,
                                      "hash_ids": [1, 2, 3][: 2 + i % 2], "type": "text", "turn": 1}
                                     for i in range(3)])
    res = check([p], None, CheckOptions(block_size=16, geometry=(16, 32)))
    rows = {g.block_size: g for g in res.geometry}
    assert rows[16].totals == res.totals and rows[32].totals is None and "block ids" in (rows[32].why or "")


@pytest.mark.parametrize(("labels", "want"), [
    ({"block_size": "16", "effective_attention_block_size": "784", "mamba_block_size": "784"}, 784),
    ({"block_size": "16", "effective_attention_block_size": "64", "mamba_block_size": "None"}, 64),
    ({"block_size": "48", "effective_attention_block_size": "48", "mamba_block_size": "64"}, 192),  # lcm
    ({"block_size": "16", "cache_hit_alignment_tokens": "32", "effective_attention_block_size": "784"}, 32),
    ({"block_size": "128", "effective_attention_block_size": "128", "mamba_block_size": "None"}, None),
    ({"block_size": "784", "mamba_block_size": "784"}, None),  # a hybrid whose cache block is raised already
    ({"block_size": "16", "cache_hit_alignment_tokens": "16", "effective_attention_block_size": "784"}, None),
    ({"block_size": "None"}, None),
])
def test_scheduling_block_from_labels(labels, want):
    got = scheduling_block(labels)
    assert (got.size if got is not None else None) == want


def test_table_sizes():
    assert table_sizes(16, 256) == [16, 32, 64, 128, 256]
    assert table_sizes(784, 256, (16,)) == [16, 32, 64, 128, 256, 784]
    assert table_sizes(4096, 512) == [16, 32, 64, 128, 256, 512, 4096]


def test_the_reports_section_9_holds_the_table_and_the_miss_reasons(tmp_path):
    """``kvplan report --prompts-check``'s section shows the geometry table and the first miss per
    request: on the two requests above, 32 of 130 tokens cached at 16 and 32 (24.6 %), none at
    64 to 256, the own size marked; both requests' first computed token lies in a block never seen
    before (the first request's every block; the second's third block of 16, tokens 32 to 47,
    which holds its first differing token 40): two ``cold``."""
    import re

    from kvplan.app.report.prompts import render_section

    d = prompts_check([two_requests(tmp_path)], tokenizer=TOKENIZER, block_size=16)
    html = render_section(d)
    geometry = html[html.index("Hit rate by block size"):]
    cells = re.findall(r"<tr><td class=n>([\d,]+)</td><td class=n>([^<]+)</td><td class=n>[^<]+</td><td>([^<]*)</td>",
                       geometry)
    assert cells == [("16", "24.6%", "own, check"), ("32", "24.6%", ""), ("64", "0.0%", ""), ("128", "0.0%", ""),
                     ("256", "0.0%", "lmcache_chunk")], cells
    assert "comes from --block-size" in geometry
    reasons = html[html.index("First miss per request"):html.index("Cache-busters")]
    assert re.findall(r"<tr><td>(\w+)</td><td class=n>(\d+)</td></tr>", reasons) == [("cold", "2")]
