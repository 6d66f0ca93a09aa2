"""Label values kvplan rewrites on the way in, before anything is stored.

LMCache labels its metrics with ``model_name`` = the ``--model`` argument vLLM was started
with, which is often a local path (``/root/.cache/.../models/tiny-llama``): it shows the
machine's directories in every table and report, and it never matches vLLM's own
``model_name`` (the served model name). A ``model_name`` that is a filesystem path is
therefore stored as its last component (``tiny-llama``). Hugging Face ids
(``meta-llama/Llama-3.1-8B``) are not paths and are kept as they are.

Applied by every ingestion path: direct scrapes and ``import-metrics`` (``kvplan.collectors.scrape.parse``),
Prometheus ingestion (``kvplan.collectors.prometheus.ingest``), the recorded demo (its payloads go through
``kvplan.collectors.scrape.parse``), and by the recorders (``deploy/local/recorders/record_demo.py``,
``record_fixtures.py``), which write the relabelled exposition text (``relabel_exposition``).
"""

from __future__ import annotations

import re
from typing import overload

PATH_PREFIXES = ("/", "~", "./", "../", ".\\", "..\\")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_MODEL_LABEL = re.compile(r'(model_name=")((?:[^"\\]|\\.)*)(")')


def is_path(value: str) -> bool:
    """Whether a label value is a filesystem path (absolute, home- or dot-relative)."""
    return value.startswith(PATH_PREFIXES) or bool(_WINDOWS_DRIVE.match(value))


@overload
def model_label(value: str) -> str: ...
@overload
def model_label(value: None) -> None: ...
@overload
def model_label(value: str | None) -> str | None: ...


def model_label(value: str | None) -> str | None:
    """A ``model_name`` label value as kvplan stores it: a path becomes its last component
    (trailing separators ignored); anything else is kept."""
    if value is None or not is_path(value):
        return value
    last = re.split(r"[\\/]+", value.rstrip("/\\"))[-1]
    return last or value


def relabel_exposition(text: str) -> str:
    """Exposition text (Prometheus / OpenMetrics) with every ``model_name="<path>"`` label
    replaced by its last component; the rest of the text is unchanged, byte for byte."""
    return _MODEL_LABEL.sub(lambda m: m.group(1) + model_label(m.group(2)) + m.group(3), text)
