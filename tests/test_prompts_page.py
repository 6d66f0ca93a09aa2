"""The Prompts page through Streamlit's AppTest: a log checked from a path shows the predicted and
fixed hit rates the CLI computes, the finding, and one broken request with its divergent line
highlighted; a bad path is an error on the page."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from kvplan.app.report import fmt
from kvplan.app.views.prompts import prompts_check
from tests.test_prompts_check import TOKENIZER, timestamp_log

APP = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")


def page(monkeypatch, tmp_path) -> AppTest:
    """The page opened first (AppTest starts each run as a deep link does: Streamlit's v1 pages
    directory, the page script alone), with no database at all (the check needs none)."""
    from streamlit.runtime.pages_manager import PagesManager

    monkeypatch.setenv("KVPLAN_DB", str(tmp_path / "k.duckdb"))
    t = AppTest.from_file(APP, default_timeout=120)
    t.switch_page("pages/prompts.py")
    t.run()
    assert not t.exception, t.exception
    # it ran inside the app's st.navigation (page config, menu), as every other page does, and the
    # missing database stopped neither the navigation nor this page
    assert PagesManager.uses_pages_directory is False
    assert not t.error, [e.value for e in t.error]
    assert [x.value for x in t.title] == ["Prompts: cacheability of a request log"]
    return t


def test_a_log_checked_on_the_page(monkeypatch, tmp_path):
    log = tmp_path / "ts.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in timestamp_log(8)))
    want = prompts_check([log], tokenizer=TOKENIZER)
    t = page(monkeypatch, tmp_path)
    t.text_input(key="prompts_path").input(str(log))
    t.text_input(key="prompts_tokenizer").input(str(TOKENIZER))
    next(b for b in t.button if b.label == "Check").click()
    t.run()
    assert not t.exception, t.exception
    m = {x.label: x.value for x in t.metric}
    assert m["Predicted hit rate"] == fmt.pct(want["hit_rate_predicted"])
    assert m["Every finding fixed"] == fmt.pct(want["hit_rate_if_fixed"])
    findings = t.dataframe[1].value
    assert list(findings["kind"]) == ["iso_timestamp"] and list(findings["shape"]) == ["9999-99-99A99:99:99.999A"]
    assert "Hit rate at other block sizes" in [x.value for x in t.subheader]
    geometry = t.dataframe[2].value
    assert list(geometry["block size"]) == [r["block_size"] for r in want["block_geometry"]["rows"]]
    assert list(geometry["hit rate"]) == [r["hit_rate"] for r in want["block_geometry"]["rows"]]
    marked = [x.value for x in t.markdown if "<mark>" in x.value]
    assert len(marked) == 1 and "<mark>Current time: 2026-11-30T12:00:" in marked[0]


def test_a_missing_file_is_an_error_on_the_page(monkeypatch, tmp_path):
    t = page(monkeypatch, tmp_path)
    t.text_input(key="prompts_path").input(str(tmp_path / "nope.jsonl"))
    t.text_input(key="prompts_tokenizer").input(str(TOKENIZER))
    next(b for b in t.button if b.label == "Check").click()
    t.run()
    assert not t.exception
    assert any("nope.jsonl" in e.value and "cannot read" in e.value for e in t.error)


def test_a_picked_request_says_where_it_diverged(monkeypatch, tmp_path):
    """Every request is listed with its miss reason; picking the second one (the timestamp log's
    second request differs from the first only in its timestamp line) names the first as the
    earlier request it parted from, in the system message."""
    log = tmp_path / "ts.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in timestamp_log(8)))
    t = page(monkeypatch, tmp_path)
    t.text_input(key="prompts_path").input(str(log))
    t.text_input(key="prompts_tokenizer").input(str(TOKENIZER))
    next(b for b in t.button if b.label == "Check").click()
    t.run()
    assert not t.exception, t.exception
    pick = t.selectbox(key="prompts_request")
    assert len(pick.options) == 8
    assert pick.options[0].startswith("ts.jsonl:1 · cold")
    assert all("iso_timestamp" in o for o in pick.options[1:])
    pick.set_value(1)
    t.run()
    said = [x.value for x in t.markdown if x.value.startswith("**iso_timestamp**")]
    assert len(said) == 1 and "nearest earlier request: ts.jsonl:1, parted at message 0 (system)" in said[0], said


def test_the_demo_opens_on_a_checked_recorded_log(monkeypatch, tmp_path):
    """On the demo's database (its request logs imported, as ``kvplan demo`` does) the page opens
    already checked on a recorded log, with what vLLM measured on it beside the prediction; the
    numbers are the CLI's for that log."""
    from kvplan.collectors.demo import demo_prompts, load_demo_prompts
    from kvplan.sql.db import Database

    path = tmp_path / "k.duckdb"
    db = Database(path)
    db.migrate()
    assert load_demo_prompts(db) > 0
    demo = demo_prompts()
    run = next(r for r in demo["runs"] if r["name"] == "ts-top")
    want = prompts_check([run["file"]], tokenizer=demo["tokenizer"], chat_template=demo["chat_template"],
                         block_size=run["block_size"], gpu_blocks=run["gpu_blocks"])
    monkeypatch.setenv("KVPLAN_DB", str(path))
    from streamlit.testing.v1 import AppTest

    t = AppTest.from_file(APP, default_timeout=120)
    t.switch_page("pages/prompts.py")
    t.run()
    assert not t.exception, t.exception
    m = {x.label: x.value for x in t.metric}
    assert m["Predicted hit rate"] == fmt.pct(want["hit_rate_predicted"])
    assert any("Recorded demo log 'ts-top'" in x.value for x in t.info), [x.value for x in t.info]
    assert t.selectbox(key="prompts_request").options  # the per-request list is there too


def test_history_the_template_rewrites_shows_its_remedies_on_the_page(monkeypatch, tmp_path):
    """A Qwen3-style template's think blocks: the finding reads as the message rewritten as
    history, with what changed and each remedy's rate, the CLI's numbers."""
    from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log

    log = tmp_path / "think.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in agent_log()))
    template = tmp_path / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    want = prompts_check([log], tokenizer=TOKENIZER, chat_template=template)
    (f,) = [f for f in want["findings"] if f["kind"] == "template_history"]
    t = page(monkeypatch, tmp_path)
    t.text_input(key="prompts_path").input(str(log))
    t.text_input(key="prompts_tokenizer").input(str(TOKENIZER))
    t.text_input(key="prompts_template").input(str(template))
    next(b for b in t.button if b.label == "Check").click()
    t.run()
    assert not t.exception, t.exception
    table = t.dataframe[1].value
    assert f"message {f['message_index']} ({f['role']}), as history" in list(table["where"])
    said = [x.value for x in t.markdown if x.value.startswith("**template_history**")]
    assert len(said) == 1 and f["change"] in said[0], said
    for r in f["remedies"]:
        assert f"{fmt.pct(r['hit_rate_if_fixed'])} if {r['how']}" in said[0]
