"""The capacity report (kvplan.app.report, `kvplan report`): contents per the evaluation in the
domain notes, deterministic for the same data, a valid PDF whose text (pdftotext) holds
the numbers, CPU-scale provenance, clear errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.app.cli import app
from kvplan.app.cli import app as cli
from kvplan.app.report import build, fmt, render_html, write_report
from kvplan.collectors.scrape.scrape import import_file
from kvplan.models.core.errors import KvplanError
from kvplan.models.inputs.settings import Settings
from tests import hostile
from tests.hostile import AT, payload
from tests.test_app_fixtures import DEPLOYMENT, MEASURED_ON, hour, scenario_db, scenario_expected, scenario_plan
from tests.test_store_stats import one, put

EXP = scenario_expected()
SECTIONS = ["Decision", "1. Measured reuse", "2. Tail baseline", "3. Topology", "4. Pilot comparison",
            "5. Pricing", "6. Assumptions and price book", "7. Data provenance",
            "8. Cache size and topology what-if"]


@pytest.fixture
def scen(tmp_path):
    return scenario_db(tmp_path)


def text_of(html: str) -> str:
    """The visible text of the report, whitespace collapsed."""
    body = re.sub(r"<style>.*?</style>|<svg.*?</svg>", " ", html, flags=re.DOTALL)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))
    return re.sub(r" ([,.)])", r"\1", text).replace("&#x27;", "'").replace("&quot;", '"').replace("&amp;", "&")


def pdftotext(path) -> str:
    return subprocess.run(["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True,
                          text=True).stdout


def test_html_report_holds_every_section_and_the_numbers(scen, tmp_path):
    path = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "r.html")
    html = path.read_text()
    headings = re.findall(r"<h2>([^<]+)</h2>", html)
    assert headings == SECTIONS
    text = text_of(html)
    # the whole month, as kvplan plan over it reads it: the same traffic, and the hour from the
    # engines' start (their _created, an hour before the first scrape) covered with none
    ref = scenario_plan(0, 48, since=-1)
    assert f"{ref.decision.kind} {ref.decision.reason}" in text
    assert f"Monthly benefit: {fmt.usd(ref.monthly_benefit_usd)}" in text
    assert f"vLLM prefix cache (device) {EXP['hit_all']}" in text
    assert f"LMCache MP L1 (CPU memory) {EXP['l1_all']}" in text
    assert f"TTFT p50 {EXP['ttft_p50']}, p99 {EXP['ttft_p99']} over {EXP['requests_all']} requests" in text
    assert "TTFT p99 475 ms bucket 0.25..0.5 s" in text
    assert "snapped to the nearest bound, 2.5 s" in text
    assert "Shared cache: 2 LMCache multi-process server(s) serve 4 vLLM engine(s)" in text
    assert "node1 1 2 1 yes" in text  # node, vLLM servers, engines, LMCache MP servers, connector
    assert "unique sessions (baseline) vs shared prefix" in text
    assert "usd_per_gpu_hour 2.5 $/GPU-hour" in text and "ttft_p99_slo_seconds 2.0 s" in text
    assert "node2-vllm 48 1" in text  # scrape counts: ok, failed
    assert "failed scrape: http://node2:8000/metrics: connection refused" in text
    assert "no samples in Prometheus (target down or not scraped)" in text
    assert "span_increases sql/queries/dashboard.sql".replace("sql/queries/", "") in text
    assert "<svg" in html and html.count('class="chart"') == 7  # + the TPOT and ITL charts
    # saved prefill by tier, hand-worked in tests/test_app_pages.py (5.28 and 0.81 GPU-h/month over
    # 48 h), here over the month's 49 covered hours: 1,248 GPU-s x 730.56 / 49 / 3600 = 5.17 and
    # 0.81 x 48 / 49 = 0.80, at the scenario's $2.5/GPU-hour: 5.17 x 2.5 = $13, 0.80 x 2.5 = $2
    assert "vLLM prefix cache 5.17 5.17.. 5.17 $13 free" in text
    assert "LMCache, net of its overhead 0.80 0.80.. 0.80 $2" in text
    # prompt tokens: (0.035 s / 2000 + 50 us x 500 / 2000) x 1e6 = 30 GPU-s -> $0.02; without reuse
    # (0.035 / 2000 + 50 us) x 1e6 = 67.5 GPU-s -> $0.05; output tokens: no engine busy time reported
    assert "prompt tokens $0.02 $0.05 output tokens n/a n/a" in text
    assert "Prefill cost model (fitted): fixed 35 ms/request" in text and "per_token 50 us/token" in text


def test_report_tail_baseline_has_decode_speed(scen, tmp_path):
    html = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "r.html").read_text()
    text = text_of(html)
    assert (f"TPOT p50 {EXP['tpot_p50']}, p99 {EXP['tpot_p99']} (one value per request" in text
            and f"ITL p50 {EXP['itl_p50']}, p99 {EXP['itl_p99']} (one value per generated token)" in text)
    assert f"TPOT p99 {EXP['tpot_p99']} {EXP['tpot_bucket']}" in text  # the quantile table
    assert f"ITL p99 {EXP['itl_p99']} {EXP['itl_p99_bucket']}" in text
    assert "TPOT SLO attainment: 100.0% of requests had TPOT ≤ 0.1 s (the 0.1 s SLO is a bucket bound: exact)" in text
    assert f"TPOT {EXP['tpot_mean']}" in text and f"ITL {EXP['itl_mean']}" in text  # the means table
    # the charts: TTFT, then TPOT with its SLO rule, then ITL
    tail = html[html.index("<h2>2. Tail baseline</h2>"):html.index("<h2>3. Topology</h2>")]
    assert tail.count('class="chart"') == 3 and "SLO 0.1 s" in tail


def test_report_without_tpot_and_itl_says_not_reported(db, tmp_path):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    text = text_of(write_report(db, "d", "2026-11", tmp_path / "r.html").read_text())
    assert "Not reported: these servers expose neither vllm:request_time_per_output_token_seconds" in text
    assert "TPOT p99 not reported" in text  # the quantile table


def test_the_provenance_lists_only_queries_that_exist():
    from kvplan.app.report.data import QUERIES_USED
    from kvplan.sql.db import queries

    assert set(QUERIES_USED) <= set(queries()), set(QUERIES_USED) - set(queries())


def test_cpu_numbers_carry_their_provenance(scen, tmp_path):
    text = text_of(write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "r.html").read_text())
    assert text.count(MEASURED_ON) >= 3  # banner, runs, provenance
    assert "CPU-scale numbers." in text and "not GPU results" in text
    gpu = text_of(write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "g.html",
                               measured_on="8x H100 80GB").read_text())
    assert "Measured on: 8x H100 80GB" in gpu
    assert "CPU-scale numbers." in gpu  # the pilot runs still were measured on the CPU stack


def test_same_data_same_report(scen, tmp_path):
    a = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "a.html").read_bytes()
    b = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "b.html").read_bytes()
    assert a == b
    assert b"Generated at" not in a
    when = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    c = render_html(build(scen, DEPLOYMENT, "2026-11"), generated_at=when)
    assert "Generated at 2026-12-01 02:00 UTC." in c
    pa = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "a.pdf").read_bytes()
    pb = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "b.pdf").read_bytes()
    assert pa == pb


def test_pdf_is_valid_and_its_text_holds_the_numbers(scen, tmp_path):
    from pypdf import PdfReader

    path = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "r.pdf")
    assert path.read_bytes().startswith(b"%PDF-")
    assert len(PdfReader(path).pages) >= 4
    text = pdftotext(path)
    ref = scenario_plan(0, 48)
    for needle in (EXP["hit_all"], EXP["ttft_p50"], EXP["ttft_p99"], fmt.usd(ref.monthly_benefit_usd),
                   ref.decision.kind, "Capacity report: prod, 2026-11", "7. Data provenance"):
        assert needle in text, needle


def test_a_report_without_runs_or_enough_data_still_says_what_it_knows(db, tmp_path):
    put(db, 0, one(0, 0, [0, 0, 0]))
    put(db, 1, one(10, 100, [2, 4, 4]))
    text = text_of(write_report(db, "d", "2026-11", tmp_path / "r.html").read_text())
    assert "NEED_DATA vLLM prefix cache: Not enough data to price reuse" in text  # the tier named (issue 20)
    assert "No workload-driver runs recorded for this deployment" in text
    assert "Measured on: not recorded" in text and "CPU-scale numbers." not in text
    assert "Private caches" not in text and "One vLLM engine" in text


def test_report_errors_name_what_is_wrong(scen, tmp_path):
    with pytest.raises(KvplanError, match="no data in 2026-10"):
        write_report(scen, DEPLOYMENT, "2026-10", tmp_path / "r.pdf")
    with pytest.raises(KvplanError, match=r"r\.docx: the report is written as \.pdf or \.html"):
        write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "r.docx")
    with pytest.raises(KvplanError, match="no deployment 'nope'"):
        write_report(scen, "nope", "2026-11", tmp_path / "r.pdf")


def test_cli_report_writes_pdf_and_html(scen, tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["report", "--db", str(scen.path), "--deployment", DEPLOYMENT, "--month", "2026-11",
                            "-o", str(tmp_path / "r.pdf")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF-")
    assert "capacity report of 'prod' for 2026-11" in " ".join(r.output.split())
    r = runner.invoke(cli, ["report", "--db", str(scen.path), "--deployment", DEPLOYMENT, "--month", "2026-11",
                            "-o", str(tmp_path / "r.html"), "--generated-at", "2026-12-01T02:00Z"])
    assert r.exit_code == 0 and "Generated at 2026-12-01 02:00 UTC." in (tmp_path / "r.html").read_text()
    r = runner.invoke(cli, ["report", "--db", str(scen.path), "--deployment", DEPLOYMENT, "--month", "2026-10",
                            "-o", str(tmp_path / "x.pdf")])
    assert r.exit_code == 2 and "no data in 2026-10" in " ".join(r.output.split())
    assert not (tmp_path / "x.pdf").exists()


def test_the_nightly_job_writes_the_report(scen, tmp_path):
    """kvplan.app.report.nightly_reports, the report job the CLI gives the scheduler: one report per
    deployment with data that month; a deployment without data is skipped."""
    from kvplan.app.report import nightly_reports

    s = Settings(db=scen.path)
    s.schedule.report_dir = tmp_path / "reports"
    written = nightly_reports(s, hour(30).date())
    assert [p.name for p in written] == [f"prod-2026-11.{s.schedule.report_format}"]
    assert (tmp_path / "reports" / written[0].name).stat().st_size > 10_000


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_pdftotext_is_available():
    assert subprocess.run(["pdftotext", "-v"], capture_output=True).returncode == 0


def test_report_shows_the_load_sweep_it_sized_from(scen, tmp_path):
    from kvplan.collectors.loadgen.sweep import save_sweep
    from tests.test_sweep import even, side

    no = text_of(write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "a.html").read_text())
    assert "sized by queueing formula (fallback: no load sweep measured)" in no and "No load sweep stored" in no
    for s in (side("off", [(2, even(2, 0.5)), (4, even(4, 1.0)), (8, even(8, 3.0))]),
              side("on", [(2, even(2, 0.03)), (4, even(4, 0.04)), (8, even(8, 0.05))])):
        save_sweep(scen, DEPLOYMENT, s, pair="p1", measured_on=MEASURED_ON)
    html = write_report(scen, DEPLOYMENT, "2026-11", tmp_path / "b.html").read_text()
    text = text_of(html)
    assert "sized by measured goodput per replica (load sweep)" in text
    assert "Load sweep load sweep 'p1'" in text and "CPU-scale seconds from a tiny model" in text
    assert "without reuse" in text and "ttft_p99" in text
    assert html.count('class="chart"') == 8  # + the sweep curves


# -- hostile or careless inputs --------------------------------------------------------------
@pytest.mark.parametrize("where", ["dir", "under_file", "unwritable"])
def test_report_output_that_cannot_be_written_is_an_error(db, tmp_path, where):
    import os

    from tests.recorded import import_case

    import_case(db, "restart", deployment="d")
    month = db.fetch("deployments")[0]["first_scrape"].strftime("%Y-%m")
    if where == "dir":
        out = tmp_path / "r.html"
        out.mkdir()
    elif where == "under_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "r.html"
    else:
        if os.geteuid() == 0:
            out = Path("/proc/kvplan-test/r.html")     # root writes anywhere else
        else:
            (tmp_path / "ro").mkdir(mode=0o500)
            out = tmp_path / "ro" / "r.html"
    r = hostile.runner.invoke(app, ["report", "--deployment", "d", "--month", month, "-o", str(out),
                                    "--db", str(db.path)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "cannot write" in r.output, r.output


def test_empty_window_report_is_refused(db, tmp_path):
    from datetime import timedelta

    import_file(db, "d", payload(tmp_path, "a.prom"), AT)      # one scrape per target: no increase
    import_file(db, "d", payload(tmp_path, "b.prom"), AT + timedelta(minutes=5))
    out = tmp_path / "r.html"
    r = hostile.runner.invoke(app, ["report", "--deployment", "d", "--month", "2026-01", "-o", str(out),
                            "--db", str(db.path)])
    assert r.exit_code == 2 and "one scrape" in r.output and not out.exists(), r.output


# ---- where the report is written -----------------------------------------------------------
def _report(scen, out, month="2026-11"):
    return CliRunner().invoke(cli, ["report", "--deployment", DEPLOYMENT, "--month", month, "-o", str(out),
                                    "--db", str(scen.path)])


def test_report_never_writes_through_a_symbolic_link(scen, tmp_path):
    # `report -o link.html` followed the link and overwrote its target
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    r = _report(scen, link)
    assert r.exit_code == 2 and "symbolic link" in r.output and "Traceback" not in r.output, r.output
    assert target.read_text() == "keep me" and link.is_symlink()


@pytest.mark.timeout(60)
def test_report_to_a_fifo_is_refused_not_a_hang(scen, tmp_path):
    import os

    fifo = tmp_path / "a-fifo.html"
    os.mkfifo(fifo)
    r = _report(scen, fifo)  # blocked forever opening the FIFO for writing
    assert r.exit_code == 2 and "not a regular file" in r.output, r.output


def test_report_replaces_a_file_whole(scen, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    assert _report(scen, out).exit_code == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.html.")] == []  # no temp file left


@pytest.mark.parametrize("month", ["9999-12", "1999-12", "2101-01"])
def test_report_month_outside_2000_to_2100_is_refused(scen, tmp_path, month):
    r = _report(scen, tmp_path / "r.html", month)  # 9999-12 raised ValueError: year 10000 is out of range
    assert r.exit_code == 2 and "--month" in r.output and "Traceback" not in r.output, r.output


def test_nightly_report_names_stay_inside_report_dir(db, tmp_path):
    # the nightly job built its file name from the deployment name: '../../escaped' wrote two folders up
    from datetime import date

    from kvplan.app.report import nightly_reports
    from kvplan.models.inputs.settings import Settings

    for name in ("../../escaped", "a/b", "a_b"):
        put(db, 0, one(0, 0, [0, 0, 0]), deployment=name)
        put(db, 1, one(10, 100, [2, 4, 4]), deployment=name)
    s = Settings(db=db.path)
    s.schedule.report_dir = tmp_path / "deep" / "reports"
    written = nightly_reports(s, date(2026, 11, 30))
    assert len(written) == 3 and all(p.parent == tmp_path / "deep" / "reports" for p in written)
    assert not list(tmp_path.glob("escaped-*")) and not list((tmp_path / "deep").glob("escaped-*"))
    assert len({p.name for p in written}) == 3  # 'a/b' and 'a_b' do not share a file
    from kvplan.app.report import report_file_name

    assert report_file_name("prod", "2026-11", "pdf") == "prod-2026-11.pdf"  # plain names unchanged
    assert report_file_name("../../escaped", "2026-11", "pdf").startswith("_.._escaped-")


def test_charts_drawn_in_the_background_are_the_bytes_drawn_in_turn_each_in_its_place():
    import altair as alt
    import pandas as pd
    import vl_convert

    from kvplan.app.report.render import WIDTH, charts_in_background, svg

    frame = pd.DataFrame({"x": [1, 2, 3], "y": [3.0, 1.0, 2.0]})
    made = [alt.Chart(frame, title=f"chart {i}").mark_line().encode(x="x:Q", y="y:Q") for i in range(3)]
    # in turn: vl-convert's SVG of each spec, straight (the report's path before it drew in the background)
    direct = "<p>a</p>".join(f'<div class="chart">{vl_convert.vegalite_to_svg(c.properties(width=WIDTH).to_dict())}'
                             "</div>" for c in made)
    assert "".join(svg(c) for c in made[:1]) == direct.split("<p>a</p>")[0]
    with charts_in_background() as bg:
        body = "<p>a</p>".join(svg(c) for c in made)
        assert "<svg" not in body  # markers only, until fill
        filled = bg.fill(body)
    assert filled == direct
    assert [filled.index(f"chart {i}") for i in range(3)] == sorted(filled.index(f"chart {i}") for i in range(3))
    with charts_in_background() as bg:  # a chart vl-convert refuses fails the report, at fill
        marker = svg(alt.Chart(frame).mark_line().encode(x="x:Q").properties(usermeta={"x": object()}))
        with pytest.raises(ValueError, match="vl_spec"):
            bg.fill(marker)
