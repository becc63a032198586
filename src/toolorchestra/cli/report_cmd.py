"""The `report` command (being written)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this command to the app."""
