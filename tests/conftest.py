"""Shared test helpers: paths, and the rule that integration tests never skip under CI."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
DATA = Path(__file__).resolve().parent / "unit" / "data"


def require_tool(name: str) -> str:
    """Path of an external tool; skip when missing, except under CI where a missing tool is a failure."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is required under CI=true but is not on PATH")
        pytest.skip(f"{name} not installed")
    return path


if os.environ.get("PYTEST_XDIST_WORKER"):
    # One intra-op thread per xdist worker, set before any test module imports torch: N workers already fill
    # the cores, and torch's default (a thread per core) in each made them spin against each other (a
    # diffusion sampler test took 9.5 s in the loop against 1 s alone). Trainings the tests launch set their own.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

_DESELECTED: list[str] = []

#: Test modules that share one outside service run on one xdist worker, one after another, under ``pytest -n N
#: --dist loadgroup`` (:func:`pytest_xdist_make_scheduler`): the Slurm testbed (one controller, one queue, jobs that
#: wait for each other's nodes) and the loopback sshd of the RunPod fake (a port picked free, then bound by sshd:
#: two at once could race for it). Every other test is independent: its own tmp_path, registry home
#: (``_private_home``), standalone torchrun rendezvous on a free port, HTTP fakes on port 0.
SERIAL_GROUPS = {
    "slurm_testbed": ("test_cli_exit_codes", "test_cluster_gpus", "test_offline_cluster", "test_slurm_causes",
                      "test_slurm_gnn", "test_slurm_testbed", "test_slurm_faults", "test_slurm_all_or_nothing"),
    "loopback_sshd": ("test_runpod_ssh", "test_runpod_survive", "test_runpod_up", "test_runpod_faults",
                      "test_runpod_faults_cli", "test_boundary_pod", "test_boundary_pod_secrets",
                      "test_boundary_pod_host", "test_boundary_pod_record"),
    # wall-clock limits inside: one sandbox suite at a time, so two never compete for the same cores
    "sandbox": ("test_sandbox_hostile", "test_sandbox_attacks", "test_sandbox_lifetime", "test_sandbox_level_choice"),
    # one module-scoped training read by both tests (#26): on one worker, so it is trained once
    "runtime_torchrun": ("test_runtime_torchrun",),
    "gnn_cpu_run": ("test_gnn_run", "test_plan_calibration"),  # tests/integration/conftest.py's gnn_cpu_run
    # one module-scoped ONNX export read by four tests: split over two workers, each exported it (#26: 2 x 40 s
    # of set-up in a CI rehearsal)
    "gnn_export": ("test_gnn_export",),
}


_GROUP_OF = {module: group for group, modules in SERIAL_GROUPS.items() for module in modules}


#: The groups that mostly wait (on Slurm's timers, on a pod's boot and stalls): they run beside the CPU work.
WAITING_GROUPS = frozenset({"slurm_testbed", "loopback_sshd"})


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with :data:`SERIAL_GROUPS` as the groups: each group is one unit of work (one
    worker, in file order), every other test a unit of its own, and at most one worker per core on anything
    but :data:`WAITING_GROUPS` (``tests/support/scheduling.py``). Not xdist's ``xdist_group`` marks: xdist 3.8
    groups by renaming ``item._nodeid``, which pytest 9.2 no longer reads (``Node.nodeid`` is ``str(_id)``),
    so the marks grouped nothing and the Slurm, sshd and sandbox suites ran on several workers at once."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.scheduling import SlotScheduling, cpu_slots

    return SlotScheduling(config, log, group_of=_GROUP_OF, waiting=WAITING_GROUPS, slots=cpu_slots())


def _optional_missing(item: pytest.Item) -> str | None:
    """Why an ``optional`` test cannot run here: a library outside the extras CI installs, or a secret or
    path only a person has (a live RunPod key, a transformers 4 venv)."""
    import importlib.util

    mark = item.get_closest_marker("optional")
    if mark is None:
        return None
    module, env, hint = mark.kwargs.get("module"), mark.kwargs.get("env"), mark.kwargs.get("hint", "")
    if module and importlib.util.find_spec(module) is None:
        return f"{module} not installed" + (f" ({hint})" if hint else "")
    if env and not os.environ.get(env):
        return f"{env} not set" + (f" ({hint})" if hint else "")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``optional`` tests whose library or secret is absent are deselected, not skipped: nothing that CI is
    meant to run is ever skipped there, and the summary says what was left out and why."""
    for item in items:
        if "integration" in item.path.parts:  # real torchrun, sshd, Slurm, pip: seconds each on 2 cores
            item.add_marker(pytest.mark.slow)
    keep, drop = [], []
    for item in items:
        why = _optional_missing(item)
        (drop if why else keep).append(item)
        if why:
            _DESELECTED.append(f"{item.nodeid}: {why}")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _cpu_seconds() -> float:
    """CPU of this process and of the children it has reaped (with their own reaped children: a test's
    torchrun and its ranks). Not counted: the forked CLI calls (the zygote reaps them), Slurm jobs and the
    pods sshd starts; a cgroup's CPU is the whole figure."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With ``GPUTRAIN_TEST_TIMELINE=DIR``, one JSON line per test in ``DIR/<worker>.jsonl``: when it started
    and ended (setup and teardown included), its CPU, its serial group. ``benchmarks/ci_timeline.py`` reads
    them into each worker's chain, which is what sets the wall time of ``pytest -n N`` (#26)."""
    folder = os.environ.get("GPUTRAIN_TEST_TIMELINE")
    if not folder:
        yield
        return
    start, cpu = time.time(), _cpu_seconds()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {"test": item.nodeid, "worker": worker, "start": round(start, 3), "end": round(time.time(), 3),
           "cpu": round(_cpu_seconds() - cpu, 3), "group": _GROUP_OF.get(item.path.stem, "")}
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _DESELECTED:
        terminalreporter.write_line(f"deselected (optional): {line}")


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own ``$GPUTRAIN_HOME`` (registry, pod keys), so tests never share the user's, nor
    each other's when run in parallel; a test that sets its own overrides this one."""
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path_factory.mktemp("gputrain-home")))


@pytest.fixture
def gputrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private registry/config home so tests never touch the user's."""
    home = tmp_path / "gputrain-home"
    home.mkdir()
    monkeypatch.setenv("GPUTRAIN_HOME", str(home))
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(home / "clusters.yaml"))
    return home


def gputrain_command() -> list[str]:
    """The installed ``gputrain`` script of the running interpreter's environment (a venv's, or the system
    Python's), else ``python -m gputrain``: never a hard-coded interpreter or whatever is first on PATH."""
    script = Path(sys.executable).with_name("gputrain")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gputrain"]
