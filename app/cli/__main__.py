"""``python -m kvplan.app.cli``: the kvplan command line."""

from . import main

main()
