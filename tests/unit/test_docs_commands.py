"""Every `gputrain ...` command the README and docs/ show exists with the options it is shown with, and the
cheap ones (plan, validate, recipes, schema, clusters, docker, submit --dry-run, the catalog) run and exit 0
from the clone (#31 point 13: a newcomer copies them verbatim). The rest (run, jobs, logs, runpod ...) need a
job, a cluster or a key: their command and every option are checked against the CLI itself."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gputrain.cli.app import app
from gputrain.cli.main import main
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "first-hour.md")]
#: Commands run for real: cheap, no job, no cluster, no network.
CHEAP = {"plan", "validate", "recipes", "schema", "clusters", "docker", "submit"}
#: Names in the docs that stand for the reader's own (a recipe, a cluster profile they would write).
PLACEHOLDERS = ("my_recipe.yaml", "mylab")


def _commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
            for line in block.splitlines():
                code = re.split(r"\s+#", line)[0]
                for segment in re.split(r"\s*(?:;|&&)\s*", code):
                    segment = segment.split(" > ")[0].strip()
                    if segment.startswith("gputrain "):
                        found.append((f"{path.name}: {segment}", shlex.split(segment)[1:]))
    return found


COMMANDS = _commands()


def _resolve(args: list[str]) -> tuple[Any, list[str]]:
    """The click command ``args`` name (typer vendors click: groups are found by their ``get_command``)."""
    command: Any = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        sub = command.get_command(command.context_class(command), rest[0])
        assert sub is not None, f"no command {rest[0]!r}"
        command, rest = sub, rest[1:]
    return command, rest


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) > 40 and any("run selftest --gpu cpu --gpus 2" in c for c, _ in COMMANDS)


@pytest.mark.parametrize(("where", "args"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_a_documented_command_exists_with_its_options(where: str, args: list[str]) -> None:
    command, rest = _resolve(args)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for token in rest:
        if token == "--":
            break
        if token.startswith("-") and token != "-":
            assert token.split("=")[0] in known, f"{where}: {command.name} has no option {token}"


def _same_run(args: list[str]) -> tuple[str, ...]:
    """A recipe named by path or by name is the same run (run once)."""
    return tuple(re.sub(r"^recipes/(\w+)\.yaml$", r"\1", a) for a in args)


_RUNS = list({_same_run(a): (w, a) for w, a in reversed(COMMANDS) if a[0] in CHEAP and "--probe" not in a
              and (a[0] != "submit" or "--dry-run" in a) and not any(p in a for p in PLACEHOLDERS)}.values())


@pytest.mark.parametrize(("where", "args"), _RUNS, ids=[w for w, _ in _RUNS])
def test_a_cheap_documented_command_runs(where: str, args: list[str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("recipes", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "clusters.yaml"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
        main(args)
    assert ended.value.code in (0, None), f"{where}: exit {ended.value.code}: {err.getvalue()[-1500:]}"
    assert out.getvalue().strip(), f"{where}: printed nothing"


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    broken = [f"{path.name}: {target}" for path in [*DOCS, ROOT / "docs" / "first-hour.md"]
              for target in re.findall(r"\]\(([^)#\s]+)\)", path.read_text())
              if "://" not in target and not (path.parent / target).exists()]
    assert not broken, broken
