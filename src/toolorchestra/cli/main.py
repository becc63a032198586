"""Entry point of the `toolorchestra` console script."""

from __future__ import annotations

import importlib
import os
import sys

import typer

app = typer.Typer(
    name="toolorchestra",
    help="Run, evaluate and train small orchestrator models that coordinate tools and other models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "run_cmd",
    "eval_cmd",
    "report_cmd",
    "export_cmd",
    "train_cmd",
    "serve_cmd",
    "tau2_cmd",
    "envs_cmd",
    "verl_cmd",
    "replay_cmd",
    "profile_cmd",
)


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors.")) -> None:
    if debug:
        os.environ["TOOLORCHESTRA_DEBUG"] = "1"


for _module in COMMAND_MODULES:
    importlib.import_module(f"toolorchestra.cli.{_module}").register(app)


def main() -> None:
    """Run the CLI, printing user errors as one clear message (a traceback only with --debug)."""
    from toolorchestra.errors import UserError

    try:
        app()  # standalone mode: click prints usage errors itself and exits 2
    except UserError as exc:
        if os.environ.get("TOOLORCHESTRA_DEBUG") or "--debug" in sys.argv:
            raise
        typer.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    except OSError as exc:
        # A path the user named that cannot be read or written (a missing folder, no permission, a read-only
        # disk) is their mistake to fix, not a bug: one line naming it. Other OS errors keep their traceback.
        if exc.filename is None or os.environ.get("TOOLORCHESTRA_DEBUG") or "--debug" in sys.argv:
            raise
        typer.secho(f"error: {os_error_message(exc)}", fg="red", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.secho("interrupted", fg="yellow", err=True)
        sys.exit(130)


def os_error_message(exc: OSError) -> str:
    """One line naming the path and, for the errors a path given in the wrong place causes (a file where a
    folder goes or the reverse), what was expected there: the OS's own words ("File exists") do not say it."""
    import errno
    from pathlib import Path

    path, reason = exc.filename, exc.strerror or str(exc)
    if exc.errno == errno.ENOTDIR:
        reason += " (a part of this path is a file; expected a folder there)"
    elif exc.errno == errno.EISDIR:
        reason += " (expected a file, not a folder)"
    elif exc.errno == errno.EEXIST and not Path(path).is_dir():
        reason = "is a file; expected a folder there (or a path that does not exist yet)"
    return f"{path}: {reason}"


if __name__ == "__main__":  # python -m toolorchestra.cli.main
    main()
