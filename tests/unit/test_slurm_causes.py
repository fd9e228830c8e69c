"""Causes told apart, without Slurm: the end-state rule for the TIMEOUT marker, the stop request the workers
poll, signals before the handlers exist, per-submit options, ``%`` refused where sbatch expands it, the
recipe-vs-profile rule, and the rendezvous port. The testbed side is tests/integration/test_slurm_causes.py.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gputrain.contract import jobstate
from gputrain.errors import ClusterProfileError, UserError
from gputrain.planner import make_plan
from gputrain.render.sbatch import SbatchInputs, SubmitOptions, job_shape, render_sbatch, shape_warnings

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "selftest.yaml"


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "none.yaml"))


def _inputs(**kw: object) -> SbatchInputs:
    base: dict[str, object] = {"logs_dir": "/scratch/logs", "workdir": "/home/u", "stamp": "20260101_000000",
                               "python": "python"}
    return SbatchInputs(**{**base, **kw})  # type: ignore[arg-type]


def test_timeout_marker_is_timeout_for_every_reader() -> None:
    """Checkpointed at the time limit and not requeued: the job exits 75 by itself and Slurm says FAILED,
    yet it is TIMEOUT (it used to be PREEMPTED, "PREEMPTED (exit 1)" in the summary)."""
    markers = {jobstate.PREEMPTED_MARKER, jobstate.TIMEOUT_MARKER}
    facts = jobstate.BackendFacts(scheduler_state=jobstate.FAILED)
    assert jobstate.end_state(75, markers, facts).state == jobstate.TIMEOUT
    assert jobstate.end_state(1, markers).state == jobstate.TIMEOUT
    assert jobstate.end_state(75, {jobstate.PREEMPTED_MARKER}).state == jobstate.PREEMPTED
    assert jobstate.end_state(0, markers).state == jobstate.COMPLETED  # a resumed run that finished


def test_stop_request_round_trip_and_unknown_cause(tmp_path: Path) -> None:
    assert jobstate.read_stop_request(tmp_path) is None
    jobstate.write_stop_request(tmp_path, "requested")
    assert jobstate.read_stop_request(tmp_path) == {"cause": "requested", "signal": ""}
    with pytest.raises(ValueError):
        jobstate.write_stop_request(tmp_path, "whim")


def test_workers_poll_the_stop_request(tmp_path: Path) -> None:
    from gputrain.train.runtime.signals import PreemptionFlag

    flag = PreemptionFlag(signals=(), request_dir=tmp_path)
    flag.poll()
    assert not flag.raised and flag.code == 0
    (tmp_path / jobstate.STOP_REQUEST_FILE).write_text('{"cause": "time_limit", "signal": "SIGUSR2"}\n')
    flag.poll()
    assert flag.raised and flag.cause == "time_limit" and flag.signal_name == "SIGUSR2"
    assert flag.code == int(signal.SIGUSR2)


_EARLY = """
import os, signal, time
import gputrain.train  # a launched worker: installs the early handler before anything heavy
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.2)
from gputrain.train.runtime.signals import PreemptionFlag
flag = PreemptionFlag()
print("kept", flag.signal_name)
"""


@pytest.mark.slow  # a real process signalled while it starts: 3-4 s
def test_signal_before_the_handlers_is_kept_not_fatal(tmp_path: Path) -> None:
    """A worker told to stop while torch is still importing used to die of SIGUSR1 (no PREEMPTED file)."""
    env = {**os.environ, "GPUTRAIN_JOB_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _EARLY], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "kept SIGUSR1", (proc.returncode, proc.stderr)


def test_script_gives_the_signal_to_no_launcher_and_kills_no_node_mid_save() -> None:
    plan = make_plan(RECIPE, cluster="supercloud", nodes=2, gpus_per_node=2, target="slurm")
    text = render_sbatch(plan, _inputs(options=SubmitOptions(signal="USR2")))
    assert "#SBATCH --signal=B:USR2@120\n" in text and "STOP_SIGNAL=USR2\n" in text
    assert "--kill-on-bad-exit=1" not in text and "--kill-on-bad-exit=0 --wait=120" in text
    assert "trap '' USR1 USR2\n    exec " in text and "(trap '' USR1 USR2; exec srun" in text
    assert "gputrain_forward" not in text  # nothing passes a signal on: the workers read the stop request
    assert "} || gputrain_setup_failed 2 \"$?\" 'module load anaconda/2023b'" in text
    assert "$((20000 + SLURM_JOB_ID % 20000))" not in text and "gputrain.backends.slurm_port" in text


@pytest.mark.parametrize("field", ["logs_dir", "workdir", "stamp"])
def test_percent_is_refused_where_sbatch_expands_it(field: str) -> None:
    """`--output=<logs>/%j...`: a `%` in the logs folder was accepted and expanded by sbatch."""
    plan = make_plan(RECIPE, cluster="testbed", gpu="cpu", target="slurm")
    with pytest.raises(ClusterProfileError, match="'%'"):
        render_sbatch(plan, _inputs(**{field: "/scratch/a%jb" if field != "stamp" else "2026%u"}))


@pytest.mark.parametrize(("option", "value"), [
    ("account", "a%j"), ("qos", "hi gh"), ("partition", "p\nq"), ("reservation", "-x"),
    ("mail_user", "a%u@x.org"), ("begin", "now; rm -rf"), ("signal", "TERM"),
])
def test_submit_options_refuse_what_sbatch_would_expand_or_misread(option: str, value: str) -> None:
    with pytest.raises(UserError, match=f"--{option.replace('_', '-')}"):
        SubmitOptions(**{option: value})  # type: ignore[arg-type]


def test_submit_options_render_and_override_the_profile() -> None:
    plan = make_plan(RECIPE, cluster="testbed", gpu="cpu", target="slurm")
    options = SubmitOptions(partition="gpu", qos="high", account="lab", reservation="r1", exclusive=True,
                            mail_type=("end", "FAIL"), mail_user="me@example.org", begin="now+1hours",
                            after=("12",), after_ok=("13", "14_2"))
    text = render_sbatch(plan, _inputs(options=options))
    for line in ("--partition=gpu", "--account=lab", "--qos=high", "--reservation=r1", "--exclusive",
                 "--mail-type=END,FAIL", "--mail-user=me@example.org", "--begin=now+1hours",
                 "--dependency=afterany:12,afterok:13:14_2"):
        assert f"#SBATCH {line}\n" in text
    assert "--partition=debug" not in text
    with pytest.raises(UserError, match="--mail-type"):
        SubmitOptions(mail_type=("SOMETIMES",))


def test_recipe_asks_and_profile_caps_every_field_with_a_warning() -> None:
    """One rule: the profile's cpus_per_gpu used to override the recipe's, its memory to yield to it, and a
    time over max_time was cut without a word."""
    plan = make_plan(RECIPE, cluster="testbed", gpu="cpu", target="slurm",
                     overrides=["resources.time=02:00:00", "resources.cpus_per_gpu=3", "resources.memory_gb=8"])
    assert job_shape(plan) == {"time": "00:30:00", "cpus_per_gpu": 1, "memory_gb": 1}
    warned = " ".join(shape_warnings(plan))
    for field in ("resources.time 02:00:00", "resources.cpus_per_gpu 3", "resources.memory_gb 8"):
        assert field in warned
    plan = make_plan(RECIPE, cluster="supercloud", target="slurm", overrides=["resources.cpus_per_gpu=8"])
    assert job_shape(plan)["cpus_per_gpu"] == 8 and shape_warnings(plan) == []  # under the cap: the recipe's


def test_rendezvous_port_is_free_and_below_the_ephemeral_range() -> None:
    from gputrain.backends.slurm_port import ephemeral_start, free_port

    with socket.socket() as taken:
        taken.bind(("", 0))
        busy = taken.getsockname()[1]
        taken.listen()
        port = free_port(busy - 20000, low=20000, high=busy + 5) if busy > 20000 else None
        if port is not None:
            assert port != busy
    port = free_port(4242)
    assert port is not None and 20000 <= port < ephemeral_start()
    with socket.socket() as sock:
        sock.bind(("", port))  # it really is free


def test_scheduler_questions_back_off() -> None:
    """`logs -f` asked Slurm at every 0.5 s poll; now after 2 s, then 1.5x longer each time, at most 30 s."""
    from gputrain.cli.logs import Backoff

    now = [0.0]
    backoff = Backoff(clock=lambda: now[0])
    asked = []
    while now[0] < 300:
        if backoff.due():
            asked.append(now[0])
        now[0] += 0.5
    assert asked[:3] == [2.0, 5.0, 9.5]
    assert len(asked) <= 15 and max(b - a for a, b in itertools.pairwise(asked)) <= 30.0
