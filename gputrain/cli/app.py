"""The Typer app behind ``gputrain``: the command table, and a group that imports a command only when used.

The commands are plain data (:data:`COMMANDS`: name, module, attribute, one-line summary), as torchtune's
recipe registry is: ``gputrain --help`` prints the summaries from the table and imports no command module,
and ``gputrain plan ...`` imports the plan command's module alone. Typer inspects a command's signature
only when the command is built, which is most of its start-up cost, so building one command instead of
nineteen keeps every invocation cheap. ``tests/unit/test_cli_conventions.py`` checks that each summary is
its command's docstring. The process entry point, with one-line errors, is :mod:`gputrain.cli.main`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

import typer
from typer.core import TyperGroup

from gputrain import __version__

Command = Any  # a click Command (typer vendors click from 0.26 on; its classes are not public API)


class CommandSpec(NamedTuple):
    """One ``gputrain`` command: where its function (or sub-app) lives, and its one-line summary."""

    name: str
    module: str
    attr: str
    summary: str


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("recipes", "gputrain.cli.core", "recipes", "List the bundled recipes (or copy one to edit)."),
    CommandSpec("gpus", "gputrain.cli.core", "gpus", "GPUs on this machine (or a cluster's, from sinfo), by "
                "canonical name."),
    CommandSpec("plan", "gputrain.cli.core", "plan", "Resolve a recipe for a GPU type and print settings, "
                "estimates and the rendered scripts."),
    CommandSpec("validate", "gputrain.cli.core", "validate", "Check recipes (schema, types, unknown keys, every "
                "GPU profile) without planning a run."),
    CommandSpec("schema", "gputrain.cli.core", "schema",
                "Print the recipe JSON Schema (for editors), or with --plan the schema of plan.json."),
    CommandSpec("run", "gputrain.cli.run", "run", "Run a recipe here with torchrun (one node): job folder, "
                "registry record, log, summary."),
    CommandSpec("submit", "gputrain.cli.slurm", "submit", "Plan a recipe for a Slurm cluster, write its job "
                "folder and sbatch it."),
    CommandSpec("prepare", "gputrain.cli.offline", "prepare", "Download what a job will load (model, "
                "datasets) into the cluster's cache, pinned and verified."),
    CommandSpec("sync", "gputrain.cli.offline", "sync", "Upload a finished job's offline W&B runs and list its "
                "TensorBoard files."),
    CommandSpec("jobs", "gputrain.cli.jobs", "jobs", "Known jobs (all backends), newest first."),
    CommandSpec("status", "gputrain.cli.jobs", "status", "State, reason, exit code, elapsed time and nodes of "
                "one job, asked of its backend."),
    CommandSpec("cancel", "gputrain.cli.jobs", "cancel", "Cancel a pending or running job, on whichever backend "
                "runs it."),
    CommandSpec("clusters", "gputrain.cli.slurm", "clusters", "Cluster profiles: built-ins and your own."),
    CommandSpec("logs", "gputrain.cli.logs", "logs_command", "Show, follow or summarize a job's logs."),
    CommandSpec("docker", "gputrain.cli.runpod", "docker", "Write a Docker build context and run scripts for a "
                "recipe."),
    CommandSpec("runpod", "gputrain.cli.runpod", "app", "Train on a RunPod pod: up (create, upload, train, "
                "download, terminate), attach, status, list, down, logs."),
)

EPILOG = """\b
Exit codes: 0 success; 2 a user error (bad recipe, flag or name, a plan that
does not fit: fix the command); 1 a failure of the world (cluster unreachable,
sbatch failing, network, a job that failed: may work later); 130 interrupted.
With --json, errors are printed as {"error": {"message", "kind", "exit_code"}}.
\b
Output: results on stdout, warnings and progress on stderr; tables and colour
only when stdout is a terminal (NO_COLOR turns colour off).
\b
Example:
  gputrain plan gnn_coloring --gpu H100 --gpus 2
  gputrain <command> -h
"""


def sub_app(**settings: Any) -> typer.Typer:
    """A Typer app with gputrain's settings: plain help (rich costs start-up), no pretty tracebacks."""
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None, **settings)


def build_command(spec: CommandSpec) -> Command:
    """Import the spec's module and turn its function (or Typer sub-app) into a click command."""
    target = getattr(importlib.import_module(spec.module), spec.attr)
    command: Command
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = sub_app()
        single.command(spec.name)(target)
        command = typer.main.get_command(single)
    command.name = spec.name
    return command


class _LazyCommands(MutableMapping[str, Command]):
    """The group's ``commands`` mapping: names known up front, each command built on first access."""

    def __init__(self, specs: tuple[CommandSpec, ...]) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            self._built[name] = build_command(self.specs[name])  # KeyError for an unknown name
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self.specs.pop(name, None)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.specs, *self._built]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self.specs, *self._built]))


class LazyGroup(TyperGroup):
    """A Typer group whose commands come from :data:`COMMANDS`, built only when invoked or completed."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(COMMANDS)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Command | None:
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list from the table's summaries: ``--help`` builds no command."""
        rows = [(spec.name, spec.summary) for spec in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(value: bool) -> None:
    if value:
        print(f"gputrain {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="gputrain",
    cls=LazyGroup,
    help="Train on GPUs you do not own: recipes → scripts → Slurm, this machine, or RunPod.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print gputrain's version and exit.",
                                 is_eager=True, callback=_print_version),
) -> None:
    """Train on GPUs you do not own: recipes → scripts → Slurm, this machine, or RunPod."""
