"""The chat template called as vLLM's chat completions call it (adversary round 5): the body's
``documents`` reach the template (they were dropped: 5 prompt tokens instead of 412), and
``chat_template_kwargs`` may set ``add_generation_prompt``, ``continue_final_message`` or ``tools``
over the body's (they were refused). The expected token counts come from transformers'
``apply_chat_template`` called directly with the same arguments."""

from __future__ import annotations

import json

from transformers import AutoTokenizer
from typer.testing import CliRunner

from kvplan.app.cli import app
from tests.test_prompts_check import TOKENIZER

runner = CliRunner()
RAG_TEMPLATE = (
    "{% if documents %}{% for d in documents %}<doc>{{ d.title }}: {{ d.text }}</doc>\n{% endfor %}{% endif %}"
    "{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}")
DOCS = [{"title": "Cache", "text": "KV blocks are reused when prompts share a prefix. " * 20},
        {"title": "Pricing", "text": "A GPU-hour costs what the price book says. " * 10}]
MESSAGES = [{"role": "user", "content": "What does the cache reuse?"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def predicted_tokens(tmp_path, body: dict) -> int:
    t = tmp_path / "rag.jinja"
    t.write_text(RAG_TEMPLATE)
    log = tmp_path / "l.jsonl"
    log.write_text(json.dumps(body) + "\n")
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--chat-template", str(t),
                            "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["prompt_tokens"]


def reference_tokens(**kw) -> int:
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    text = tok.apply_chat_template(MESSAGES, chat_template=RAG_TEMPLATE, tokenize=False, **kw)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_documents_reach_the_template(tmp_path):
    got = predicted_tokens(tmp_path, {"messages": MESSAGES, "documents": DOCS})
    assert got == reference_tokens(documents=DOCS, add_generation_prompt=True)
    assert got > reference_tokens(add_generation_prompt=True) + 100  # the documents are most of it


def test_chat_template_kwargs_override_the_bodys(tmp_path):
    got = predicted_tokens(tmp_path, {"messages": MESSAGES,
                                      "chat_template_kwargs": {"add_generation_prompt": False, "tools": TOOLS}})
    assert got == reference_tokens(add_generation_prompt=False, tools=TOOLS)
    assert got != reference_tokens(add_generation_prompt=True)


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
          " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_null_content_is_rendered_as_vllm_renders_it(tmp_path):
    """OpenAI's assistant turn that calls a tool has ``"content": null``; vLLM parses it as no
    text parts, joined to "" (its "string" content format). The whole log was refused before
    (exit 2), and a template that concatenates ``message['content']`` cannot render None."""
    tool_turn = [{"role": "user", "content": "What is the weather in Paris?"},
                 {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "18 C"}]
    t = tmp_path / "chatml.jinja"
    t.write_text(CHATML)
    log = tmp_path / "agent.jsonl"
    log.write_text(json.dumps({"messages": tool_turn}) + "\n")
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--chat-template", str(t),
                            "--json"])
    assert r.exit_code == 0, r.output
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    as_vllm = [{**m, "content": m["content"] or ""} for m in tool_turn]
    text = tok.apply_chat_template(as_vllm, chat_template=CHATML, tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>assistant\n<|im_end|>" in text  # the tool-calling turn renders empty
    assert json.loads(r.stdout)["prompt_tokens"] == len(tok(text, add_special_tokens=False)["input_ids"])
