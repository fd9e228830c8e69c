"""Checkpoints: a kill -9 in the middle of a save leaves the previous one intact; pruning; in-place resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputrain.train.runtime.checkpoint import CheckpointManager  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from gputrain.train.runtime.checkpoint import CheckpointManager

    root, where = Path(sys.argv[1]), sys.argv[2]

    class Blocker:
        # Pickling this object announces itself and then hangs: the parent kills us right there.
        def __reduce__(self):
            (root.parent / "in_save").write_text("x")
            time.sleep(600)
            return (Blocker, ())

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    mgr = CheckpointManager(root, rank=0, world_size=1, keep=3)
    mgr.save(1, {"model": model, "pos": {"batch": 1}})
    with torch.no_grad():
        model.weight.add_(1.0)
    big = {"blob": torch.zeros(2_000_000)}
    if where == "rank":
        mgr.save(2, {"model": model, "pos": {"batch": 2}, **big}, rank_state=Blocker())
    else:
        mgr.save(2, {"model": model, "pos": {"batch": 2}, **big, "hang": Blocker()})
    """
)


@pytest.mark.slow  # a process killed mid-save, per layout: 2-3 s each
@pytest.mark.parametrize("where", ["rank", "state"])
def test_kill_9_during_save_keeps_previous_checkpoint_loadable(tmp_path: Path, where: str) -> None:
    root = tmp_path / "checkpoints"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(root), where], env=env)
    deadline = time.monotonic() + 120
    while not (tmp_path / "in_save").exists():
        assert proc.poll() is None, "child exited before reaching the save"
        assert time.monotonic() < deadline, "child never reached the second save"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any(p.name.startswith(".tmp-") for p in root.iterdir()), "the killed save left no partial folder"

    mgr = CheckpointManager(root, rank=0, world_size=1)
    ckpt = mgr.load_latest()
    assert ckpt is not None and ckpt.step == 1
    assert ckpt.state["pos"] == {"batch": 1}
    torch.manual_seed(0)
    expected = torch.nn.Linear(4, 3)
    assert torch.equal(ckpt.state["model"]["weight"], expected.weight.detach())
    fresh = torch.nn.Linear(4, 3)
    assert mgr.restore({"model": fresh}) is not None
    assert torch.equal(fresh.weight, expected.weight)

    mgr.save(3, {"model": fresh})  # the next save cleans the partial folder up
    assert sorted(p.name for p in root.iterdir()) == ["step_00000001", "step_00000003"]


def test_keeps_last_k_and_restores_in_place_with_rng(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, rank=0, world_size=1, keep=2)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for step in range(1, 5):
        model(torch.randn(5, 3)).sum().backward()
        opt.step()
        sched.step()
        mgr.save(step, {"model": model, "optimizer": opt, "scheduler": sched, "pos": {"epoch": step}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]
    expected_next = torch.rand(3)

    model2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.1)
    sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=1, gamma=0.5)
    torch.manual_seed(999)
    ckpt = mgr.restore({"model": model2, "optimizer": opt2, "scheduler": sched2})
    assert ckpt is not None and ckpt.step == 4 and ckpt.state["pos"] == {"epoch": 4}
    assert torch.equal(model2.weight, model.weight)
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert torch.equal(torch.rand(3), expected_next), "RNG state was not restored"


def test_ddp_and_compiled_wrappers_are_saved_as_the_bare_module(tmp_path: Path) -> None:
    class Wrapped(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self._orig_mod = inner

    inner = torch.nn.Linear(2, 2)
    mgr = CheckpointManager(tmp_path, rank=0, world_size=1)
    mgr.save(1, {"model": Wrapped(inner)})
    ckpt = mgr.load_latest()
    assert ckpt is not None
    assert set(ckpt.state["model"]) == {"weight", "bias"}


def test_folder_without_meta_is_ignored(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, rank=0, world_size=1)
    mgr.save(5, {"pos": 5})
    (tmp_path / "step_00000009").mkdir()  # e.g. copied by hand, incomplete
    ckpt = mgr.load_latest()
    assert ckpt is not None and ckpt.step == 5


def test_resaving_a_step_cut_between_the_renames_keeps_that_step_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep=1 and an end-of-epoch save of a step already saved: the old folder must survive a kill."""
    mgr = CheckpointManager(tmp_path, rank=0, world_size=1, keep=1)
    mgr.save(4, {"pos": "first"})
    real_replace = os.replace

    def dies_before_the_new_folder_lands(src: object, dst: object) -> None:
        if Path(str(src)).name.startswith(".tmp-step_"):
            raise KeyboardInterrupt  # stands in for a kill -9 at this instant
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", dies_before_the_new_folder_lands)
    with pytest.raises(KeyboardInterrupt):
        mgr.save(4, {"pos": "second"})
    monkeypatch.undo()
    ckpt = mgr.load_latest()
    assert ckpt is not None and ckpt.step == 4 and ckpt.state["pos"] == "first"

    mgr.save(4, {"pos": "third"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000004"]
    again = mgr.load_latest()
    assert again is not None and again.state["pos"] == "third"


def test_staged_save_lands_in_the_job_folder_one_save_later_and_on_flush(tmp_path: Path) -> None:
    """Staging (SuperCloud's node-local $TMPDIR): a periodic save returns once it is on the local disk and is
    copied in the background; it becomes loadable at the next save or flush; a preemption's save (wait)
    is complete before it returns; the staged copy loads to the same tensors."""
    root, stage = tmp_path / "checkpoints", tmp_path / "local"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    mgr = CheckpointManager(root, rank=0, world_size=1, keep=2, stage=stage)
    mgr.save(1, {"model": model, "pos": {"batch": 1}})
    assert mgr.latest_step() is None  # not yet in place: copies may still be running
    with torch.no_grad():
        model.weight.add_(1.0)
    mgr.save(2, {"model": model, "pos": {"batch": 2}})
    assert mgr.latest_step() == 1 and not (stage / "rank0" / ".tmp-step_00000001").exists()
    mgr.flush()
    assert mgr.latest_step() == 2 and sorted(p.name for p in root.iterdir()) == ["step_00000001", "step_00000002"]
    mgr.save(3, {"model": model, "pos": {"batch": 3}}, wait=True)
    assert mgr.latest_step() == 3 and list((stage / "rank0").iterdir()) == []
    fresh = torch.nn.Linear(4, 3)
    ckpt = CheckpointManager(root, rank=0, world_size=1).restore({"model": fresh, "pos": {}})
    assert ckpt is not None and ckpt.state["pos"] == {"batch": 3}
    assert torch.equal(fresh.weight, model.weight)
    plain = CheckpointManager(tmp_path / "plain", rank=0, world_size=1)
    plain.save(1, {"model": model})
    assert plain.latest_step() == 1  # without staging a save is complete when it returns, as before
