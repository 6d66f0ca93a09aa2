"""kvplan CLI: demo commands (registered on app.cli.app)."""

from app.cli import app  # noqa: F401
