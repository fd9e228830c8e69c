"""The ``gputrain`` command: a thin Typer app; each command group lives in its own module.

Start-up matters (``gputrain --help`` is typed often, and ``plan`` is benchmarked), so modules imported
here import nothing heavy at module level; command bodies import what they need. Errors that carry a
user-facing message (:class:`GputrainError`) are printed on one line with no traceback.
"""

from __future__ import annotations

import sys

import typer

from gputrain.cli import core as core_commands
from gputrain.cli import logs as logs_commands
from gputrain.cli import run as run_commands
from gputrain.cli import runpod as runpod_commands
from gputrain.cli import slurm as slurm_commands
from gputrain.errors import GputrainError

app = typer.Typer(
    name="gputrain",
    help="Train on GPUs you do not own: recipes → scripts → Slurm, this machine, or RunPod.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

core_commands.register(app)
run_commands.register(app)
slurm_commands.register(app)
logs_commands.register(app)
runpod_commands.register(app)
app.add_typer(runpod_commands.app, name="runpod")


def main() -> None:
    try:
        app()
    except GputrainError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
