"""The CLI conventions, through the installed ``gputrain`` as a user runs it (a subprocess each).

Exit codes (2: the user's input is wrong, 1: the world failed), "did you mean", results on stdout and
warnings on stderr, JSON that stays JSON on errors, -h/--version/completion, rich tables only on a
terminal (a real pty), an example in every command's help, and a ``--help`` that imports no command.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, RECIPES, ROOT, gputrain_command
from tests.support.cli import gputrain as run_gputrain

SELFTEST = str(RECIPES / "selftest.yaml")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A private home, registry and cluster-profile file; no RunPod key, no default cluster."""
    home = tmp_path / "home"
    home.mkdir()
    values = {**os.environ, "HOME": str(home), "GPUTRAIN_HOME": str(tmp_path / "gputrain"),
              "GPUTRAIN_CONFIG": str(tmp_path / "clusters.yaml"), "COLUMNS": "200"}
    for name in ("RUNPOD_API_KEY", "GPUTRAIN_CLUSTER", "NO_COLOR"):
        values.pop(name, None)
    return values


def cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_gputrain(*args, env=env, cwd=cwd)


# (id, arguments, extra environment, exit code, fragment of the message); "{tmp}" is the test's tmp_path.
USER_ERRORS = [
    ("malformed recipe", ["plan", str(DATA / "recipes" / "bad_type.yaml"), "--gpu", "cpu"], {}, "train.batch_size"),
    ("metric without a sweep", ["jobs", "--metric", "loss"], {}, "--metric needs --sweep"),
    ("unknown recipe name", ["plan", "gnn_colouring", "--gpu", "cpu"], {}, "did you mean gnn_coloring?"),
    ("unknown recipe file", ["plan", str(RECIPES / "gnn_colorng.yaml"), "--gpu", "cpu"], {},
     f"did you mean {RECIPES / 'gnn_coloring.yaml'}?"),
    ("unknown GPU", ["plan", SELFTEST, "--gpu", "A100-40"], {}, "did you mean A100-40GB"),
    ("unknown GPU, nothing near", ["plan", SELFTEST, "--gpu", "Z9999"], {}, "known: cpu, V100-16GB"),
    ("unknown cluster", ["plan", SELFTEST, "--cluster", "supercloudd"], {}, "did you mean supercloud?"),
    ("unknown cluster, nothing near", ["submit", SELFTEST, "--cluster", "nope", "--dry-run"], {},
     "known: supercloud, testbed"),
    ("no cluster", ["submit", SELFTEST, "--dry-run"], {}, "--cluster is required"),
    ("unknown preset", ["plan", "bd3lm_gsm8k", "--gpu", "H200", "--preset", "agressive"], {},
     "did you mean aggressive?"),
    ("unknown target", ["plan", SELFTEST, "--gpu", "cpu", "--target", "dokcer"], {}, "did you mean docker?"),
    ("plan does not fit", ["plan", "bd3lm_gsm8k", "--gpu", "RTX-4090", "--gpus", "1",
                           "--set", "train.batch_size=4096"], {}, "GiB per GPU on RTX-4090"),
    ("bad --set", ["plan", SELFTEST, "--gpu", "cpu", "--set", "train.batch_size"], {}, "expected a.b.c=value"),
    ("bad flag", ["plan", SELFTEST, "--gpux", "3"], {}, "No such option: --gpux"),
    ("bad flag value", ["plan", SELFTEST, "--gpu", "cpu", "--gpus", "-2"], {}, "--gpus"),
    ("unknown command", ["plann"], {}, "Did you mean 'plan'?"),
    ("unknown job", ["logs", "local-99"], {}, "local-99"),
    ("malformed cluster profiles", ["clusters"], {"clusters.yaml": "[not, a, mapping]"}, "expected a mapping"),
    ("RunPod key missing", ["runpod", "status", "gputrain-x"], {}, "RUNPOD_API_KEY is not set"),
    ("RunPod NAME and --all", ["runpod", "down", "gputrain-x", "--all"], {}, "give a pod NAME or --all"),
]

WORLD_ERRORS = [
    ("Slurm client missing", ["submit", SELFTEST, "--cluster", "testbed"], {"PATH": "/nonexistent"},
     "sbatch not found"),
    ("job registry unusable", ["jobs", "--no-refresh"], {"GPUTRAIN_HOME": "{tmp}/a-file/gputrain"},
     "cannot open the job registry"),
]

TABLE = [(*row[:3], 2, row[3]) for row in USER_ERRORS] + [(*row[:3], 1, row[3]) for row in WORLD_ERRORS]


def _apply(env: dict[str, str], extra: dict[str, str], tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a-file").write_text("a file where a folder should be\n")
    out = dict(env)
    for key, value in extra.items():
        if key == "clusters.yaml":
            Path(env["GPUTRAIN_CONFIG"]).write_text(value)
            continue
        out[key] = value.replace("{tmp}", str(tmp_path))
    return out


@pytest.mark.parametrize(("case", "args", "extra", "code", "fragment"), TABLE, ids=[row[0] for row in TABLE])
def test_exit_code_table(env: dict[str, str], tmp_path: Path, case: str, args: list[str], extra: dict[str, str],
                         code: int, fragment: str) -> None:
    proc = cli(_apply(env, extra, tmp_path), *args, cwd=tmp_path)
    assert proc.returncode == code, (case, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert fragment in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, proc.stderr  # one line says what went wrong


JSON_CASES = [row for row in TABLE if row[0] not in ("unknown command", "RunPod key missing", "RunPod NAME and --all")]


@pytest.mark.parametrize(("case", "args", "extra", "code", "fragment"), JSON_CASES, ids=[r[0] for r in JSON_CASES])
def test_json_stays_json_on_errors(env: dict[str, str], tmp_path: Path, case: str, args: list[str],
                                   extra: dict[str, str], code: int, fragment: str) -> None:
    proc = cli(_apply(env, extra, tmp_path), *args, "--json", cwd=tmp_path)
    assert proc.returncode == code, (case, proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]
    assert set(error) == {"message", "kind", "exit_code"} and error["exit_code"] == code
    assert fragment in error["message"] and error["kind"]
    assert "Traceback" not in proc.stderr


def test_plan_json_of_a_config_that_does_not_fit_is_json(env: dict[str, str]) -> None:
    proc = cli(env, "plan", "bd3lm_gsm8k", "--gpu", "RTX-4090", "--gpus", "1", "--set", "train.batch_size=4096",
               "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {"error": {"message": json.loads(proc.stdout)["error"]["message"],
                                                 "kind": "plan", "exit_code": 2}}


def test_plan_text_keeps_warnings_off_stdout(env: dict[str, str]) -> None:
    proc = cli(env, "plan", SELFTEST, "--gpu", "V100-32GB", "--gpus", "2")
    assert proc.returncode == 0, proc.stderr
    assert "warning: recipe 'selftest' has no profile for V100-32GB" in proc.stderr
    assert not [line for line in proc.stdout.splitlines() if "warning" in line.lower()]
    assert "settings" in proc.stdout and "#!/usr/bin/env bash" in proc.stdout


def test_version_matches_the_project(env: dict[str, str]) -> None:
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    proc = cli(env, "--version")
    assert (proc.returncode, proc.stdout) == (0, f"gputrain {version.group(1)}\n")


def _command_paths() -> list[list[str]]:
    from gputrain.cli.app import COMMANDS
    from gputrain.cli.runpod import app as runpod_app

    paths = [[spec.name] for spec in COMMANDS]
    paths += [["runpod", info.name or (info.callback.__name__ if info.callback else "")]
              for info in runpod_app.registered_commands]
    return paths


#: every command's ``-h`` in one fresh process (one process per command cost ~1 s each): exit code and stdout
_ALL_HELP = """
import contextlib, io, json, sys
from gputrain.cli.main import main
out = []
for path in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main([*path, "-h"])
        except SystemExit as exc:
            code = exc.code or 0
    out.append([code, buf.getvalue()])
sys.stdout.write(json.dumps(out))
"""


def test_every_command_has_h_an_example_and_no_module_paths(env: dict[str, str]) -> None:
    top = cli(env, "-h")
    assert top.returncode == 0 and "Usage: gputrain" in top.stdout
    assert "Exit codes: 0 success; 2 a user error" in top.stdout
    paths = _command_paths()
    proc = subprocess.run([sys.executable, "-c", _ALL_HELP, json.dumps(paths)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for path, (code, text) in zip(paths, json.loads(proc.stdout), strict=True):
        assert code == 0, (path, text)
        assert text.startswith(f"Usage: gputrain {' '.join(path)}"), text[:200]
        assert re.search(r"^  Examples?:\n    gputrain ", text, re.M), (path, text)
        assert not re.search(r"\bgputrain\.[a-z_]+", text), (path, text)


def test_table_summaries_are_the_command_docstrings() -> None:
    import importlib
    import inspect

    import typer

    from gputrain.cli.app import COMMANDS

    for spec in COMMANDS:
        target = getattr(importlib.import_module(spec.module), spec.attr)
        doc = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
        assert spec.summary == " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()), spec.name


def test_help_imports_no_command_and_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from gputrain.cli.main import main\n"
        "try:\n    main(['--help'])\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write('MODULES=' + ' '.join(sorted(m for m in sys.modules if not m.startswith('_'))) + '\\n')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    modules = set(re.search(r"MODULES=(.*)", proc.stderr).group(1).split())  # type: ignore[union-attr]
    heavy = {"torch", "transformers", "trl", "httpx", "matplotlib", "pydantic", "pydantic_core", "jinja2", "rich",
             "yaml", "sqlite3"}
    assert not heavy & modules, heavy & modules
    ours = {m for m in modules if m.startswith("gputrain")}
    assert ours == {"gputrain", "gputrain.cli", "gputrain.cli.app", "gputrain.cli.main", "gputrain.errors"}, ours


def test_shell_completion_completes_lazy_commands_and_their_options(env: dict[str, str], tmp_path: Path) -> None:
    # The shell named, not detected from the parent processes (shellingham finds none under some runners).
    script = cli({**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}, "--show-completion", "bash")
    assert script.returncode == 0 and "_GPUTRAIN_COMPLETE" in script.stdout and "complete " in script.stdout
    words = {**env, "_GPUTRAIN_COMPLETE": "complete_bash", "COMP_WORDS": "gputrain pl", "COMP_CWORD": "1"}
    assert cli(words).stdout.split() == ["plan"]
    words.update(COMP_WORDS="gputrain plan x --gp", COMP_CWORD="3")
    assert sorted(cli(words).stdout.split()) == ["--gpu", "--gpus"]
    installed = cli({**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}, "--install-completion", "bash")
    assert installed.returncode == 0, installed.stderr
    assert "gputrain" in (Path(env["HOME"]) / ".bashrc").read_text()


def test_python_dash_m_gputrain_is_the_cli(env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "gputrain", "--version"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("gputrain ")


# ---- tables and colour: a real pseudo-terminal for the terminal case ----------------------------------------
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _colour_codes(text: str) -> set[int]:
    codes = {int(p) for m in SGR.finditer(text) for p in m.group(1).split(";") if p}
    return {c for c in codes if 30 <= c <= 38 or 90 <= c <= 97}


def run_in_pty(args: list[str], env: dict[str, str]) -> str:
    """Run with stdout on a pty (stderr a pipe) and return what reached the terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the pty in 60 s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode()


@pytest.fixture
def registry_with_jobs(env: dict[str, str]) -> dict[str, str]:
    code = (
        "from gputrain.registry.store import JobRegistry, JobRecord\n"
        "r = JobRegistry()\n"
        "r.add(JobRecord(job_id='', backend='local', name='a', recipe='selftest', state='COMPLETED', exit_code=0))\n"
        "r.add(JobRecord(job_id='', backend='local', name='b', recipe='selftest', state='FAILED', exit_code=1))\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    return env


def test_tables_and_colour_on_a_terminal(registry_with_jobs: dict[str, str]) -> None:
    env = {**registry_with_jobs, "TERM": "xterm-256color"}
    shown = run_in_pty([*gputrain_command(), "jobs", "--no-refresh"], env)
    assert "━" in shown or "─" in shown, shown  # a rich table
    assert "COMPLETED" in shown and "FAILED" in shown
    assert _colour_codes(shown), repr(shown)  # states in colour


def test_no_color_keeps_the_table_without_colour(registry_with_jobs: dict[str, str]) -> None:
    env = {**registry_with_jobs, "TERM": "xterm-256color", "NO_COLOR": "1"}
    shown = run_in_pty([*gputrain_command(), "jobs", "--no-refresh"], env)
    assert "━" in shown or "─" in shown
    assert "FAILED" in shown and not _colour_codes(shown), repr(shown)


def test_plain_text_in_a_pipe(registry_with_jobs: dict[str, str]) -> None:
    proc = cli({**registry_with_jobs, "TERM": "xterm-256color"}, "jobs", "--no-refresh")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "━" not in proc.stdout and "─" not in proc.stdout
    header, *rows = proc.stdout.splitlines()
    assert header.split()[:3] == ["JOB", "STATE", "EXIT"] and len(rows) == 2


def test_errors_are_red_only_on_a_colour_terminal(env: dict[str, str]) -> None:
    master, slave = pty.openpty()
    proc = subprocess.run([*gputrain_command(), "plan", "nope-recipe"], env={**env, "TERM": "xterm"},
                          stdout=subprocess.PIPE, stderr=slave, timeout=60)
    os.close(slave)
    shown = os.read(master, 65536).decode()
    os.close(master)
    assert proc.returncode == 2 and "\x1b[1;31merror:\x1b[0m unknown recipe 'nope-recipe'" in shown
    piped = cli(env, "plan", "nope-recipe")
    assert piped.stderr.startswith("error: unknown recipe 'nope-recipe'")
