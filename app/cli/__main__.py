"""``python -m app.cli``: the kvplan command line."""

from app.cli import main

main()
