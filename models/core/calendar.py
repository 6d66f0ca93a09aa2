"""The month every monthly figure uses: a clock, not a price.

kvplan prices a window as a month by scaling it by ``SECONDS_PER_MONTH / window seconds``;
the same constants turn GPU-seconds into GPU-hours a month everywhere (saved prefill, the
benefit's terms, the what-if's dollars, the growth fit's monthly rate).
"""

from __future__ import annotations

DAYS_PER_MONTH = 30.44
"""Length of the month every monthly figure uses (365.25 / 12 = 30.4375, rounded)."""
HOURS_PER_MONTH = DAYS_PER_MONTH * 24.0
"""730.56 hours: one GPU running for a whole month."""
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600.0
"""2,630,016 seconds."""
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
