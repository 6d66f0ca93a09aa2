"""collectors/requests: the request-log readers and the renderer (transformers' own
apply_chat_template, offline); every error names the file and the line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvplan.collectors.requests.read import read_requests
from kvplan.collectors.requests.render import Renderer
from kvplan.collectors.scrape.payload import PayloadError
from kvplan.models.core.errors import KvplanError

FIX = Path(__file__).resolve().parent / "fixtures" / "prompts"
TOKENIZER = FIX / "tokenizer"


def write(path: Path, objs: list, gz: bool = False) -> Path:
    text = "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_every_format_is_read_in_file_order(tmp_path):
    p = write(tmp_path / "log.jsonl.gz", [
        {**CHAT, "max_tokens": 5, "cache_salt": "s"},
        {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {**CHAT, "tools": []}},
        {"custom_id": "r2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "abc"}},
        {"prompt": [1, 2, 3], "max_tokens": 2},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
    ], gz=True)
    rs = list(read_requests([p]))
    assert [r.kind for r in rs] == ["chat", "chat", "completion", "completion", "chat"]
    assert (rs[0].output_tokens, rs[0].cache_salt) == (5, "s")
    assert rs[2].prompt == "abc" and rs[3].prompt_ids == [1, 2, 3]
    assert (rs[1].custom_id, rs[2].custom_id, rs[0].custom_id) == ("r1", "r2", None)
    assert rs[4].messages[0]["content"] == "a\nb"  # vLLM's string content format joins text parts
    assert [r.line for r in rs] == [1, 2, 3, 4, 5]


def test_arrival_times_iso_unix_and_ms(tmp_path):
    p = write(tmp_path / "t.jsonl", [{**CHAT, "timestamp": "2026-12-01T00:00:00Z"},
                                      {**CHAT, "created": 1796083201}, {**CHAT, "arrival_time": 1796083202000}])
    assert [r.arrival for r in read_requests([p])] == [1796083200.0, 1796083201.0, 1796083202.0]


def test_files_with_times_are_merged_by_time(tmp_path):
    a = write(tmp_path / "a.jsonl", [{**CHAT, "created": 10}, {**CHAT, "created": 30}])
    b = write(tmp_path / "b.jsonl", [{**CHAT, "created": 20}])
    assert [(Path(r.source).name, r.arrival) for r in read_requests([a, b])] == \
        [("a.jsonl", 10.0), ("b.jsonl", 20.0), ("a.jsonl", 30.0)]


def test_bailian_and_mooncake_lines(tmp_path):
    p = write(tmp_path / "bailian.jsonl", [{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40,
                                           "output_length": 7, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}])
    (r,) = read_requests([p])
    assert (r.kind, r.block_tokens, r.input_length, r.output_tokens, r.arrival) == ("blocks", 16, 40, 7, 0.5)
    m = write(tmp_path / "mooncake.jsonl", [{"timestamp": 1500, "input_length": 600, "output_length": 3,
                                            "hash_ids": [5, 6]}])
    (r,) = read_requests([m])
    assert (r.block_tokens, r.arrival) == (512, 1.5)


@pytest.mark.parametrize("line, message", [
    ("{not json", "not JSON"),
    ('{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}', "only text"),
    ('{"messages": []}', "non-empty"),
    ('{"prompt": [[1, 2], [3]]}', "one prompt a line"),
    ('{"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {}}', "only /v1/chat"),
    ('{"hello": 1}', "not a request"),
    ('{"messages": [{"role": "user", "content": "x"}], "timestamp": "yesterday"}', "timestamp"),
    ('{"chat_id": 1, "timestamp": 1, "input_length": 64, "hash_ids": [1]}', "fewer than input_length"),
    ('[1, 2]', "JSON object"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path, line, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(CHAT) + "\n\n" + line + "\n")
    with pytest.raises(PayloadError) as e:
        list(read_requests([p]))
    assert e.value.line == 3 and e.value.source == str(p)
    assert f"{p}:3" in str(e.value) and message in str(e.value)


def test_times_going_backwards_and_unreadable_files(tmp_path):
    p = write(tmp_path / "b.jsonl", [{**CHAT, "created": 20}, {**CHAT, "created": 10}])
    with pytest.raises(PayloadError, match=r"b.jsonl:2: arrival time goes backwards"):
        list(read_requests([p]))
    with pytest.raises(PayloadError, match="cannot read"):
        list(read_requests([tmp_path / "missing.jsonl"]))
    bad_gz = tmp_path / "x.jsonl.gz"
    bad_gz.write_bytes(gzip.compress(b'{"prompt": "a"}\n')[:-12])
    with pytest.raises(PayloadError, match="x.jsonl.gz"):
        list(read_requests([bad_gz]))


def test_chat_and_completions_render_as_vllm_does(tmp_path):
    """Chat: the template's text tokenized without special tokens (the template writes the BOS);
    completions: with them. Expected values from transformers called directly."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    p = write(tmp_path / "l.jsonl", [{"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "hello"}], "tools": tools},
                                     {"prompt": "hello"}])
    chat, comp = list(read_requests([p]))
    r = Renderer(TOKENIZER)
    want_text = tok.apply_chat_template(chat.messages, tools=tools, tokenize=False, add_generation_prompt=True)
    got = r.render(chat)
    assert got.text == want_text and '"lookup"' in want_text
    assert got.ids == tok(want_text, add_special_tokens=False)["input_ids"]
    assert got.ids.count(tok.bos_token_id) == 1  # once, from the template
    assert r.render(comp).ids == [tok.bos_token_id] + tok("hello", add_special_tokens=False)["input_ids"]
    # --chat-template FILE overrides the tokenizer's; chat_template_kwargs reach the template
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{% for m in messages %}[{{ m.role }}|{{ flavour }}]{{ m.content }}{% endfor %}")
    chat.chat_template_kwargs = {"flavour": "x"}
    assert Renderer(TOKENIZER, tpl).render(chat).text == "[system|x]Be brief.[user|x]hello"


def test_a_missing_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(KvplanError, match=r"--tokenizer .*nope.*never downloads"):
        Renderer(tmp_path / "nope")
    with pytest.raises(KvplanError, match="--tokenizer no-such-org/no-such-model"):
        Renderer("no-such-org/no-such-model")


def test_tool_call_arguments_reach_the_template_as_a_dict(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    p = write(tmp_path / "t.jsonl", [{"messages": [{"role": "user", "content": "go"}, call,
                                                  {"role": "tool", "content": "ok"}]}])
    (r,) = read_requests([p])
    want = tok.apply_chat_template([{"role": "user", "content": "go"},
                                    {**call, "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "f", "arguments": {"x": 1}}}]},
                                    {"role": "tool", "content": "ok"}], tokenize=False, add_generation_prompt=True)
    assert Renderer(TOKENIZER).render(r).text == want and '"arguments": {"x": 1}' in want
    assert r.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # the request is unchanged
    r.messages[1]["tool_calls"][0]["function"]["arguments"] = "{not json"
    with pytest.raises(KvplanError, match=r"t.jsonl:1: messages\[1\]: a tool call's arguments are not JSON"):
        Renderer(TOKENIZER).render(r)
