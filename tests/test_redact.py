"""Secrets never reach the database, the output, the logs or the report: one redaction function."""

from __future__ import annotations

from kvplan.app.cli import app
from kvplan.collectors.scrape.scrape import import_file
from kvplan.models.inputs.settings import DeploymentConfig
from tests.hostile import AT, PASSWORD, TOKEN, Echo, payload, runner, secret_free


# -- hostile or careless inputs --------------------------------------------------------------
def test_echoed_authorization_never_reaches_db_or_report(db, tmp_path, monkeypatch, caplog):
    from datetime import timedelta

    from kvplan.collectors.prometheus.ingest import ingest_range
    from kvplan.collectors.schedule.scheduler import logged_run
    from kvplan.models.core.redact import register_secret
    from kvplan.models.inputs.settings import PrometheusConfig

    import_file(db, "d", payload(tmp_path, "a.prom", hits=0, queries=0, ttft=[0, 0, 0]), AT, target="v")
    import_file(db, "d", payload(tmp_path, "b.prom"), AT + timedelta(minutes=5), target="v")
    echo = Echo(400, "application/json")
    try:
        cfg = PrometheusConfig(url=echo.url, step="1m", chunk="10m", retries=0, timeout_s=5, bearer_token=TOKEN)
        register_secret(TOKEN)                       # what load_settings does for configured secrets
        with logged_run(db, "ingest", deployment="d") as run:
            res = ingest_range(db, cfg, DeploymentConfig(name="d", prometheus_selector='job="v"'),
                               AT, AT + timedelta(minutes=10))
            run.errors, run.notes = res.failed, res.errors[:3]
        assert res.failed == 1 and "denied" in res.errors[0]
    finally:
        echo.close()
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", "--deployment", "d", "--month", "2026-01", "-o", str(out), "--db", str(db.path)])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert "denied" in html or "denied" in db.fetch("collector_runs", limit=5)[0]["message"]
    secret_free(db, html, r.output, caplog.text, "\n".join(res.errors))


def test_scrape_never_prints_or_stores_user_password(db):
    echo = Echo(500)
    try:
        url = echo.url.replace("http://", f"http://bob:{PASSWORD}@") + "/metrics"
        r = runner.invoke(app, ["scrape", url, "--deployment", "d", "--db", str(db.path)])
    finally:
        echo.close()
    assert r.exit_code == 2 and "HTTP 500" in r.output, r.output
    secret_free(db, r.output)


def test_one_redaction_function():
    from kvplan.models.core.redact import redact

    assert redact(f"GET http://bob:{PASSWORD}@h/x?access_token={TOKEN} Authorization: Bearer {TOKEN}") == \
        "GET http://<redacted>@h/x?access_token=<redacted> Authorization: <redacted>"


# -- URL-encoded credentials ---------------------------------------------------------------------
CRED = "dXNlcjpzM2NyZXQ"  # base64 of user:s3cret, without the padding


def test_url_encoded_basic_credentials_are_redacted():
    from kvplan.models.core.redact import redact

    for text in (f"400 bad request: /metrics?auth=Basic%20{CRED}%3D", f"Authorization%3A%20Basic%20{CRED}%3D&x=1",
                 f"echo: Basic%2520{CRED}%253D", f"auth=basic+{CRED}=", f"Bearer%20{CRED}.sig"):
        out = redact(text)
        assert CRED not in out and "<redacted>" in out, (text, out)


def test_an_echoed_url_encoded_credential_never_reaches_the_gaps(db):
    # a server echoing the request line into its error: the gap stored it verbatim
    from kvplan.collectors.scrape.store import store_failure

    store_failure(db, deployment="d", target="t", kind="vllm", ts=AT, source="scrape",
                  error=f"HTTP 401 for GET /metrics?h=Authorization%3A%20Basic%20{CRED}%3D")
    with db.read() as con:
        [(error,)] = con.execute("SELECT error FROM scrapes").fetchall()
    assert CRED not in error and "<redacted>" in error
