"""The collector daemon: direct scrapes every interval and the nightly jobs (ingestion,
rollups, reports) on APScheduler (``scheduler``).

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .scheduler import Nightly, NightlyJobs, Scraper, build_scheduler, days_to_run, run_daemon

__all__ = ["Nightly", "NightlyJobs", "Scraper", "build_scheduler", "days_to_run", "run_daemon"]
