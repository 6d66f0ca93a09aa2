"""Nothing a command writes may be one of its inputs, and a write that fails is an error naming the
output (adversary round 5): `--per-request` naming the input log, or a symlink or hard link to it,
used to truncate the log before it was read and exit 0 with "0 requests"; `--per-request /dev/full`
ended in a traceback; `report -o` naming the database would have overwritten it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from tests.test_prompts_check import TOKENIZER, timestamp_log
from tests.test_prompts_cli import log

runner = CliRunner()


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_per_request_naming_the_input_log_is_refused_and_the_log_kept(tmp_path: Path, how: str) -> None:
    src = log(tmp_path / "day.jsonl", timestamp_log(4))
    before = src.read_bytes()
    out = tmp_path / "out.jsonl"
    if how == "same":
        out = src
    elif how == "symlink":
        out.symlink_to(src)
    else:
        os.link(src, out)
    r = runner.invoke(app, ["prompts", "check", str(src), "--tokenizer", str(TOKENIZER), "--per-request", str(out)])
    assert r.exit_code == 2, r.output
    assert "--per-request" in r.output and "same file as the input log" in r.output and "Traceback" not in r.output
    assert src.read_bytes() == before  # not truncated: the check refused before opening anything


def test_per_request_naming_the_tokenizer_is_refused(tmp_path: Path) -> None:
    src = log(tmp_path / "day.jsonl", timestamp_log(2))
    copy = tmp_path / "tok"
    copy.mkdir()
    for f in TOKENIZER.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    before = (copy / "tokenizer.json").read_bytes()
    r = runner.invoke(app, ["prompts", "check", str(src), "--tokenizer", str(copy),
                            "--per-request", str(copy / "tokenizer.json")])
    assert r.exit_code == 2 and "--tokenizer" in r.output, r.output
    assert (copy / "tokenizer.json").read_bytes() == before


def test_a_new_per_request_file_beside_the_log_is_written(tmp_path: Path) -> None:
    src = log(tmp_path / "day.jsonl", timestamp_log(3))
    out = tmp_path / "per.jsonl"
    r = runner.invoke(app, ["prompts", "check", str(src), "--tokenizer", str(TOKENIZER), "--per-request", str(out)])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 3


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_per_request_to_a_full_device_is_an_error_naming_it(tmp_path: Path) -> None:
    src = log(tmp_path / "day.jsonl", timestamp_log(3))
    r = runner.invoke(app, ["prompts", "check", str(src), "--tokenizer", str(TOKENIZER), "--per-request", "/dev/full"])
    assert r.exit_code == 2, r.output
    assert "--per-request /dev/full" in r.output and "No space left" in r.output
    assert not isinstance(r.exception, OSError)


def test_report_output_naming_the_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "k.duckdb"
    assert runner.invoke(app, ["migrate", "--db", str(db)]).exit_code == 0
    before = db.read_bytes()
    r = runner.invoke(app, ["report", "--deployment", "d", "--month", "2026-11", "-o", str(db), "--db", str(db)])
    assert r.exit_code == 2 and "same file as the input --db" in r.output, r.output
    assert db.read_bytes() == before
