"""``setup_run()``: everything an entrypoint needs before its first step, in one object.

Reads ``--plan`` (a ``plan.json``, read through the typed contract :class:`~gputrain.contract.plan.JobPlan`)
and ``--job-dir``, creates the process group, seeds, picks device and precision, and hands out the checkpoint
manager, the metrics logger and the preemption flag. Settings are read typed — ``ctx.recipe.train.batch_size``,
``ctx.algorithm(GRPOAlgorithm).num_generations`` — so every default is the schema's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch
from pydantic import BaseModel

from gputrain.atomic import write_atomic
from gputrain.contract import phases
from gputrain.contract.jobstate import CANCELLED_MARKER
from gputrain.contract.plan import JobPlan, load_job_plan
from gputrain.errors import GputrainError
from gputrain.recipe.schema import Recipe
from gputrain.train.runtime import dist as rdist
from gputrain.train.runtime import perf
from gputrain.train.runtime.checkpoint import CheckpointManager, checkpoint_stage
from gputrain.train.runtime.metrics import Metrics
from gputrain.train.runtime.precision import Precision, make_precision, maybe_compile
from gputrain.train.runtime.provenance import record_runtime
from gputrain.train.runtime.signals import PREEMPTED_FILE, REQUEUE_EXIT_CODE, PreemptionFlag

AlgorithmT = TypeVar("AlgorithmT", bound=BaseModel)
ValueT = TypeVar("ValueT")


def required(value: ValueT | None, field: str) -> ValueT:
    """``value`` of an optional recipe field this training cannot do without (``model.hidden_size``): unset
    is a one-line error naming the field, never a default of the training's own."""
    if value is None:
        raise GputrainError(f"{field} is not set in the plan's recipe, and this training needs it")
    return value


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass


def eval_shard(n: int, rank: int, world_size: int) -> range:
    """Indices of an ``n``-item evaluation set that ``rank`` evaluates: strided, no padding, no repeats."""
    return range(rank, n, world_size)


@dataclass
class RunContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    plan: JobPlan
    job_dir: Path
    precision: Precision
    checkpoints: CheckpointManager
    metrics: Metrics
    preemption: PreemptionFlag
    args: list[str] = field(default_factory=list)  # argv left after --plan/--job-dir
    seed: int = 0
    stop_after_steps: int | None = None  # GPUTRAIN_STOP_AFTER_STEPS
    _steps_seen: int = 0
    requested_attention: str = "auto"  # train.attention as planned, before this node resolved "auto"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def recipe(self) -> Recipe:
        """The resolved recipe (``plan.recipe``): effective precision, attention, learning rate, GPU counts."""
        return self.plan.recipe

    def algorithm(self, kind: type[AlgorithmT]) -> AlgorithmT:
        """The recipe's ``algorithm:`` settings as ``kind`` (``ctx.algorithm(GRPOAlgorithm)``); an entrypoint
        given a plan of another family gets a one-line error instead of missing attributes later."""
        settings = self.plan.recipe.algorithm
        if not isinstance(settings, kind):
            raise GputrainError(f"entrypoint {self.plan.recipe.entrypoint} has {type(settings).__name__} "
                                f"settings; this training needs {kind.__name__}")
        return settings

    @property
    def scaler(self) -> torch.amp.GradScaler:
        return self.precision.scaler

    def autocast(self) -> AbstractContextManager[None]:
        return self.precision.autocast()

    def print0(self, *args: Any, **kwargs: Any) -> None:
        if self.is_main:
            print(*args, **kwargs, flush=True)

    @contextmanager
    def phase(self, name: str, *, when: bool = True) -> Iterator[None]:
        """A long phase (download, compile, evaluation, report, export): a start and an end line on rank 0,
        which ``gputrain run`` shows as progress on a terminal (``gputrain.contract.phases``). ``when=False``
        says nothing (data generated in memory is not a phase worth a line)."""
        if not when:
            yield
            return
        self.print0(phases.start_line(name))
        tic = time.perf_counter()
        yield
        self.print0(phases.end_line(name, time.perf_counter() - tic))

    def seed_per_rank(self, offset: int = 0) -> None:
        """Different RNG streams per rank (dropout, sampling) after identical model initialisation."""
        seed_everything(self.seed + offset + 1000003 * self.rank)

    def compile(self, model: torch.nn.Module) -> torch.nn.Module:
        compiled, note = maybe_compile(model, self.recipe.train.compile is True, self.device)
        self.print0(f"[runtime] {note}")
        return compiled

    def wrap_ddp(self, model: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        """DDP when world_size > 1 (device_ids on GPU), the model itself otherwise."""
        if self.world_size <= 1:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(model, device_ids=ids, **kwargs)

    def optimizer_step(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, params: Iterator[torch.nn.Parameter] | Any
    ) -> float:
        """backward through the scaler, then :meth:`step_optimizer`; returns the grad norm."""
        self.scaler.scale(loss).backward()
        return self.step_optimizer(optimizer, params)

    def step_optimizer(self, optimizer: torch.optim.Optimizer, params: Iterator[torch.nn.Parameter] | Any) -> float:
        """The one optimizer step every training shares, after gradients were accumulated: unscale (fp16), clip
        by ``train.grad_clip``, step, update the loss scale, zero the gradients; returns the grad norm (the
        global one under FSDP2, where the norm is a DTensor)."""
        scaler = self.scaler
        scaler.unscale_(optimizer)
        clip = self.recipe.train.grad_clip
        params = [p for p in params if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        full = getattr(norm, "full_tensor", None)
        return float(full() if callable(full) else norm)

    def make_loader(
        self, dataset: Any, batch_size: int, *, shuffle: bool = True, drop_last: bool = False, **kwargs: Any
    ) -> tuple[torch.utils.data.DataLoader[Any], torch.utils.data.DistributedSampler[Any]]:
        """A loader over this rank's DistributedSampler shard; resume with ``islice(loader, batch, None)``.

        The loader gets its own generator: otherwise every ``iter(loader)`` draws a seed from the global
        RNG, so an iterator re-created mid-epoch after a resume shifts every later dropout mask.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset,
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=shuffle,
            seed=self.seed,
            drop_last=drop_last,
        )
        gen = torch.Generator().manual_seed(self.seed + self.rank)
        kwargs.setdefault("num_workers", self.recipe.train.num_workers)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=gen, **kwargs)
        return loader, sampler

    def make_eval_loader(self, dataset: Any, batch_size: int, **kwargs: Any) -> torch.utils.data.DataLoader[Any]:
        """A loader over this rank's share of ``dataset`` for evaluation: every item on exactly one rank.

        A DistributedSampler pads the shards to equal length by repeating items, which would count those
        items twice in a validation mean; sum and count per rank, then all-reduce, give the exact mean.
        """
        from torch.utils.data import DataLoader, Subset

        kwargs.setdefault("num_workers", self.recipe.train.num_workers)
        shard = Subset(dataset, list(eval_shard(len(dataset), self.rank, self.world_size)))
        return DataLoader(shard, batch_size=batch_size, shuffle=False, **kwargs)

    def should_stop(self) -> bool:
        """Collective: True on every rank once any rank got SIGUSR1/SIGUSR2/SIGTERM or the job folder holds a
        stop request; call it once per step.

        ``GPUTRAIN_STOP_AFTER_STEPS=N`` stops (checkpoint, exit 75) at the N-th call of this process: a run cut
        into slices, and how the resume tests stop a training at an exact step.
        """
        self._steps_seen += 1
        if self.stop_after_steps is not None and self._steps_seen >= self.stop_after_steps:
            self.preemption.trigger("budget")
        self.preemption.poll()
        code = rdist.max_int(self.preemption.code, self.device)
        self.preemption.adopt(code)
        return code > 0

    def all_reduce_mean(self, **values: float) -> dict[str, float]:
        return rdist.all_reduce_mean(values, self.device)

    def barrier(self) -> None:
        rdist.barrier()

    def exit_for_requeue(self, step: int, state: dict[str, Any], rank_state: Any = None) -> NoReturn:
        """Checkpoint on all ranks, write PREEMPTED (rank 0), close, exit 75 so the job gets requeued.

        A job its user cancelled (the launcher wrote CANCELLED before its signal) is checkpointed too, but
        gets no PREEMPTED beside its CANCELLED: one end-state marker per job folder, and no requeue."""
        self.print0(f"[runtime] stop requested ({self.preemption.signal_name or 'peer'}): saving step {step}")
        started = time.monotonic()
        self.checkpoints.save(step, state, rank_state=rank_state, wait=True)  # on the shared disk before exit
        seconds = time.monotonic() - started
        if (self.job_dir / CANCELLED_MARKER).is_file():
            self.print0(f"[runtime] cancelled at step {step}: checkpoint saved in {seconds:.1f}s")
        elif self.is_main:
            info = {"step": step, "signal": self.preemption.signal_name or "peer",
                    "cause": self.preemption.cause or "signal", "save_seconds": round(seconds, 3),
                    "time": time.time()}
            write_atomic(self.job_dir / PREEMPTED_FILE, json.dumps(info) + "\n")
            self.print0(f"[runtime] preempted at step {step} ({info['signal']}): checkpoint saved in "
                        f"{seconds:.1f}s, exit 75")
        self.close()
        # torchrun terminates the other workers as soon as one exits non-zero. Every rank leaves close()'s
        # final barrier together; leaving straight from there (checkpoint and files already on disk), without
        # the interpreter's slow teardown, keeps a loaded node from killing a peer mid-exit.
        if self.world_size > 1:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(REQUEUE_EXIT_CODE)
        sys.exit(REQUEUE_EXIT_CODE)

    def write_json(self, name: str, obj: Any) -> Path:
        """Rank 0 writes ``<job_dir>/<name>`` atomically (result.json and friends)."""
        path = self.job_dir / name
        if self.is_main:
            write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
        return path

    def close(self) -> None:
        """Put a staged checkpoint in place, record measured cost (``perf.json``: every rank takes part),
        then close metrics and the group."""
        self.checkpoints.flush()
        try:
            perf.record(self.metrics.perf, self.device, self.world_size, self.job_dir, self.metrics, self.is_main)
        except (OSError, RuntimeError) as exc:  # a measurement must never fail a finished run
            self.print0(f"[runtime] perf not recorded: {exc}")
        self.metrics.close()
        self.preemption.uninstall()
        rdist.shutdown()


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="gputrain training entrypoint")
    parser.add_argument("--plan", required=True, help="plan.json written by gputrain")
    parser.add_argument("--job-dir", default=os.environ.get("GPUTRAIN_JOB_DIR"), help="job folder")
    return parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))


def _stop_after_steps() -> int | None:
    text = os.environ.get("GPUTRAIN_STOP_AFTER_STEPS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise GputrainError(f"GPUTRAIN_STOP_AFTER_STEPS={text!r}: give a whole number of steps, 1 or more")
    return int(text)


def setup_run(argv: Sequence[str] | None = None) -> RunContext:
    ns, rest = _parse(argv)
    plan_path = Path(ns.plan)
    plan = load_job_plan(plan_path)
    job_dir = Path(ns.job_dir) if ns.job_dir else plan_path.parent
    train = plan.recipe.train
    preemption = PreemptionFlag(request_dir=job_dir)  # before the process group: a signal during init is kept
    info = rdist.init_distributed(plan.recipe.distributed.backend)
    seed_everything(train.seed)
    if info.rank == 0:
        job_dir.mkdir(parents=True, exist_ok=True)
        record_runtime(job_dir, info.device)
    rdist.barrier()
    precision = make_precision(plan.precision, info.device)
    requested_attention = plan.attention
    attention, reason = perf.resolve_attention(plan.attention, info.device)
    if attention != plan.attention:  # "auto" is decided here, on the node, never by the planning machine
        plan = plan.model_copy(update={
            "attention": attention,
            "recipe": plan.recipe.model_copy(update={
                "train": plan.recipe.train.model_copy(update={"attention": attention})}),
        })
        if info.rank == 0:
            print(f"[runtime] attention auto -> {attention} ({reason})", flush=True)
    ctx = RunContext(
        rank=info.rank,
        world_size=info.world_size,
        local_rank=info.local_rank,
        device=info.device,
        plan=plan,
        job_dir=job_dir,
        precision=precision,
        checkpoints=CheckpointManager(job_dir / "checkpoints", info.rank, info.world_size, train.keep_checkpoints,
                                      stage=checkpoint_stage(os.environ)),
        metrics=Metrics(job_dir, plan.recipe, enabled=info.rank == 0),
        preemption=preemption,
        args=rest,
        seed=train.seed,
        stop_after_steps=_stop_after_steps(),
        requested_attention=requested_attention,
    )
    for note in ctx.metrics.notes:
        ctx.print0(f"[runtime] {note}")
    ctx.print0(
        f"[runtime] world_size={info.world_size} backend={info.backend or 'none'} device={info.device} "
        f"precision={precision.name} seed={train.seed} job_dir={job_dir}"
    )
    return ctx


def run_entrypoint(main: Callable[[RunContext], int | None], argv: Sequence[str] | None = None) -> NoReturn:
    """``python -m`` glue: set up, run ``main(ctx)``, close; a GputrainError becomes one ``error:`` line."""
    try:
        ctx = setup_run(argv)
    except GputrainError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    try:
        code = main(ctx) or 0
    except GputrainError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
        ctx.metrics.close()
        sys.exit(code)
    ctx.close()
    sys.exit(code)
