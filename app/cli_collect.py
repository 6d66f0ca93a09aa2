"""kvplan CLI: collect commands (registered on app.cli.app)."""

from app.cli import app  # noqa: F401
