"""The rendered sbatch script: golden file, shell safety, layouts (one node / many nodes / CPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gputrain.planner import make_plan
from gputrain.render.render import render_sbatch

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "data" / "slurm" / "golden_supercloud_2nodes.sbatch"
NASTY = "it's $(touch /tmp/pwned) `id` \"quoted\" ; rm -rf ~"


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.setenv("WANDB_API_KEY", "sekrit-value-123")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "recipes" / "selftest.yaml").read_text()
    text += yaml.safe_dump({"env": {"GREETING": NASTY, "NCCL_DEBUG": "WARN"}, "secrets": ["WANDB_API_KEY"]})
    path = tmp_path / "selftest.yaml"
    path.write_text(text)
    return path


def _render(recipe: Path, **kw: object) -> str:
    plan = make_plan(recipe, **kw)  # type: ignore[arg-type]
    return render_sbatch(plan, logs_dir=Path("/scratch/u/logs"), stamp="20260101_120000")


def test_supercloud_two_nodes_matches_golden(recipe: Path) -> None:
    text = _render(recipe, cluster="supercloud", nodes=2, gpus_per_node=2)
    text = text.replace(os.getcwd(), "/home/u/work")
    if os.environ.get("GPUTRAIN_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


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
    export = next(line for line in text.splitlines() if line.startswith("export GREETING="))
    out = subprocess.run(["bash", "-c", f'{export}; printf %s "$GREETING"'], capture_output=True, text=True)
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
