"""The dashboard in a real browser: Debian's Chromium driven by Playwright against
`streamlit run app/streamlit_app.py` (started once per session on a free port, its output
in a log file printed when it fails) on the scenario DuckDB file of tests/test_app_fixtures.

Checks: every page renders its key numbers; changing the time range updates them; editing
the price book changes the dollar figure; the report downloads as a valid PDF whose text
holds the numbers the page shows. A screenshot of every page goes to
test-artifacts/screenshots/."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from kvplan.app.data.store import deployments_with_data, load_pricebook
from kvplan.app.data.window import load_window
from kvplan.app.launch import DashboardDidNotStart, start_dashboard, stop_dashboard
from kvplan.app.report import fmt
from kvplan.app.views.runs import runs_view
from kvplan.models.inputs.pricebook import PriceBook
from tests.test_app_fixtures import DEPLOYMENT, scenario_db, scenario_expected, scenario_plan

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
EXP = scenario_expected()
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"


def start_server(db_path: Path, log_path: Path):
    """(process, base URL) of `streamlit run app/streamlit_app.py` on a free port; its output
    goes to ``log_path``, printed in the failure when it does not come up."""
    try:
        return start_dashboard(db_path, log_path, extra={"server.fileWatcherType": "none"})
    except DashboardDidNotStart as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, Database) of a Streamlit server on the scenario database."""
    base = tmp_path_factory.mktemp("browser")
    db = scenario_db(base)
    proc, url = start_server(db.path, base / "streamlit.log")
    yield url, db
    stop_dashboard(proc)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `make test` installs Debian's chromium", pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1440, "height": 1800}, accept_downloads=True)
    pg = ctx.new_page()
    pg.set_default_timeout(90_000)
    yield pg
    ctx.close()


def settle(pg) -> None:
    """Wait until the script run the last interaction started has finished."""
    pg.wait_for_timeout(300)
    pg.wait_for_selector(IDLE)
    pg.wait_for_timeout(200)
    pg.wait_for_selector(IDLE)


def open_page(pg, url: str, path: str, wait_for: str = "[data-testid='stMetric']") -> None:
    pg.goto(f"{url}/{path}")
    pg.wait_for_selector(wait_for)
    settle(pg)


def metrics(pg) -> dict[str, str]:
    out = {}
    for m in pg.locator("[data-testid='stMetric']").all():
        label = m.locator("[data-testid='stMetricLabel']").inner_text().strip()
        out[label] = m.locator("[data-testid='stMetricValue']").inner_text().strip()
    return out


def shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.evaluate("() => { for (const el of [document.scrollingElement, "
                "document.querySelector(\"[data-testid='stMain']\")]) if (el) el.scrollTo(0, 0); }")
    pg.wait_for_timeout(800)  # let the charts draw
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def select(pg, label: str, option: str) -> None:
    pg.get_by_role("combobox", name=label).click()
    pg.get_by_role("option", name=option, exact=True).click()
    settle(pg)


PAGES = {  # url path -> (screenshot name, metrics that must show)
    "": ("1-overview", {"Prefix-cache hit rate": EXP["hit_all"], "TTFT p50": EXP["ttft_p50"],
                        "TTFT p99": EXP["ttft_p99"], "Requests": EXP["requests_all"], "GPUs": "4"}),
    "cache": ("2-cache", {"vLLM prefix cache (device)": EXP["hit_all"], "LMCache MP L1 (CPU memory)": EXP["l1_all"],
                          "L1 usage (latest, highest server)": "56.0%"}),
    "latency": ("3-latency", {"TTFT p50": EXP["ttft_p50"], "TTFT p99": EXP["ttft_p99"], "SLO bound used": "2.5 s",
                              "SLO attainment": "100.0%", "TPOT p50": EXP["tpot_p50"], "TPOT p99": EXP["tpot_p99"],
                              "ITL p50": EXP["itl_p50"], "ITL p99": EXP["itl_p99"], "TPOT SLO bound used": "0.1 s",
                              "TPOT SLO attainment": "100.0%"}),
    "cost": ("4-cost", {"GPUs today": "4"}),
    "runs": ("5-runs", {}),
    "collection": ("6-collection", {"Targets": "4", "Scrapes": "196", "Failed scrapes": "1"}),
    "report": ("7-report", {"Prefix-cache hit rate": EXP["hit_all"], "TTFT p99": EXP["ttft_p99"]}),
}


def test_a_deep_link_opened_first_after_a_start_runs_inside_the_navigation(browser, tmp_path):
    """Streamlit reads app/pages/ as a v1 pages directory until a session has run the main
    script: without state.through_navigation, /cost opened first ran cost.py alone."""
    db = scenario_db(tmp_path)
    proc, url = start_server(db.path, tmp_path / "streamlit.log")
    try:
        ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
        pg = ctx.new_page()
        pg.set_default_timeout(90_000)
        open_page(pg, url, "cost")
        nav = [a.inner_text().split("\n")[-1] for a in pg.locator("[data-testid='stSidebarNav'] a").all()]
        assert nav == ["Overview", "Cache", "Latency", "Cost & decision", "Runs", "What-if", "Prompts", "Collection",
                       "Report"]
        assert pg.locator("h1").first.inner_text() == "Cost & decision"
        ctx.close()
    finally:
        stop_dashboard(proc)


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_renders_its_key_numbers(server, page, path):
    url, db = server
    name, want = PAGES[path]
    open_page(page, url, path)
    got = metrics(page)
    ref = scenario_plan(0, 48)
    if path in ("", "cost", "report"):
        want = dict(want, **{"Monthly benefit": fmt.usd(ref.monthly_benefit_usd)})
    if path == "runs":
        r = {x["label"]: x for x in runs_view(db, DEPLOYMENT).runs}
        want = {"total time": f"{r['unique sessions']['wall_s'] / r['shared prefix']['wall_s']:.1f}x shorter"}
    assert {k: got.get(k) for k in want} == want
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    if path == "report":  # the preview: the report itself, in its own frame
        heading = page.frame_locator("iframe").locator("h1")
        assert heading.inner_text() == "Capacity report: prod, 2026-11"
    elif path not in ("runs", "collection"):
        # the charts come after the numbers on the page; on a loaded machine they can land later
        page.wait_for_selector("[data-testid='stVegaLiteChart'], .vega-embed", timeout=60_000)
        assert page.locator("[data-testid='stVegaLiteChart'], .vega-embed").count() >= 1
    shot(page, name)


def test_changing_the_time_range_updates_the_numbers(server, page):
    url, db = server
    open_page(page, url, "")
    before = metrics(page)
    select(page, "Time range", "last 24 hours")
    page.wait_for_function("() => [...document.querySelectorAll(\"[data-testid='stMetricValue']\")]"
                           f".some(e => e.innerText.trim() === '{EXP['requests_day2']}')")
    after = metrics(page)
    assert before["Prefix-cache hit rate"] == EXP["hit_all"]
    assert (after["Prefix-cache hit rate"], after["Requests"]) == (EXP["hit_day2"], EXP["requests_day2"])
    assert after["Monthly benefit"] == fmt.usd(scenario_plan(24, 48).monthly_benefit_usd)
    shot(page, "1b-overview-last-24-hours")


def test_price_book_edit_changes_the_dollars_and_the_report_pdf_holds_the_page_numbers(server, page, tmp_path):
    url, db = server
    open_page(page, url, "cost")
    before = metrics(page)["Monthly benefit"]
    # one GPU holds the scenario with or without reuse: the benefit is minus the ops time (4 h x $100),
    # so the ops rate moves it: 4 h x $50 = -$200 (tests/test_app_pages.py)
    assert before == "-$400"
    box = page.get_by_role("spinbutton", name="usd_per_ops_hour ($/hour)")
    box.fill("50")
    page.get_by_role("button", name="Save price book").click()
    page.wait_for_selector("text=Price book saved for 'prod'.")
    settle(page)
    after = metrics(page)["Monthly benefit"]
    assert load_pricebook(db, DEPLOYMENT).pricebook.usd_per_ops_hour == 50.0
    ref = scenario_plan(0, 48, PriceBook(usd_per_ops_hour=50.0))
    assert after == fmt.usd(ref.monthly_benefit_usd) == "-$200"
    shot(page, "4b-cost-after-price-edit")

    open_page(page, url, "report")
    shown = metrics(page)
    assert shown["Monthly benefit"] == after
    with page.expect_download(timeout=180_000) as dl:
        page.get_by_role("button", name="Download PDF").click()
    pdf = tmp_path / "report.pdf"
    dl.value.save_as(pdf)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    from pypdf import PdfReader

    assert len(PdfReader(pdf).pages) >= 4
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], check=True, capture_output=True,
                          text=True).stdout
    for label in ("Decision", "Monthly benefit", "Prefix-cache hit rate", "TTFT p50", "TTFT p99", "Requests"):
        assert shown[label] in text, (label, shown[label])
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download HTML").click()
    html = tmp_path / "report.html"
    dl.value.save_as(html)
    assert "Capacity report: prod, 2026-11" in html.read_text() and after in html.read_text()


# ---- the recorded demo dataset (real CPU-stack data, time axis stretched) ---------------------
@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    from kvplan.collectors.demo import DEMO_FILE, load_demo
    from kvplan.sql.db import Database

    if not DEMO_FILE.exists():
        pytest.fail(f"{DEMO_FILE} missing: it is committed; re-record with deploy/local/recorders/record_demo.py")
    base = tmp_path_factory.mktemp("demo")
    db = Database(base / "demo.duckdb")
    db.migrate()
    dep = load_demo(db)["deployment"]
    proc, url = start_server(db.path, base / "streamlit.log")
    yield url, db, dep
    stop_dashboard(proc)


DEMO_PAGES = {"": ("Prefix-cache hit rate", "Requests"), "cache": ("vLLM prefix cache (device)",),
              "latency": ("TTFT p50", "TTFT p99"), "cost": ("Monthly benefit",), "runs": (),
              "collection": ("Targets",), "report": ("Monthly benefit",)}


@pytest.mark.parametrize("path", list(DEMO_PAGES))
def test_demo_dataset_pages(demo_server, page, path):
    """Every page on the recorded demo data: no error, the window's numbers, a screenshot."""
    url, db, dep = demo_server
    open_page(page, url, path, wait_for="h1")
    for label in DEMO_PAGES[path]:  # a slow page may still be drawing when the run looks idle
        page.locator("[data-testid='stMetricLabel']", has_text=label).first.wait_for(timeout=90_000)
    settle(page)
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    got = metrics(page)
    d = next(x for x in deployments_with_data(db) if x["deployment"] == dep)
    s = load_window(db, dep, d["first_ts"], d["last_ts"]).stats
    want = {"Prefix-cache hit rate": fmt.pct(s.prefix_cache_hit_rate), "Requests": fmt.count(s.requests),
            "vLLM prefix cache (device)": fmt.pct(s.prefix_cache_hit_rate), "TTFT p50": fmt.quantile(s.ttft_p50),
            "TTFT p99": fmt.quantile(s.ttft_p99), "Targets": str(d["targets"])}
    for label in DEMO_PAGES[path]:
        if label in want:
            assert got[label] == want[label], label
        else:
            assert got[label].startswith(("$", "-$")), (label, got[label])
    if path == "runs":
        assert page.get_by_text("CPU-scale", exact=False).count() >= 1
    shot(page, f"demo-{path or 'overview'}")


# ---- charts read right, minimal toolbar, no machine paths --------------------------------

CHARTS_JS = """() => [...document.querySelectorAll('.vega-embed svg')].map(svg => {
  const x = [...svg.querySelectorAll('g.role-axis')]
    .find(g => (g.getAttribute('aria-label') || '').startsWith('X-axis'));
  const paths = sel => [...svg.querySelectorAll(sel)].map(p => p.getAttribute('d') || '');
  return {
    title: [...svg.querySelectorAll('.role-title-text text')].map(t => t.textContent).join(' '),
    xtitle: x ? [...x.querySelectorAll('.role-axis-title text')].map(t => t.textContent).join(' ') : '',
    xlabels: x ? [...x.querySelectorAll('.role-axis-label text')].map(t => t.textContent) : [],
    gaps: [...svg.querySelectorAll('.mark-rect.role-mark path')]
      .map(p => [p.getAttribute('aria-label') || '', p.getAttribute('d') || ''])
      .filter(([label]) => label.includes('; gap: ')),
    lines: paths('.mark-line.role-mark path').concat(paths('.mark-area.role-mark path')),
    texts: [...svg.querySelectorAll('.mark-text.role-mark text')].map(t => t.textContent),
  };
})"""
LABEL_24H = re.compile(r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?|\d\d [A-Z][a-z]{2}")
NUM = r"(-?[\d.]+(?:e-?\d+)?)"


def time_charts(pg, at_least: int = 1, timeout_s: float = 90.0) -> list[dict]:
    """The page's time-axis charts, once at least ``at_least`` are drawn (a slow page may still be
    drawing when the script run looks idle), or what there is after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        pg.wait_for_timeout(800)  # let Vega draw
        got = [c for c in pg.evaluate(CHARTS_JS) if c["xtitle"].startswith("time (")]
        if len(got) >= at_least or time.monotonic() > deadline:
            return got


def subpaths(d: str) -> list[list[float]]:
    """The x coordinates of each piece of an SVG path (a new piece at every M)."""
    return [[float(x) for x, _ in re.findall(NUM + "," + NUM, "M" + part)] for part in d.split("M") if part.strip()]


def band(d: str) -> tuple[float, float]:
    x, _, w = re.match(r"M" + NUM + "," + NUM + "h" + NUM, d).groups()
    return min(float(x), float(x) + float(w)), max(float(x), float(x) + float(w))


@pytest.mark.parametrize("path", ["", "cache", "latency"])
def test_demo_charts_break_at_gaps_and_speak_24_hour_utc(demo_server, page, path):
    url, db, dep = demo_server
    open_page(page, url, path, wait_for="h1")
    charts = time_charts(page, at_least=2)
    assert len(charts) >= 2, [c["title"] for c in charts]
    crossed, no_data_bands = [], 0
    for c in charts:
        assert c["xtitle"] == "time (UTC, 24-hour)", c
        assert c["xlabels"] and all(LABEL_24H.fullmatch(x) for x in c["xlabels"]), (c["title"], c["xlabels"])
        for label, d in c["gaps"]:
            if "gap: no value" not in label:
                continue
            no_data_bands += 1
            x0, x1 = band(d)
            for line in c["lines"]:
                for xs in subpaths(line):
                    inside = [x for x in xs if x0 + 0.5 < x < x1 - 0.5]
                    across = xs and min(xs) < x0 - 0.5 and max(xs) > x1 + 0.5
                    if inside or across:
                        crossed.append((c["title"], label.split("; gap: ")[1][:40], (x0, x1), xs))
    assert not crossed, crossed[:3]
    # the demo's idle phases leave buckets without hit-rate or latency values: shaded, not bridged
    assert no_data_bands >= 1
    # the recorded restart of vllm-1 is a labelled band on the charts
    restart = [c for c in charts if any("vllm-1:" in label and "failed scrape" in label for label, _ in c["gaps"])]
    assert restart and all(any(t.startswith("vllm-1: ") for t in c["texts"]) for c in restart)
    shot(page, f"demo-gaps-{path or 'overview'}")


def _shift(label: str, hours: int) -> str:
    if not re.fullmatch(r"\d\d:\d\d", label):
        return label
    h, m = map(int, label.split(":"))
    return f"{(h + hours) % 24:02d}:{m:02d}"


def test_the_time_zone_picked_moves_the_axis_and_is_named_on_it(demo_server, page):
    url, db, dep = demo_server
    open_page(page, url, "", wait_for="h1")
    utc = time_charts(page)[0]["xlabels"]
    page.get_by_role("combobox", name="Time zone").click()
    page.keyboard.type("Asia/Tokyo")
    page.get_by_role("option", name="Asia/Tokyo", exact=True).click()
    settle(page)
    deadline = time.monotonic() + 90
    while True:  # the charts are drawn again in the new zone, one after the other
        tokyo = time_charts(page)
        if {c["xtitle"] for c in tokyo} == {"time (Asia/Tokyo, 24-hour)"} or time.monotonic() > deadline:
            break
    assert {c["xtitle"] for c in tokyo} == {"time (Asia/Tokyo, 24-hour)"}
    labels = tokyo[0]["xlabels"]
    assert all(LABEL_24H.fullmatch(x) for x in labels), labels
    # UTC+9, no daylight saving: the same ticks 9 hours later; 15:00 UTC is midnight in Tokyo, where
    # the axis writes the date ("02 Dec") instead of a time
    date = re.compile(r"\d\d [A-Z][a-z]{2}")
    assert [_shift(x, 9) for x in utc if x != "15:00"] == [x for x in labels if not date.fullmatch(x)]
    assert ("15:00" in utc) == any(date.fullmatch(x) for x in labels)
    assert "Asia/Tokyo" in page.locator("[data-testid='stMain'] [data-testid='stCaptionContainer']").first.inner_text()
    shot(page, "demo-overview-asia-tokyo")


def test_no_deploy_button(demo_server, page):
    url, db, dep = demo_server
    open_page(page, url, "", wait_for="h1")
    page.wait_for_selector("[data-testid='stHeader']", state="attached")
    page.wait_for_timeout(1000)  # the toolbar's buttons come with the header
    assert page.locator("[data-testid='stAppDeployButton']").count() == 0
    assert page.get_by_role("button", name="Deploy").count() == 0


MACHINE_PATH = re.compile(r"/root/|/home/|\.cache/|/models/")


def test_no_machine_path_in_the_topology_or_the_model_selector(demo_server, page):
    url, db, dep = demo_server
    open_page(page, url, "report", wait_for="h1")
    frame = page.frame_locator("iframe")
    topo = frame.locator("h2", has_text="3. Topology")
    topo.wait_for()
    report = frame.locator("body").inner_text()
    section = report[report.index("3. Topology"):report.index("4. Pilot")]
    assert "tiny-llama" in section and not MACHINE_PATH.search(section), section
    assert not MACHINE_PATH.search(report)
    page.get_by_role("combobox", name="Model").click()
    options = [o.inner_text() for o in page.get_by_role("option").all()]
    assert "tiny-llama" in options and not any(MACHINE_PATH.search(o) for o in options), options


def test_report_page_time_in_the_browser(demo_server, page):
    """The Report page on the demo, from clicking it in the navigation to the preview shown:
    the first visit of this test (report built and its charts rendered by vl-convert, unless
    an earlier test on the same server built it already) and a later one (served from the
    cache until the data changes; target 2 s). Printed for the record; the dashboard builds the
    newest month's report in the background from the first page view (state.prewarm_reports)."""
    url, db, dep = demo_server
    open_page(page, url, "", wait_for="h1")
    took, shown = [], []
    for _ in range(2):
        t = time.monotonic()
        page.locator("[data-testid='stSidebarNav'] a", has_text="Report").click()
        frame = page.frame_locator("iframe")
        frame.locator("h1").wait_for()
        page.wait_for_selector(IDLE)
        took.append(time.monotonic() - t)
        shown.append((frame.locator("h1").inner_text(), frame.locator("body").inner_text()))
        page.locator("[data-testid='stSidebarNav'] a", has_text="Overview").click()
        page.wait_for_selector("[data-testid='stMetric']")
        settle(page)
    # the times are a measurement, not a pass/fail line (speed goals live in the benchmarks):
    # printed for the README's record; the assertions are that both visits show the report
    print(f"\nReport page on the demo: first visit {took[0]:.2f} s, later visit {took[1]:.2f} s")
    for title, body in shown:
        assert title.startswith(f"Capacity report: {dep}, "), title
        assert "1. Measured reuse" in body and "Monthly benefit" in body
    assert shown[0] == shown[1], "the later visit (from the cache) shows the same report"


def test_the_prompts_page_checks_a_recorded_log_and_shows_what_vllm_measured(demo_server, page):
    """The Prompts page in a browser: pick the demo's timestamp-at-the-end log, press Check, read the
    predicted hit rate. Expected: the hit rate vLLM itself reported for those requests when they were
    recorded (usage.prompt_tokens_details.cached_tokens summed over prompt tokens), not the predictor's."""
    import json

    url, _db, _dep = demo_server
    rec = json.loads((Path(__file__).parents[1] / "deploy/demo/prompts/recording.json").read_text())
    run = next(r for r in rec["runs"] if r["name"] == "ts-end")
    open_page(page, url, "prompts", wait_for="h1")
    page.locator("[data-testid='stSidebarNav'] a", has_text="What-if").first.wait_for()  # inside the navigation
    select(page, "A recorded demo log (its tokenizer, template and engine settings come with it)", "ts-end")
    page.get_by_role("button", name="Check").click()
    page.locator("[data-testid='stMetricLabel']", has_text="Predicted hit rate").first.wait_for(timeout=120_000)
    settle(page)
    assert page.locator("[data-testid='stException']").count() == 0
    assert metrics(page)["Predicted hit rate"] == fmt.pct(run["cached_tokens"] / run["prompt_tokens"])
    shot(page, "9-prompts")
