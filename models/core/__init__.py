"""The ground floor: the one user-facing error type, redaction of secrets, settings declared as
data (``fields``), aware-UTC time helpers and the calendar every monthly figure uses. Imports
nothing else from ``kvplan.models``.

The public names of the group, re-exported; each module says more."""

from __future__ import annotations

from .calendar import DAYS_PER_MONTH, HOURS_PER_MONTH, SECONDS_PER_MONTH
from .errors import KvplanError
from .fields import FieldSpec, spec, specs
from .redact import redact, register_secret
from .timeutil import aware_utc, from_epoch_s, naive_utc, parse_time, utcnow

__all__ = [
    "DAYS_PER_MONTH", "FieldSpec", "HOURS_PER_MONTH", "KvplanError", "SECONDS_PER_MONTH", "aware_utc",
    "from_epoch_s", "naive_utc", "parse_time", "redact", "register_secret", "spec", "specs", "utcnow"
]
