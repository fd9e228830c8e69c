"""Format drift: run each installed library again (tiny model, CPU) and summarize its fresh output.

The committed fixtures (tests/fixtures/logs/) were produced by tests/fixtures/logs/generate.py; a new
release of a library may print differently. Each test here regenerates one fixture into a temporary folder
and checks that the summary still finds the same metrics, steps and failure as the committed one.
Libraries of the extras CI installs (transformers, TRL, accelerate, torch, lightning) are required under
CI=true. DeepSpeed and verl (the ``logformats`` extra) and transformers 4 (its own venv, named by
GPUTRAIN_HF4_PYTHON) are outside what CI installs: their tests carry ``optional`` and are deselected,
with the reason in pytest's summary, where the library is absent (tests/conftest.py); their committed
fixtures are still read by tests/unit/test_logs_real_formats.py.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from gputrain.logs.summarize import summarize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LOGFORMATS = "pip install -e '.[logformats]'"


def need(module: str, in_ci_extras: bool) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if in_ci_extras and os.environ.get("CI") == "true":
        pytest.fail(f"{module} is in the extras CI installs but is not importable")
    pytest.skip(f"{module} not installed")


def same_shape(name: str, tmp_path: Path, exit_code: int = 0, python: str = sys.executable) -> dict:
    fresh = generate.run_scenario(name, tmp_path, python=python, timeout_s=900)
    committed = summarize(FIXTURES / fresh.name, write=False, final=True, exit_code=exit_code)
    now = summarize(fresh, write=False, final=True, exit_code=exit_code)
    assert fresh.read_bytes().splitlines()[0].startswith(b"# fixture: ")
    assert set(committed["metrics"]) <= set(now["metrics"]), set(committed["metrics"]) - set(now["metrics"])
    assert now["steps"] == committed["steps"]
    assert set(now["sources"]["formats"]) == set(committed["sources"]["formats"])
    assert now["cause"] == committed["cause"]
    return now


def test_transformers_trainer_live(tmp_path: Path) -> None:
    need("transformers", True)
    same_shape("hf5", tmp_path)


def test_trl_grpo_live(tmp_path: Path) -> None:
    need("trl", True)
    now = same_shape("trl_grpo", tmp_path)
    assert set(now["rl"]["components"]) == {"reward_length", "reward_has_cat"}


def test_accelerate_launch_tee_live(tmp_path: Path) -> None:
    need("accelerate", True)
    now = same_shape("hf5_accelerate", tmp_path)
    assert now["ranks"] == [0, 1]


def test_torchrun_crash_live(tmp_path: Path) -> None:
    need("torch", True)
    now = same_shape("torchrun_crash", tmp_path, exit_code=1)
    assert now["root_cause"]["rank"] == 1
    assert now["failure"].startswith("RuntimeError: simulated failure: loss became NaN at step 25 (rank 1")


def test_lightning_live(tmp_path: Path) -> None:
    need("lightning", True)
    same_shape("lightning_tqdm", tmp_path)


@pytest.mark.optional(module="deepspeed", hint=LOGFORMATS)
def test_deepspeed_live(tmp_path: Path) -> None:
    same_shape("deepspeed", tmp_path)


@pytest.mark.optional(module="verl", hint=LOGFORMATS)
def test_verl_console_logger_live(tmp_path: Path) -> None:
    same_shape("verl", tmp_path)


@pytest.mark.optional(env="GPUTRAIN_HF4_PYTHON", hint="a transformers 4.x venv's python")
def test_transformers_4_live(tmp_path: Path) -> None:
    """transformers 4 cannot share an interpreter with 5: GPUTRAIN_HF4_PYTHON names a 4.x venv's python."""
    same_shape("hf4", tmp_path, python=os.environ["GPUTRAIN_HF4_PYTHON"])
