"""A finding's example keeps the span's shape, never its text, in every script (adversary round 5:
Chinese, Japanese, Korean, Arabic, Hebrew, Thai and Hindi came through verbatim, since only cased
letters were masked). Checked on every surface: the JSON, the text output and the report section."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.report.prompts import render_section
from kvplan.models.prompts.busters import shape
from tests.test_prompts_check import DOC, TOKENIZER

runner = CliRunner()
WORDS = {  # a per-request value early in the prompt (a user's name, a session), one script each
    "chinese": ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊"],
    "japanese": ["さくら", "ひなた", "ゆうき", "はると", "あおい", "そうた"],
    "korean": ["민준", "서연", "도윤", "하은", "시우", "지유"],
    "arabic": ["محمد", "فاطمة", "أحمد", "مريم", "علي", "خديجة"],
    "hebrew": ["דוד", "שרה", "משה", "רחל", "יוסף", "לאה"],
    "thai": ["สมชาย", "สมหญิง", "ประยุทธ", "มาลี", "สุดา", "วิชัย"],
    "hindi": ["राहुल", "प्रिया", "अमित", "सुनीता", "विजय", "अनीता"],
}


def letters(words: list[str]) -> set[str]:
    return {ch for w in words for ch in w if ch.isalpha()}


@pytest.mark.parametrize("script", list(WORDS))
def test_no_letter_of_any_script_reaches_an_output(tmp_path, script):
    words = WORDS[script]
    log = tmp_path / "day.jsonl"
    log.write_text("".join(json.dumps({"messages": [
        {"role": "system", "content": f"You are a support agent.\nUser: {words[i % len(words)]} #{i}\n{DOC}"},
        {"role": "user", "content": f"Question {i}?"}]}, ensure_ascii=False) + "\n" for i in range(12)),
        encoding="utf-8")
    r = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["findings"], "the per-request value is a cache-buster the check should find"
    text = runner.invoke(app, ["prompts", "check", str(log), "--tokenizer", str(TOKENIZER)])
    assert text.exit_code == 0
    surfaces = {"json": r.stdout, "text": text.output, "report": render_section(d)}
    for name, out in surfaces.items():
        leaked = letters(words) & set(out)
        assert not leaked, f"{script}: {name} shows {sorted(leaked)}"
    assert any(f["example"] and "a" in f["example"] for f in d["findings"])  # the shape is still there


def test_the_shape_is_by_category():
    assert shape("2026-12-05T10:00:00Z") == "9999-99-99A99:99:99A"
    assert shape("会话 ١٢٣ Ünï") == "aa 999 Aaa"
    assert shape("नमस्ते") == "aaaa"  # vowel signs (marks) dropped, letters kept as a
    assert shape("a\u200bb«c»") == "aa*a*"  # zero-width dropped, non-ASCII punctuation as *
