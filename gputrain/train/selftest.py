"""The smallest real distributed job: submit it first on any new cluster.

    torchrun --standalone --nproc_per_node 2 -m gputrain.train.selftest --plan JOB/plan.json --job-dir JOB
    gputrain submit recipes/selftest.yaml --cluster testbed --nodes 2 --gpus 1

Every rank reports rank/world/host; an all-reduce of known values (rank+1 summed, rank maxed) must give the
exact answer on every rank; then all-reduce bandwidth for ``algorithm.sizes_mib``. ``train.max_steps``
checked steps follow, ``algorithm.sleep_seconds`` spread over them, with a checkpoint after each step, so
the job can be cancelled or preempted mid-way and resumes where it stopped. ``algorithm.fail`` raises
after the checks (to test failure reporting). gloo on CPU, nccl on GPU (the runtime picks).
Writes ``result.json`` (ranks, hosts, checks, bandwidth, resume info) and ``metrics.jsonl``.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

from gputrain.errors import GputrainError
from gputrain.recipe.algorithms.selftest import SelftestAlgorithm
from gputrain.train.runtime import RunContext, run_entrypoint


def _gather(ctx: RunContext, obj: Any) -> list[Any]:
    if ctx.world_size == 1:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def _all_reduce(tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM)
    return tensor


def check_all_reduce(ctx: RunContext, step: int = 0) -> None:
    """Sum of (rank + 1 + step) and max of rank must be exact on every rank, or the job fails."""
    w = ctx.world_size
    mine = torch.full((1024,), float(ctx.rank + 1 + step), dtype=torch.float64, device=ctx.device)
    summed = _all_reduce(mine)
    expect = w * (w + 1) / 2 + w * step
    biggest = _all_reduce(torch.tensor([ctx.rank], device=ctx.device), dist.ReduceOp.MAX if w > 1 else None)
    if not bool(torch.all(summed == expect)) or int(biggest.item()) != w - 1:
        raise GputrainError(
            f"all-reduce wrong on rank {ctx.rank}: sum {summed[0].item()} (want {expect}), "
            f"max {int(biggest.item())} (want {w - 1})"
        )


def bandwidth(ctx: RunContext, sizes_mib: list[float], iterations: int) -> list[dict[str, float]]:
    """nccl-tests style: algbw = bytes/time, busbw = algbw * 2(w-1)/w."""
    results = []
    w = ctx.world_size
    for size in sizes_mib:
        n = max(1, int(size * (1 << 20) / 4))
        buf = torch.ones(n, dtype=torch.float32, device=ctx.device)
        _all_reduce(buf)  # warm-up (connection set-up)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            _all_reduce(buf)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
        algbw = n * 4 / seconds / 1e9
        busbw = algbw * (2 * (w - 1) / w if w > 1 else 1.0)
        results.append({"size_mib": size, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": busbw})
        ctx.print0(f"[selftest] all-reduce {size:g} MiB: {seconds * 1e3:.2f} ms, busbw {busbw:.3f} GB/s")
    return results


def _payload(ctx: RunContext, mib: float) -> torch.Tensor | None:
    """``mib`` MiB of random bytes, the same on every attempt of this rank (seeded by rank)."""
    if mib <= 0:
        return None
    gen = torch.Generator().manual_seed(7919 + ctx.rank)
    return torch.randint(0, 256, (int(mib * (1 << 20)),), dtype=torch.uint8, generator=gen)


def main(ctx: RunContext) -> int:
    algo = ctx.algorithm(SelftestAlgorithm)
    report = {
        "rank": ctx.rank, "world_size": ctx.world_size, "local_rank": ctx.local_rank,
        "host": socket.gethostname(), "pid": os.getpid(), "device": str(ctx.device),
        "slurm_node_id": os.environ.get("SLURM_NODEID"), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    reports = _gather(ctx, report)
    for r in reports:
        node = f"slurm node {r['slurm_node_id']}, " if r["slurm_node_id"] is not None else ""  # not under Slurm
        ctx.print0(f"[selftest] rank {r['rank']}/{r['world_size']} on {r['host']} ({node}pid {r['pid']}, "
                   f"{r['device']})")
    check_all_reduce(ctx)
    ctx.print0(f"[selftest] all-reduce correct on {ctx.world_size} rank(s)")
    with ctx.phase("all-reduce bandwidth"):
        bw = bandwidth(ctx, list(algo.sizes_mib), algo.iterations)

    total = ctx.recipe.train.max_steps or 1  # a recipe giving train.epochs only: one checked step
    pause = algo.sleep_seconds / total
    state: dict[str, Any] = {"checked": 0}
    payload = _payload(ctx, algo.checkpoint_mib)
    step, resumed_from = 0, None
    if (ckpt := ctx.checkpoints.restore(state)) is not None:
        step, resumed_from = ckpt.step, ckpt.step
        state["checked"] = ckpt.state["checked"]
        if payload is not None:  # the whole payload came back: the stop's save completed on every rank
            saved = ckpt.rank_state
            if saved is None or not torch.equal(saved["payload"], payload):
                raise GputrainError(f"rank {ctx.rank}: checkpoint payload of step {step} is not what was saved")
        ctx.print0(f"[selftest] resumed from checkpoint at step {step}")
    rank_state = {"payload": payload} if payload is not None else None  # only in the stop's checkpoint
    steps_this_run = 0
    while step < total:
        check_all_reduce(ctx, step)
        time.sleep(pause)
        step += 1
        steps_this_run += 1
        state["checked"] += 1
        ctx.metrics.log(step, allreduce_ok=1, busbw_gbps=bw[-1]["busbw_gbps"] if bw else 0.0)
        ctx.print0(f"[selftest] step {step}/{total} ok")
        if ctx.should_stop():
            ctx.exit_for_requeue(step, state, rank_state=rank_state)
        ctx.checkpoints.save(step, state)

    if algo.fail:
        raise RuntimeError("selftest failing on purpose (algorithm.fail: true)")
    ctx.write_json("result.json", {
        "ok": True, "world_size": ctx.world_size, "ranks": reports,
        "hosts": sorted({r["host"] for r in reports}),
        "slurm_node_ids": sorted({str(r["slurm_node_id"]) for r in reports}),
        "bandwidth": bw, "steps": step, "checked_steps": state["checked"], "steps_this_run": steps_this_run,
        "resumed_from_step": resumed_from, "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
    })
    ctx.print0(f"[selftest] OK: {ctx.world_size} rank(s), {step} step(s)")
    return 0


if __name__ == "__main__":
    run_entrypoint(main)
