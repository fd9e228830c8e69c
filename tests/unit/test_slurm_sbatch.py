"""The rendered sbatch script: golden files, purity, shell safety, layouts (one node / many nodes / CPU).

``render_sbatch(plan, SbatchInputs(...))`` is tested the way submitit tests ``_make_sbatch_string``: called
directly with fixed inputs and compared with golden files in ``tests/unit/data/slurm/golden_*.sbatch``.
After a deliberate change to the template or the layout, regenerate them and review the diff::

    GPUTRAIN_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_slurm_sbatch.py -q
    git diff tests/unit/data/slurm/
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gputrain.contract.plan import JobPlan
from gputrain.planner import make_plan
from gputrain.render.sbatch import SbatchInputs, render_sbatch

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).parent / "data" / "slurm"
INPUTS = SbatchInputs(logs_dir="/scratch/u/logs", workdir="/home/u/work", stamp="20260101_120000",
                      python="python", version="0.1.0")
NASTY = "it's $(touch /tmp/pwned) `id` \"quoted\" ; rm -rf ~"


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("WANDB_API_KEY", "sekrit-value-123")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "recipes" / "selftest.yaml").read_text()
    text += yaml.safe_dump({"env": {"RECIPE_GREETING": NASTY, "NCCL_DEBUG": "WARN"}, "secrets": ["WANDB_API_KEY"]})
    path = tmp_path / "selftest.yaml"
    path.write_text(text)
    return path


def _plan(recipe: Path, **kw: object) -> JobPlan:
    plan = make_plan(recipe, **kw)  # type: ignore[arg-type]
    return plan.model_copy(update={"recipe_path": "/home/u/work/selftest.yaml"})  # the test's tmp path varies


def _render(recipe: Path, inputs: SbatchInputs = INPUTS, **kw: object) -> str:
    return render_sbatch(_plan(recipe, **kw), inputs)


def _golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("GPUTRAIN_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs: see this module's docstring to regenerate it"


def test_supercloud_two_nodes_matches_golden(recipe: Path) -> None:
    _golden("golden_supercloud_2nodes.sbatch", _render(recipe, cluster="supercloud", nodes=2, gpus_per_node=2))


def test_testbed_cpu_one_node_matches_golden(recipe: Path) -> None:
    inputs = SbatchInputs(logs_dir="/home/u/work/logs", workdir="/home/u/work", stamp="20260101_120000",
                          python="/opt/venv/bin/python3", version="0.1.0")
    _golden("golden_testbed_cpu_1node.sbatch", _render(recipe, inputs, cluster="testbed", gpu="cpu", gpus_per_node=2))


def test_site_options_and_debug_match_golden(recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text(yaml.safe_dump({"lab": {
        "gpu": "A100-80GB", "gpus_per_node": 4, "gres_type": "a100", "gres_style": "gpus-per-node",
        "partition": "gpu", "account": "proj42", "qos": "high", "constraint": "ib", "memory_gb": 480,
        "max_time": "2-00:00:00", "cpus_per_gpu": 8, "setup": ["module load cuda/12.4"],
        "sbatch_extra": ["--exclusive"], "signal_seconds": 300, "max_requeues": 5,
    }}))
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(cfg))
    inputs = SbatchInputs(logs_dir="/scratch/u/logs", workdir="/home/u/work", stamp="20260101_120000",
                          python="python", debug=True, version="0.1.0")
    _golden("golden_lab_site_options_debug.sbatch", _render(recipe, inputs, cluster="lab", nodes=3))


def test_renderer_is_pure_no_cwd_clock_or_environment(recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same plan and inputs, same text, with the working directory, the clock and the environment unusable."""
    plan = _plan(recipe, cluster="supercloud", nodes=2, gpus_per_node=2)
    first = render_sbatch(plan, INPUTS)

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the renderer read the working directory, the clock or the interpreter path")

    import time

    monkeypatch.setattr(os, "getcwd", refuse)
    monkeypatch.setattr(time, "strftime", refuse)
    monkeypatch.setattr(time, "time", refuse)
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setattr("sys.executable", "/nowhere/python")
    assert render_sbatch(plan, INPUTS) == first
    moved = SbatchInputs(logs_dir="/other/logs", workdir="/other", stamp="20270202_000000", python="python",
                         version="0.1.0")
    second = render_sbatch(plan, moved)
    assert "#SBATCH --chdir=/other\n" in second and "/other/logs/selftest_job_%j_20270202_000000/" in second
    assert "/home/u/work" not in second.replace("/home/u/work/selftest.yaml", "")


def test_inputs_here_gathers_the_moment_and_the_interpreter(recipe: Path, tmp_path: Path) -> None:
    import sys

    plan = _plan(recipe, cluster="testbed", gpu="cpu")
    here = SbatchInputs.here(plan, logs_dir="/l", stamp="S")
    assert (here.workdir, here.stamp, here.python) == (os.getcwd(), "S", sys.executable)
    # the submitting environment's interpreter even where set-up lines load a module (#20): that is where
    # gputrain and its training extras are installed
    assert SbatchInputs.here(_plan(recipe, cluster="supercloud")).python == sys.executable


def test_an_unsafe_input_is_refused(recipe: Path) -> None:
    from gputrain.errors import ClusterError

    plan = _plan(recipe, cluster="testbed", gpu="cpu")
    with pytest.raises(ClusterError, match="working dir"):
        render_sbatch(plan, SbatchInputs(logs_dir="/l", workdir="/home/my work", stamp="S", python="python"))
    with pytest.raises(ClusterError, match="stamp"):
        render_sbatch(plan, SbatchInputs(logs_dir="/l", workdir="/w", stamp="x\n#SBATCH --wrap=id", python="p"))


def test_multi_node_layout(recipe: Path) -> None:
    text = _render(recipe, cluster="supercloud", nodes=2, gpus_per_node=2)
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --ntasks-per-node=2\n" in text
    assert "#SBATCH --gres=gpu:volta:2\n" in text
    assert "#SBATCH --signal=B:USR1@120\n" in text and "#SBATCH --requeue\n" in text
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in text
    assert "--rdzv_backend=c10d" in text and "module load anaconda" in text
    assert "--nproc_per_node=2" in text


def test_single_node_cpu_is_standalone_without_gres(recipe: Path) -> None:
    text = _render(recipe, cluster="testbed", gpu="cpu", gpus_per_node=2)
    assert "--gres" not in text and "srun " not in text
    assert "set -- --standalone" in text and "\ngputrain_node &\n" in text
    assert "#SBATCH --partition=debug\n" in text


def test_recipe_values_are_quoted_and_secrets_absent(recipe: Path, tmp_path: Path) -> None:
    text = _render(recipe, cluster="testbed", gpu="cpu")
    assert "sekrit-value-123" not in text
    assert "WANDB_API_KEY" in text  # by name only: checked at run time
    export = next(line for line in text.splitlines() if line.startswith("export RECIPE_GREETING="))
    out = subprocess.run(["bash", "-c", f'{export}; printf %s "$RECIPE_GREETING"'], capture_output=True, text=True)
    assert out.stdout == NASTY and not Path("/tmp/pwned").exists()
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck"):
        check = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout


def test_recipe_time_is_capped_by_cluster(recipe: Path) -> None:
    text = _render(recipe, cluster="testbed", gpu="cpu", overrides=["resources.time=02:00:00"])
    assert "#SBATCH --time=00:30:00\n" in text


def test_unsafe_sbatch_value_is_refused(recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputrain.errors import ClusterError

    cfg = tmp_path / "clusters.yaml"
    cfg.write_text("lab:\n  gpu: V100-32GB\n  gpus_per_node: 2\n  partition: 'gpu --wrap=evil'\n")
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(cfg))
    with pytest.raises(ClusterError, match="partition"):
        _render(recipe, cluster="lab")


def test_a_preemption_signal_to_every_process_does_not_empty_the_rendezvous_address(recipe: Path,
                                                                                   tmp_path: Path) -> None:
    """`scancel --full --signal=USR1` reaches the head-node lookups too: an `scontrol` killed by it left the
    rendezvous at ":port" and the job FAILED instead of requeueing (seen in CI). Here a stand-in `scontrol`
    signals its whole process group, as Slurm does, and the address must still be the node's."""
    text = _render(recipe, cluster="supercloud", nodes=2, gpus_per_node=2)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HEAD_NODE="))
    end = next(i for i, line in enumerate(lines) if line.startswith("export GPUTRAIN_RDZV="))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\nkill -USR1 0\nsleep 0.2\nif [ "$2" = hostnames ]; then echo n7;'
                                      ' else echo "NodeName=n7 NodeAddr=10.1.2.7"; fi\n')
    (bin_dir / "scontrol").chmod(0o755)
    script = "\n".join(["trap 'echo stop-requested >&2' USR1", "SLURM_JOB_ID=955", "SLURM_JOB_NODELIST='n[7-8]'",
                        *lines[start:end + 1], 'echo "$GPUTRAIN_RDZV"'])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("10.1.2.7:"), proc.stdout + proc.stderr
    assert "stop-requested" in proc.stderr  # the script itself still saw the signal
