"""``python -m kvplan.app.cli``: the kvplan command line."""

from kvplan.app.cli import main

main()
