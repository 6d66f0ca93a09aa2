"""LMCache's model_name is vLLM's --model path: kvplan stores a path as its last component, on
every ingestion path, and the committed recordings hold no path of the recording machine."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvplan.collectors.scrape.parse import parse_payload
from kvplan.collectors.scrape.relabel import model_label, relabel_exposition

ROOT = Path(__file__).resolve().parents[1]
MACHINE_PATH = re.compile(r"/root/|/home/|\.cache/")


@pytest.mark.parametrize("value, stored", [
    ("/root/.cache/kvplan/stack/models/tiny-llama", "tiny-llama"),
    ("/models/Llama-3.1-8B-Instruct/", "Llama-3.1-8B-Instruct"),
    ("~/models/qwen", "qwen"),
    ("./tiny", "tiny"),
    ("C:\\models\\mistral", "mistral"),
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),  # a Hugging Face id, not a path
    ("tiny-llama", "tiny-llama"),
    (None, None),
])
def test_model_label(value, stored):
    assert model_label(value) == stored


LMCACHE = ('# TYPE lmcache_mp_lookup_hit_tokens counter\n'
           'lmcache_mp_lookup_hit_tokens_total{model_name="/root/.cache/kvplan/stack/models/tiny-llama",'
           'worker="0"} 1024.0\n')


def test_relabel_exposition_changes_only_path_model_names():
    out = relabel_exposition(LMCACHE + 'vllm:x_total{model_name="meta-llama/Llama-3.1-8B"} 1.0\n')
    assert out == ('# TYPE lmcache_mp_lookup_hit_tokens counter\n'
                   'lmcache_mp_lookup_hit_tokens_total{model_name="tiny-llama",worker="0"} 1024.0\n'
                   'vllm:x_total{model_name="meta-llama/Llama-3.1-8B"} 1.0\n')
    assert relabel_exposition(out) == out


def test_parsing_stores_the_last_component():
    samples = parse_payload(LMCACHE, "lmcache.prom", content_type="text/plain; charset=utf-8").samples
    assert {s.model_name for s in samples} == {"tiny-llama"}


def test_the_demo_dataset_and_the_fixtures_hold_no_path_of_the_recording_machine():
    demo = ROOT / "deploy" / "demo" / "kvplan-demo.jsonl.gz"
    with gzip.open(demo, "rt") as f:
        hits = [json.loads(line).get("target") for line in f if MACHINE_PATH.search(line)]
    assert hits == [], f"{demo}: machine paths in records of {sorted(set(hits))}"
    files = [p for p in (ROOT / "tests" / "fixtures").rglob("*") if p.is_file()
             and MACHINE_PATH.search(p.read_text(errors="replace"))]
    assert files == []


def test_the_demo_runs_show_the_request_weighted_share_and_no_path(tmp_path, monkeypatch):
    """The demo was recorded with --enable-prompt-tokens-details: every run has its share of
    requests with cached tokens (0 % for unique sessions and cache off, most for shared prefixes)."""
    from kvplan.collectors.demo import load_demo
    from kvplan.sql.db import Database
    from tests.test_app_pages import run_app

    db = Database(tmp_path / "demo.duckdb")
    db.migrate()
    load_demo(db)
    t = run_app(monkeypatch, db.path, "runs")
    table = t.dataframe[0].value
    shares = dict(zip(table["label"] + " #" + table["run"].astype(str), table["requests with cached tokens"],
                      strict=True))
    assert "not recorded" not in shares.values(), shares
    assert {v for k, v in shares.items() if k.startswith("unique sessions")} == {"0.0%"}
    assert all(float(v.rstrip("%")) > 50 for k, v in shares.items() if k.startswith("shared prefix #"))
    assert {r["model_name"] for r in db.fetch("models", deployment="demo-cpu")} == {"tiny-llama"}
