"""Checkpoints that survive a kill at any moment, for every rank.

Layout: ``<job_dir>/checkpoints/step_00000120/`` holding ``state.pt`` (rank 0: model, optimizer,
scheduler, scaler, sampler position, anything else passed in) and ``rank<R>.pt`` (every rank: its RNG
states — CPU, CUDA, Python, NumPy — and an optional per-rank state such as FSDP shards). A checkpoint is
built in ``.tmp-step_…``; each file is written to a temp name, fsynced and renamed; rank 0 adds
``meta.json`` last and renames the folder into place, then fsyncs the parent. A folder without
``meta.json``, or a ``.tmp-*`` folder, is never loaded, so a kill -9 during a save leaves the previous
checkpoint as the newest complete one. Saving a step that already exists (an end-of-epoch save after a
periodic one) first renames the old folder to ``.old-step_…``, which still loads until the new one is in
place. Older checkpoints are pruned only after the new one is in place.
The folder must be on a file system all ranks share (always true on one machine; the usual case on Slurm).

Staging (``GPUTRAIN_CHECKPOINT_STAGE``, set by the job script where the cluster profile has ``staging``): a
periodic save writes each rank's files to that node-local folder (fast), and a background thread per rank
copies them into ``.tmp-step_…`` on the shared file system while training goes on. The next save, ``flush()``
(``RunContext.close``) or a save with ``wait=True`` (a preemption's, which must be on the shared file system
before the job ends) waits for every rank's copy and only then does rank 0 add ``meta.json`` and rename the
folder into place: what is loadable is the same as without staging, a checkpoint later.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gputrain.atomic import write_atomic
from gputrain.train.runtime import dist as rdist

#: node-local folder for staged checkpoints (the job script sets it where the profile stages)
STAGE_ENV = "GPUTRAIN_CHECKPOINT_STAGE"
_PREFIX = "step_"
_OLD = ".old-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` streamed to a temp file (no in-memory copy of a large state), fsync, rename."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class UnsafeCheckpoint(RuntimeError):
    """A checkpoint file holds more than tensors and plain data: loading it could run code."""


#: What our own checkpoints hold besides tensors and plain containers: NumPy's RNG state (an array).
_NUMPY_GLOBALS = ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray",
                  "numpy.dtype", "numpy.dtypes.UInt32DType")


def _safe_globals() -> list[Any]:
    import importlib

    found = []
    for dotted in _NUMPY_GLOBALS:
        module, _, name = dotted.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return found


def load_tensors(path: Path, map_location: str | torch.device = "cpu") -> Any:
    """``torch.load`` with ``weights_only=True``: a checkpoint is data, even one from someone else
    (``--resume-from``). Unpickling an arbitrary object runs its constructor's code, so only tensors, plain
    containers and NumPy arrays (our RNG state) are accepted; anything else raises :class:`UnsafeCheckpoint`
    and nothing of the file runs."""
    import pickle

    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        detail = str(exc).strip().splitlines()
        what = next((line for line in detail if "GLOBAL" in line or "global" in line or "but got" in line),
                    detail[0] if detail else "")
        raise UnsafeCheckpoint(f"{path}: refusing to load it: it holds objects other than tensors and plain "
                               f"data, and unpickling them could run code ({what.strip()[:200]})") from None


def unwrap(module: Any) -> Any:
    """The bare module behind DDP (``.module``) and torch.compile (``._orig_mod``)."""
    while True:
        if hasattr(module, "_orig_mod"):
            module = module._orig_mod
        elif isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module
        else:
            return module


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_saveable(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in state.items():
        obj = unwrap(value)
        out[key] = obj.state_dict() if hasattr(obj, "state_dict") else value
    return out


def checkpoint_stage(environ: Mapping[str, str]) -> Path | None:
    """The node-local staging folder, or None (unset or empty: checkpoints go straight to the job folder)."""
    value = environ.get(STAGE_ENV, "").strip()
    return Path(value) if value else None


class _Copy:
    """A background copy of this rank's staged files into the shared ``.tmp-`` folder (temp name, fsync,
    rename per file, as every checkpoint file is written)."""

    def __init__(self, step: int, local: Path, shared: Path) -> None:
        self.step, self.local, self.shared = step, local, shared
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"checkpoint-copy-{step}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for src in sorted(self.local.iterdir()):
                part = self.shared / f".{src.name}.part"
                shutil.copyfile(src, part)
                with open(part, "rb") as fh:
                    os.fsync(fh.fileno())
                os.replace(part, self.shared / src.name)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def join(self) -> str | None:
        self.thread.join()
        return self.error


@dataclass
class Checkpoint:
    step: int
    path: Path
    state: dict[str, Any]  # saved values: state_dicts for stateful objects, plain values as saved
    rank_state: Any = None
    rng: dict[str, Any] = field(default_factory=dict)

    def restore_rng(self) -> None:
        if self.rng:
            set_rng_state(self.rng)


class CheckpointManager:
    """``save(step, state)`` on every rank (it is collective); ``restore(state)`` to resume in place."""

    def __init__(self, root: Path, rank: int, world_size: int, keep: int = 2, stage: Path | None = None) -> None:
        self.root = root
        self.rank = rank
        self.world_size = world_size
        self.keep = max(1, keep)
        self.stage = stage
        self._pending: _Copy | None = None

    def _complete(self) -> list[tuple[int, Path]]:
        found: list[tuple[int, Path]] = []
        if not self.root.is_dir():
            return found
        for p in self.root.iterdir():
            name = p.name[len(_OLD) :] if p.name.startswith(_OLD) else p.name
            if p.is_dir() and name.startswith(_PREFIX) and (p / "meta.json").is_file():
                try:
                    found.append((int(name[len(_PREFIX) :]), p))
                except ValueError:
                    continue
        # For one step, an ``.old-`` folder (a re-save cut short) sorts before the finished one.
        return sorted(found, key=lambda sp: (sp[0], not sp[1].name.startswith(_OLD)))

    def latest_step(self) -> int | None:
        done = self._complete()
        return done[-1][0] if done else None

    def save(self, step: int, state: dict[str, Any], rank_state: Any = None, *, wait: bool = False) -> Path:
        """Write a checkpoint from all ranks; objects with ``state_dict()`` are saved by their state.

        Staged (``stage`` set): returns once this rank's files are on the node-local disk; the checkpoint
        is complete on the shared file system at the next save or :meth:`flush`, or before returning when
        ``wait`` (a preemption's save)."""
        self.flush()
        final = self.root / f"{_PREFIX}{step:08d}"
        tmp = self.root / f".tmp-{_PREFIX}{step:08d}"
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        rdist.barrier()
        # staged: a folder per rank (ranks of one node share its disk), copied into the shared .tmp- folder
        target = tmp if self.stage is None else self.stage / f"rank{self.rank}" / tmp.name
        if target is not tmp:
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
        payload = {"rng": rng_state(), "rank_state": rank_state}
        atomic_torch_save(payload, target / f"rank{self.rank}.pt")
        if self.rank == 0:
            atomic_torch_save({"step": step, "state": _to_saveable(state)}, target / "state.pt")
        if target is not tmp:
            self._pending = _Copy(step, target, tmp)
            if wait:
                self.flush()
            return final
        rdist.barrier()
        self._finalize(step, tmp)
        return final

    def flush(self) -> None:
        """Wait for a staged checkpoint's copies on every rank and put it in place (collective; no-op when
        nothing is pending, which is the same on every rank: they all save the same steps)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        error = pending.join()
        shutil.rmtree(pending.local, ignore_errors=True)
        if error is not None:  # this rank fails the run (torchrun ends the others); the last checkpoint stays
            raise RuntimeError(f"staged checkpoint of step {pending.step} not copied to {self.root}: {error}")
        rdist.barrier()  # every rank's files are in the shared folder
        self._finalize(pending.step, pending.shared)

    def _finalize(self, step: int, tmp: Path) -> None:
        """Rank 0 puts a written ``.tmp-`` folder in place (``meta.json`` last); every rank waits for it."""
        final = self.root / f"{_PREFIX}{step:08d}"
        if self.rank == 0:
            meta = {"step": step, "world_size": self.world_size, "time": time.time()}
            write_atomic(tmp / "meta.json", json.dumps(meta) + "\n")
            _fsync_dir(tmp)
            old = self.root / f"{_OLD}{final.name}"
            if final.exists():
                if old.exists():
                    shutil.rmtree(old)
                os.replace(final, old)  # still loadable until the new folder is in place
            os.replace(tmp, final)
            _fsync_dir(self.root)
            shutil.rmtree(old, ignore_errors=True)
            self._prune()
        rdist.barrier()

    def _prune(self) -> None:
        done = self._complete()
        for _, path in done[: max(0, len(done) - self.keep)]:
            shutil.rmtree(path, ignore_errors=True)
        for p in self.root.iterdir():
            if p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)

    def load_latest(self, map_location: str | torch.device = "cpu") -> Checkpoint | None:
        """The newest complete checkpoint, or None. RNG is not touched (see ``Checkpoint.restore_rng``)."""
        done = self._complete()
        if not done:
            return None
        step, path = done[-1]
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        main = load_tensors(path / "state.pt", map_location=map_location)
        rank_file = path / f"rank{self.rank}.pt"
        rank_payload: dict[str, Any] = {}
        if rank_file.is_file() and meta.get("world_size") == self.world_size:
            rank_payload = load_tensors(rank_file, map_location="cpu")
        return Checkpoint(
            step=step,
            path=path,
            state=main["state"],
            rank_state=rank_payload.get("rank_state"),
            rng=rank_payload.get("rng", {}),
        )

    def restore(self, state: dict[str, Any], map_location: str | torch.device = "cpu") -> Checkpoint | None:
        """Load the newest checkpoint into the given objects and RNG; plain values come back in ``.state``.

        A checkpoint from a different world size restores weights and optimizer but not per-rank RNG.
        """
        ckpt = self.load_latest(map_location=map_location)
        if ckpt is None:
            return None
        for key, obj in state.items():
            target = unwrap(obj)
            if key in ckpt.state and hasattr(target, "load_state_dict"):
                target.load_state_dict(ckpt.state[key])
        ckpt.restore_rng()
        return ckpt
