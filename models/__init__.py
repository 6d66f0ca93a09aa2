"""kvplan's models: pure functions and dataclasses, no I/O. Grouped by idea on floors, from the
ground up: ``core``, ``inputs``, ``metrics``, ``prefill``, ``cache``, ``capacity``, ``decision`` (a
group imports only from the floors below it; tests/test_layers.py checks it)."""
