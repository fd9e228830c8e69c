"""#25.10 — a checkpoint is data: ``--resume-from`` someone else's job must not run their code.

The attack: a job folder shared by someone else (or a pod's salvaged checkpoint) whose ``state.pt`` or
``rank0.pt`` is a pickle with an object whose ``__reduce__`` calls ``os.system``. Loading it with
``weights_only=False`` ran the command. Our own checkpoints (model, optimizer, scheduler, scaler, NumPy RNG)
still load and restore.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputrain.train.runtime.checkpoint import CheckpointManager, UnsafeCheckpoint  # noqa: E402


class _Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _real_checkpoint(root: Path) -> Path:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    mgr = CheckpointManager(root, rank=0, world_size=1, keep=2)
    return mgr.save(5, {"model": model, "optimizer": opt, "scheduler": sched, "pos": {"epoch": 1, "index": 4}},
                    rank_state={"shard": torch.ones(2)})


@pytest.mark.parametrize("file", ["state.pt", "rank0.pt"])
def test_a_planted_pickle_in_a_checkpoint_never_runs(tmp_path: Path, file: str) -> None:
    marker = tmp_path / "pwned"
    folder = _real_checkpoint(tmp_path / "ckpt")
    torch.save({"step": 5, "state": {"model": {}, "evil": _Payload(marker)}, "rng": {}, "rank_state": None},
               folder / file)
    mgr = CheckpointManager(tmp_path / "ckpt", rank=0, world_size=1, keep=2)
    with pytest.raises(UnsafeCheckpoint) as info:
        mgr.load_latest()
    assert not marker.exists(), "loading a checkpoint ran code from it"
    assert file in str(info.value) and "\n" not in str(info.value)


def test_resume_from_a_hostile_job_folder_runs_nothing(tmp_path: Path) -> None:
    """The whole path: ``--resume-from`` seeds the new job from the other job's checkpoint, the trainer loads it."""
    from gputrain.backends.resume import seed_checkpoint

    marker = tmp_path / "pwned"
    other = tmp_path / "other_job"
    folder = _real_checkpoint(other / "checkpoints")
    torch.save({"step": 5, "state": {"evil": _Payload(marker)}}, folder / "state.pt")
    new_job = tmp_path / "new_job"
    new_job.mkdir()
    seed_checkpoint(other, new_job)
    with pytest.raises(UnsafeCheckpoint, match="state.pt"):  # what the new job's trainer does first
        CheckpointManager(new_job / "checkpoints", rank=0, world_size=1, keep=2).load_latest()
    assert not marker.exists(), "resuming from another job's folder ran code from its checkpoint"


def test_our_own_checkpoints_still_restore_everything(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    random.seed(3)
    np.random.seed(3)
    folder = _real_checkpoint(tmp_path / "ckpt")
    expected = (random.random(), float(np.random.rand()))
    mgr = CheckpointManager(tmp_path / "ckpt", rank=0, world_size=1, keep=2)
    ckpt = mgr.load_latest()
    assert ckpt is not None and ckpt.step == 5 and ckpt.path == folder
    assert ckpt.state["pos"] == {"epoch": 1, "index": 4} and "exp_avg" in str(ckpt.state["optimizer"])
    assert torch.equal(ckpt.rank_state["shard"], torch.ones(2))
    ckpt.restore_rng()  # NumPy's RNG state (an array) comes back too
    assert (random.random(), float(np.random.rand())) == expected
    shutil.rmtree(tmp_path / "ckpt")
