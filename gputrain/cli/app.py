"""The Typer app behind ``gputrain``: each command group lives in its own module.

Start-up matters (``gputrain --help`` is typed often, and ``plan`` is benchmarked), so modules imported
here import nothing heavy at module level; command bodies import what they need. The process entry point,
with its one-line error handling, is :mod:`gputrain.cli.main`.
"""

from __future__ import annotations

import typer

from gputrain.cli import core as core_commands
from gputrain.cli import logs as logs_commands
from gputrain.cli import run as run_commands
from gputrain.cli import runpod as runpod_commands
from gputrain.cli import slurm as slurm_commands

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

