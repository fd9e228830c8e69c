"""The tests' forked ``gputrain`` processes (tests/support/cli.py) behave as fresh ones: same exit codes, same
bytes on stdout and stderr, the caller's cwd and environment, limits, time-outs, and no heavy import warmed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gputrain

RECIPES = ROOT / "recipes"


def fresh(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputrain", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ["--version"],
    ["plan", str(RECIPES / "selftest.yaml"), "--gpu", "H100", "--json"],
    ["plan", str(RECIPES / "grpo_math_fsdp.yaml"), "--gpu", "H100", "--gpus", "2"],
    ["plan", "nope-recipe", "--gpu", "H100"],               # exit 2, one line on stderr
    ["plan", str(RECIPES / "selftest.yaml"), "--gpu", "H100", "--bogus"],  # a usage error
    ["jobs", "--json"],
    ["validate", "local.yaml"],                             # a file in the caller's cwd
])
def test_a_forked_call_prints_and_exits_as_a_fresh_process(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "local.yaml").write_text("name: x\nentrypoint: selftest\ntrain: {batch_size: -1}\n")
    env = {**os.environ, "GPUTRAIN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    want = fresh(*args, cwd=tmp_path, env=env)
    got = gputrain(*args, cwd=tmp_path, env=env)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_the_child_gets_exactly_the_callers_environment(tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    env = {**os.environ, "GPUTRAIN_HOME": str(home)}
    assert gputrain("jobs", cwd=tmp_path, env=env).returncode == 0
    first = sorted(home.rglob("*"))
    assert first  # the registry went where the caller said
    env.pop("GPUTRAIN_HOME")
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env["HOME"] = str(tmp_path / "h")
    assert gputrain("jobs", cwd=tmp_path, env=env).returncode == 0
    assert sorted(home.rglob("*")) == first  # the last call's GPUTRAIN_HOME did not stay behind
    assert any((tmp_path / "xdg").rglob("*"))  # this call's registry went under its XDG_DATA_HOME


def test_limits_and_time_outs_reach_the_child(tmp_path: Path) -> None:
    recipe = str(RECIPES / "selftest.yaml")
    assert gputrain("plan", recipe, "--gpu", "H100", cwd=tmp_path).returncode == 0
    starved = gputrain("plan", recipe, "--gpu", "H100", cwd=tmp_path, rlimits={"RLIMIT_NOFILE": 3})
    assert starved.returncode != 0  # no descriptor left to open the recipe with
    log = tmp_path / "training_output.log"
    log.write_text("step 1 loss 2.0\n")
    with pytest.raises(subprocess.TimeoutExpired):  # following a log that never ends
        gputrain("logs", str(log), "--follow", cwd=tmp_path, timeout=3)
    assert gputrain("--version", cwd=tmp_path).returncode == 0  # the warm parent survived the kill


def test_the_warm_parent_imports_nothing_heavy() -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.support import cli_zygote; cli_zygote.warm();"
            "print(','.join(m for m in ('torch', 'transformers', 'httpx', 'matplotlib', 'trl') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr
