"""History the chat template rewrites (issue 34, item 2), on a Qwen3-style template
(deploy/local/recorders/thinking_logs.py) and a multi-turn agent log with tool calls whose client sends each
assistant turn back with its <think> block. The expected rates come from transformers'
``apply_chat_template`` called directly on logs rewritten by hand, and the longest common prefix
in full blocks (tests/test_prompts_check.py's reference_hit_rate)."""

from __future__ import annotations

import json
import re
from html import escape

import pytest
from transformers import AutoTokenizer

from kvplan.collectors.requests.check import CheckOptions, check
from kvplan.collectors.requests.render import Renderer
from kvplan.deploy.local.recorders.thinking_logs import THINK_TEMPLATE, agent_log, dropped
from kvplan.models.prompts.history import DROP, FIELD, change, rewrite, split_reasoning
from tests.test_prompts_check import BS, TOKENIZER, reference_hit_rate, write


def as_vllm(body: dict) -> dict:
    """vLLM parses each tool call's JSON arguments before the template renders them."""
    msgs = []
    for m in body["messages"]:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [{**c, "function": {**c["function"],
                                                         "arguments": json.loads(c["function"]["arguments"])}}
                                     for c in m["tool_calls"]]}
        msgs.append(m)
    return {**body, "messages": msgs}


def reference(bodies: list[dict], **kw) -> float:
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    texts = [tok.apply_chat_template(as_vllm(b)["messages"], tools=b["tools"], chat_template=THINK_TEMPLATE,
                                     tokenize=False, add_generation_prompt=True, **kw) for b in bodies]
    return reference_hit_rate(bodies, texts)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("think")
    template = tmp / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    bodies = agent_log()
    per: list = []
    r = check([write(tmp / "agent.jsonl", bodies)], Renderer(TOKENIZER, template), CheckOptions(block_size=BS),
              on_request=lambda req, o, m: per.append((req, m)))
    return bodies, r, r.as_json(), per


def test_the_rewritten_turn_is_named_at_its_message_in_shape_only(result):
    bodies, r, d, _ = result
    assert d["hit_rate_predicted"] == pytest.approx(reference(bodies), abs=1e-12)  # exact today, as before
    (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
    # the first user query's first assistant turn (index 2: system, user, assistant) loses its think
    # block in the request after the next user query: 4 sessions x 2 later queries
    assert (f["message_index"], f["role"]) == (2, "assistant")
    assert f["requests_affected"] == 4 * 2
    # shape only: the whole description is this pattern, no prompt text
    assert re.fullmatch(r"a think block of about \d+ tokens dropped from assistant turn 2 once it is history",
                        f["change"]), f["change"]
    assert re.fullmatch(r"dropped, \d+ tokens", f["example"])
    assert f["tokens_missed"] > 0


def test_the_think_block_size_is_its_token_count():
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    think = "<think>\nsome careful reasoning about blocks\n</think>\n\n"
    then = "<s>assistant\n" + think + "Answer.<e>"
    now = "<s>assistant\nAnswer.<e>\n<s>user\nnext"
    ch = change(then, now, lambda s: len(tok(s, add_special_tokens=False)["input_ids"]))
    assert (ch.what, ch.think) == ("dropped", True)
    assert ch.tokens == len(tok(think, add_special_tokens=False)["input_ids"])


def test_remedy_drop_is_the_log_rewritten_by_hand(result):
    bodies, r, d, _ = result
    (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
    rates = {x["remedy"]: x["hit_rate_if_fixed"] for x in f["remedies"]}
    by_hand = reference([dropped(b) for b in bodies])
    assert rates["drop_reasoning"] == pytest.approx(by_hand, abs=1e-12)
    assert by_hand > d["hit_rate_predicted"] + 0.05
    # the reasoning sent apart still renders only after the last query with this template: no gain
    assert rates["reasoning_field"] == pytest.approx(d["hit_rate_predicted"], abs=1e-12)
    # the template's own switch, found among its variables, keeps every think block
    assert rates["template_switch"] == pytest.approx(reference(bodies, preserve_thinking=True), abs=1e-12)
    (sw,) = [x for x in f["remedies"] if x["remedy"] == "template_switch"]
    assert sw["chat_template_kwargs"] == {"preserve_thinking": True}
    assert f["hit_rate_if_fixed"] == max(rates.values())
    assert d["hit_rate_if_fixed"] == pytest.approx(by_hand, abs=1e-12)


def test_missed_tokens_move_from_cold_to_the_finding(result):
    bodies, r, d, _ = result
    causes = d["missed_by_cause"]
    assert causes["busted"] > 0
    total_missed = d["prompt_tokens"] - d["cached_tokens_predicted"]
    assert sum(causes.values()) == total_missed
    # without the finding all of it was cold: cold + busted is what cold was
    assert causes["cold"] + causes["busted"] == r.totals.hittable - r.totals.cached_unlimited


def test_each_affected_request_has_the_finding_as_its_miss_reason(result):
    bodies, r, d, per = result
    reasons = [(m.reason, m.message_index) for req, m in per if m.reason == "template_history"]
    assert len(reasons) == 8
    # the later query's requests name their own rewritten turn: after query 1 the turn at index 8
    assert sorted({i for _, i in reasons}) == [2, 8]
    assert d["miss_reasons"]["template_history"] == 8


def test_reasoning_field_reaches_the_template_as_vllm_passes_it(tmp_path):
    """vLLM hands an assistant message's ``reasoning`` to the template as ``reasoning_content``
    and drops a ``reasoning_content`` field the client sends."""
    t = tmp_path / "t.jinja"
    t.write_text(THINK_TEMPLATE)
    rd = Renderer(TOKENIZER, t)
    base = {"role": "assistant", "content": "Answer."}
    msgs = [{"role": "user", "content": "q"}, None, {"role": "user", "content": "again"}]

    def text(m: dict) -> str:
        from kvplan.collectors.requests.read import LogRequest
        return rd.chat_text(LogRequest("x", 1, "chat", messages=[msgs[0], m]))
    assert "<think>\nwhy\n</think>" in text({**base, "reasoning": "why"})
    assert "why" not in text({**base, "reasoning_content": "why"})


def test_rewrites_and_split():
    assert split_reasoning("<think>\nr\n</think>\n\nC") == ("r", "C")
    assert split_reasoning("plain") is None
    m = [{"role": "assistant", "content": "<think>\nr\n</think>\n\nC"}, {"role": "user", "content": "<think>x</think>"}]
    assert rewrite(m, DROP) == [{"role": "assistant", "content": "C"}, m[1]]
    assert rewrite(m, FIELD) == [{"role": "assistant", "content": "C", "reasoning": "r"}, m[1]]
    assert rewrite([m[1]], DROP) is None
    sent_apart = [{"role": "assistant", "content": "C", "reasoning": "r"}]
    assert rewrite(sent_apart, DROP) == [{"role": "assistant", "content": "C"}]
    assert rewrite(sent_apart, FIELD) is None  # already sent apart


def test_no_finding_when_the_template_keeps_history(tmp_path):
    """The same sessions with the template's switch set in every request: each turn renders the
    same as history as when it was generated, so nothing is found and the rate is the reference's."""
    t = tmp_path / "think.jinja"
    t.write_text(THINK_TEMPLATE)
    bodies = [{**b, "chat_template_kwargs": {"preserve_thinking": True}} for b in agent_log(sessions=2)]
    d = check([write(tmp_path / "kept.jsonl", bodies)], Renderer(TOKENIZER, t), CheckOptions(block_size=BS)).as_json()
    assert d["hit_rate_predicted"] == pytest.approx(reference(bodies, preserve_thinking=True), abs=1e-12)
    assert [f for f in d["findings"] if f["kind"] == "template_history"] == []
    assert "template_history" not in d["miss_reasons"]


def test_the_cli_says_which_remedy_gives_which_rate(result, tmp_path):
    from typer.testing import CliRunner

    from kvplan.app.cli import app
    bodies, r, d, _ = result
    t = tmp_path / "think.jinja"
    t.write_text(THINK_TEMPLATE)
    out = CliRunner().invoke(app, ["prompts", "check", str(write(tmp_path / "a.jsonl", bodies)), "--tokenizer",
                                   str(TOKENIZER), "--chat-template", str(t), "--block-size", str(BS)],
                             env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
    rates = {x["remedy"]: x["hit_rate_if_fixed"] for x in f["remedies"]}
    flat = "".join(out.output.split())  # rich wraps at its own width whatever COLUMNS says (xdist)

    def said(text: str) -> bool:
        return "".join(text.split()) in flat

    assert said(f"template_history at message 2 (assistant): {f['change']}"), out.output
    assert said(f"{rates['drop_reasoning']:.1%} if the client drops the <think> block"), out.output
    assert said(f"{rates['template_switch']:.1%} if the requests set chat_template_kwargs "
                '{"preserve_thinking": true}'), out.output


def test_reasoning_sent_apart_is_rewritten_too_and_dropping_it_pays(tmp_path):
    """A client that sends each turn's reasoning in the ``reasoning`` field (vLLM's name for it)
    meets the same template rule: the finding is there, and its drop remedy is the log with the
    reasoning dropped, rendered by transformers directly."""
    t = tmp_path / "think.jinja"
    t.write_text(THINK_TEMPLATE)
    bodies = agent_log(sessions=3, seed=4)
    apart = [{**b, "messages": rewrite(b["messages"], FIELD) or b["messages"]} for b in bodies]
    d = check([write(tmp_path / "apart.jsonl", apart)], Renderer(TOKENIZER, t), CheckOptions(block_size=BS)).as_json()
    as_passed = [{**b, "messages": [{**m, "reasoning_content": m["reasoning"]} if "reasoning" in m else m
                                    for m in b["messages"]]} for b in apart]  # what vLLM hands the template
    assert d["hit_rate_predicted"] == pytest.approx(reference(as_passed), abs=1e-12)
    (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
    assert (f["message_index"], f["role"]) == (2, "assistant")
    rates = {x["remedy"]: x["hit_rate_if_fixed"] for x in f["remedies"]}
    assert rates["drop_reasoning"] == pytest.approx(reference([dropped(b) for b in bodies]), abs=1e-12)
    assert rates["drop_reasoning"] > d["hit_rate_predicted"] + 0.05


def test_the_dashboard_example_is_the_line_where_the_turn_parts(result):
    bodies, r, d, _ = result
    (key,) = r.examples
    assert key[0] == "template_history"
    text, s0, s1 = r.examples[key]
    # the rewritten turn's first line as history: the assistant header's next line, no <think> there
    assert text[s0:s1] == "Calling a tool.<tool_call>"
    assert text[:s0].endswith("<|im_start|>assistant\n")


def test_the_reports_section_9_gives_each_remedys_rate(result):
    """The capacity report's prompts section names the rewritten turn by its shape and gives each
    remedy's rate, the by-hand drop among them, as the CLI does."""
    from kvplan.app.report import fmt
    from kvplan.app.report.prompts import render_section

    bodies, _, d, _ = result
    html = render_section(d)
    (f,) = [f for f in d["findings"] if f["kind"] == "template_history"]
    assert escape(f["change"]) in html
    by_hand = reference([dropped(b) for b in bodies])
    (drop,) = [x for x in f["remedies"] if x["remedy"] == "drop_reasoning"]
    assert escape(f"{fmt.pct(by_hand)} if {drop['how']}") in html
    for rm in f["remedies"]:
        assert escape(f"{fmt.pct(rm['hit_rate_if_fixed'])} if {rm['how']}") in html
