"""A Qwen3-style thinking template and multi-turn agent sessions with tool calls, for the
template-history tests (tests/test_prompts_thinking.py) and their live check against vLLM
(bench/prompts_live.py)."""

from __future__ import annotations

import json
import random
from typing import Any

THINK_TEMPLATE = (
    # Modelled on Qwen3's: an assistant turn's reasoning (its `reasoning_content`, else the
    # <think>...</think> at the head of its content) is rendered only after the last user query;
    # earlier turns are rendered without it. `preserve_thinking` (Qwen3.6's switch) keeps it.
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n"
    "{% endif %}# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>{%- endif %}"
    "{%- set ns = namespace(last_query_index=-1) %}"
    "{%- for message in messages %}{%- if message.role == 'user' %}{%- set ns.last_query_index = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "\n<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content or '' %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if (preserve_thinking is defined and preserve_thinking) or loop.index0 > ns.last_query_index %}"
    "{%- if loop.last or reasoning_content %}"
    "\n<|im_start|>assistant\n<think>\n{{ reasoning_content.strip('\\n') }}\n</think>\n\n{{ content.lstrip('\\n') }}"
    "{%- else %}\n<|im_start|>assistant\n{{ content }}{%- endif %}"
    "{%- else %}\n<|im_start|>assistant\n{{ content }}{%- endif %}"
    "{%- if message.tool_calls %}{%- for tc in message.tool_calls %}"
    "\n<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments | tojson }}}"
    "\n</tool_call>{%- endfor %}{%- endif %}<|im_end|>"
    "{%- elif message.role == 'tool' %}"
    "\n<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}")

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "description": f"{name} over the project files.",
                                      "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
    for name in ("read_file", "search", "run_tests")]
SYSTEM = "\n".join(f"Rule {i}: you are a careful coding agent; cite the file for claim {i}." for i in range(12))
WORDS = ("cache", "block", "prefix", "token", "tool", "turn", "agent", "plan", "check", "file", "test", "hash")


def _think(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def agent_log(sessions: int = 4, queries: int = 3, steps: int = 2, seed: int = 11) -> list[dict]:
    """Each session: ``queries`` user queries; each query gets ``steps`` tool-calling assistant
    turns (each with its tool result) and a final answer. Every assistant turn the client sends
    back holds its <think> block at the head of its content (as a client that keeps the whole
    generated text sends it). One request a model call: the log's requests in arrival order,
    sessions interleaved."""
    rng = random.Random(seed)
    per: list[list[dict]] = []
    for s in range(sessions):
        msgs: list[dict] = [{"role": "system", "content": SYSTEM}]
        reqs = []
        for q in range(queries):
            msgs.append({"role": "user", "content": f"Session {s} query {q}: " + _think(rng, 12)})
            for k in range(steps + 1):
                reqs.append({"model": "m", "max_tokens": 64, "tools": TOOLS, "messages": [dict(m) for m in msgs]})
                think = f"<think>\n{_think(rng, 30 + rng.randrange(20))}\n</think>\n\n"
                if k < steps:
                    call = {"id": f"c{s}{q}{k}", "type": "function",
                            "function": {"name": TOOLS[k % 3]["function"]["name"],
                                         "arguments": json.dumps({"arg": _think(rng, 3)})}}
                    msgs.append({"role": "assistant", "content": think + "Calling a tool.", "tool_calls": [call]})
                    msgs.append({"role": "tool", "tool_call_id": call["id"], "content": _think(rng, 25)})
                else:
                    msgs.append({"role": "assistant", "content": think + "Answer: " + _think(rng, 15)})
        per.append(reqs)
    out: list[dict] = []
    for i in range(max(len(r) for r in per)):
        out.extend(r[i] for r in per if i < len(r))
    return out


def dropped(body: dict) -> dict:
    """What a client that drops the reasoning sends: each assistant turn without its think block."""
    msgs = []
    for m in body["messages"]:
        c = m.get("content") or ""
        if m["role"] == "assistant" and "</think>" in c:
            m = {**m, "content": c.split("</think>")[-1].lstrip("\n")}
        msgs.append(m)
    return {**body, "messages": msgs}
