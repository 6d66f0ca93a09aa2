"""The recorded demo dataset loads as what it is: real scrapes on a stretched time axis."""

from __future__ import annotations

from kvplan.app.data.store import deployments_with_data
from kvplan.app.data.window import load_window
from kvplan.collectors.demo import DEMO_FILE, load_demo, records
from kvplan.sql.db import Database


def test_the_demos_restart_is_a_restart_not_a_broken_target(tmp_path):
    """vllm-1 was restarted while recording. Its new ``_created`` must land between the scrapes
    around the restart on the stretched axis (the loader stretches ``_created`` with the scrape
    times), so the window counts one reset and no 'decrease with an unchanged _created'."""
    db = Database(tmp_path / "demo.duckdb")
    db.migrate()
    res = load_demo(db)
    assert res["scrapes"] > 0 and res["failures"] > 0
    d = next(x for x in deployments_with_data(db) if x["deployment"] == res["deployment"])
    st = load_window(db, d["deployment"], d["first_ts"], d["last_ts"]).stats
    assert st.counter_resets > 0
    assert not [n for n in st.notes if "unchanged _created" in n], st.notes
    assert load_demo(db)["scrapes"] == 0  # loading twice changes nothing


def test_the_demo_header_says_what_the_data_is():
    head = next(records(DEMO_FILE))
    assert head["type"] == "header" and head["stretch"] > 1
    assert "CPU" in head["measured_on"] and "not GPU results" in head["note"]
