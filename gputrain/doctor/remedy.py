"""One remedy per root cause, computed from the job's plan and what the job measured.

A remedy is data: a one-line ``text`` a person reads, the ``--set`` overrides that apply it, flags for the
rerun (``--debug``), and the figures it was computed from, so a test (or a sceptical user) can check the
arithmetic. Nothing here guesses a number the job did not give: without a plan or a measurement the remedy
says what is missing instead.

CUDA OOM: the planner's memory model predicted ``P(b)`` GiB at the failed batch ``b``; the OOM message says
the process needed at least ``in_use + tried`` GiB. The model is scaled by ``k = max(1, needed / P(b))``
(it was optimistic by that much on this job), and the remedy is the largest batch ``b'`` dividing the
global batch with ``k · P(b') ≤ margin · capacity``, grad accumulation raised so the global batch (and so
the learning rate and the curve) stays exactly the same. Only when batch 1 does not fit is activation
checkpointing turned on, and past that the largest memory term is named.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

#: Share of the GPU a remedy plans to fill: the allocator's fragmentation and the model's error need room.
MEMORY_MARGIN = 0.9
#: Head room on the time a TIMEOUT needed: start-up, evaluation and checkpoint writes are not in the step rate.
TIME_MARGIN = 1.2
TIME_FLOOR_S = 600  # start-up, data loading, the final evaluation and checkpoint: at least 10 minutes
_PLAIN = re.compile(r"\A[A-Za-z0-9_.:/+-]+\Z")


#: Causes no recipe setting fixes, each with what a person does about it.
_WITHOUT_A_SETTING = {
    "disk_full": "the disk filled up (no space left, or the quota reached) while writing, most often a checkpoint: "
                 "free disk space or point the output/checkpoint folder at a larger volume, and keep fewer "
                 "checkpoints; rerun (it resumes from the newest complete checkpoint)",
    "gpu_hardware": "a GPU hardware fault (uncorrectable ECC error, Xid, GPU fallen off the bus): nothing in the job "
                    "causes it; rerun on another node or GPU (exclude this node) and report it to the admins",
    "shm": "the data loader's workers ran out of shared memory (/dev/shm, where they pass batches): give the "
           "container more (docker --shm-size, a larger /dev/shm) or lower train.num_workers",
    "cuda_error": "a CUDA kernel fault (illegal memory access or a device-side assert, most often an index out of "
                  "range: a label or token id past the number of classes or the vocabulary): rerun with "
                  "CUDA_LAUNCH_BLOCKING=1 (--set env.CUDA_LAUNCH_BLOCKING=1) so the error names the operation that "
                  "failed, and check the data's ids",
    "cuda_setup": "the CUDA stack does not fit this machine (the NVIDIA driver older than the CUDA runtime the "
                  "build needs, no kernel for this GPU's architecture, or the CUDA libraries not found): update the "
                  "NVIDIA driver, or install the build made for the driver's CUDA version and this GPU (nvidia-smi "
                  "shows both); no training setting fixes it",
    "cuda_init": "cuBLAS/cuDNN could not create its handle, which it allocates GPU memory for: most often the GPU's "
                 "memory was already full (another process on the GPU — see nvidia-smi — or this run's own tensors): "
                 "free the GPU or lower the micro-batch (train.batch_size); if memory was free, the CUDA libraries "
                 "do not match the build",
    "kv_cache": "the inference engine (vLLM, SGLang) found no GPU memory left for its KV cache after loading the "
                "weights: raise its memory share (vLLM gpu_memory_utilization, SGLang --mem-fraction-static) if the "
                "GPU is not shared, else lower max_model_len / max_num_seqs, or spread the model over more GPUs "
                "(tensor_parallel_size)",
    "dist_setup": "the distributed job's processes never met at the rendezvous: check the rendezvous endpoint and "
                  "port (MASTER_ADDR:MASTER_PORT, torchrun --rdzv-endpoint) is reachable from every node (firewall, "
                  "the right interface) and free, that every node started with the same --nnodes and rendezvous "
                  "id, and raise the rendezvous timeout (--rdzv-conf timeout=…, init_process_group timeout) if a "
                  "node starts late",
    "network": "a model or data set was to be downloaded with no network to reach it (compute nodes are often "
               "offline) and it is not in the local cache: download it beforehand where there is network "
               "(huggingface-cli download), then run offline (HF_HUB_OFFLINE=1) or point at the local path",
    "kernel_resources": "a GPU kernel (Triton, torch.compile) asked for more shared memory or registers per block "
                        "than this GPU has, most often a block size or num_stages tuned for a larger GPU: lower "
                        "the kernel's block sizes or num_stages, or turn off max-autotune",
}


@dataclass
class Remedy:
    kind: str  # the root cause's kind (cuda_oom, time_limit, ...)
    text: str  # one line: what to change and why
    overrides: list[str] = field(default_factory=list)  # ``a.b=value`` for --set
    flags: list[str] = field(default_factory=list)  # extra CLI flags for the rerun (``--debug``)
    figures: dict[str, Any] = field(default_factory=dict)  # what the remedy was computed from
    resume: bool = True  # the rerun continues from the job's newest checkpoint

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prescribe(summary: dict[str, Any], plan: JobPlan | None) -> Remedy | None:
    """The remedy for the summary's root cause, or None when the job did not fail (or nothing is known)."""
    cause = summary.get("root_cause")
    if not isinstance(cause, dict):
        return None
    kind = str(cause.get("kind") or "")
    if kind in ("cuda_oom", "device_oom"):
        return _cuda_oom(cause, plan) if plan is not None or kind == "cuda_oom" else _no_plan_oom(cause)
    if kind == "fp16_overflow":
        return Remedy(kind, "fp16 overflowed until the loss scale hit its minimum (the loss or gradients went "
                      "Inf/NaN): train in bf16 (train.precision=bf16) where the GPU has it, else lower the learning "
                      "rate or clip gradients; resume from a checkpoint before the divergence")
    if kind == "time_limit":
        return _time_limit(summary, plan)
    if kind == "host_oom":
        return _host_oom(plan)
    if kind in ("nccl_timeout", "nccl"):
        return _nccl(cause, kind)
    if kind == "node_fail":
        host = cause.get("host")
        return Remedy(kind, f"a node{f' ({host})' if host else ''} failed: rerun as is; it resumes from the newest "
                      "checkpoint (ask the admins about the node if it fails again)")
    if kind == "preempted":
        return _preempted(summary, plan)
    if kind == "cancelled":
        return None  # the user stopped it: nothing to fix
    if kind in _WITHOUT_A_SETTING:
        return Remedy(kind, _WITHOUT_A_SETTING[kind],
                      overrides=["env.CUDA_LAUNCH_BLOCKING=1"] if kind == "cuda_error" else [])
    where = f" on rank {cause['rank']}" if cause.get("rank") is not None else ""
    return Remedy(kind, f"{cause.get('label') or kind}{where}: no setting fixes this; correct the cause shown in "
                  "the headline and traceback, then rerun (it resumes from the newest checkpoint)")


def _cuda_oom(cause: dict[str, Any], plan: JobPlan | None) -> Remedy:
    details = cause.get("details") or {}
    capacity = details.get("capacity_gib") or (plan.estimate.capacity_gib if plan is not None else None)
    used = details.get("in_use_gib") or details.get("allocated_gib")
    if used is None and capacity is not None and details.get("free_gib") is not None:
        used = capacity - details["free_gib"]
    needed = (used or 0.0) + (details.get("tried_gib") or 0.0) or None
    if plan is None:
        return _no_plan_oom(cause, {"needed_gib": needed, "capacity_gib": capacity})
    train = plan.recipe.train
    predicted = plan.estimate.memory_gib_per_gpu
    capacity = capacity or plan.estimate.capacity_gib
    scale = max(1.0, needed / predicted) if needed and predicted else 1.0
    figures: dict[str, Any] = {"capacity_gib": capacity, "needed_gib": needed, "predicted_gib": predicted,
                               "model_scale": round(scale, 3), "batch_size": train.batch_size,
                               "grad_accum": train.grad_accum, "margin": MEMORY_MARGIN}
    global_micro = train.batch_size * train.grad_accum
    ceiling = MEMORY_MARGIN * capacity

    def settings(batch: int, checkpointing: bool) -> list[str]:
        out = [f"train.batch_size={batch}", f"train.grad_accum={math.ceil(global_micro / batch)}"]
        return out + (["train.gradient_checkpointing=true"] if checkpointing and not train.gradient_checkpointing
                      else [])

    def expected(batch: int, checkpointing: bool) -> float | None:
        memory = _predicted_memory(plan, settings(batch, checkpointing))
        return None if memory is None else scale * memory

    for checkpointing in ([False, True] if not train.gradient_checkpointing else [True]):
        # Batches that divide the global batch keep it (and the learning rate, and the curve) exactly.
        # Memory grows with the batch: the largest that fits, by bisection over the sorted candidates.
        top = train.batch_size - (1 if checkpointing == train.gradient_checkpointing else 0)
        sizes = [b for b in range(1, top + 1) if global_micro % b == 0]
        low_need = expected(1, checkpointing) if sizes else None
        if low_need is None or low_need > ceiling:
            continue
        lo, hi = 0, len(sizes) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            need = expected(sizes[mid], checkpointing)
            lo, hi = (mid, hi) if need is not None and need <= ceiling else (lo, mid - 1)
        lo = sizes[lo]
        batch, memory = lo, expected(lo, checkpointing) or 0.0
        accum = math.ceil(global_micro / batch)
        figures |= {"new_expected_gib": round(memory, 3), "new_predicted_gib": round(memory / scale, 3)}
        same = " (global batch unchanged)"
        extra = ", with activation checkpointing" if checkpointing and not train.gradient_checkpointing else ""
        return Remedy("cuda_oom", f"CUDA out of memory at batch {train.batch_size} per GPU: batch {batch} × "
                      f"grad_accum {accum}{extra}{same} is expected to need {memory:.1f} of {capacity:.1f} GiB",
                      overrides=settings(batch, checkpointing), figures=figures)
    terms = plan.estimate.memory_breakdown
    largest = max(terms, key=lambda k: terms[k]) if terms else "unknown"
    return Remedy("cuda_oom", f"CUDA out of memory even at batch 1 with activation checkpointing: the largest term is "
                  f"{largest} ({terms.get(largest, 0.0):.1f} GiB); shard it (distributed.strategy=fsdp) or use a "
                  "GPU with more memory (gputrain plan --compare)", figures=figures)


def _no_plan_oom(cause: dict[str, Any], figures: dict[str, Any] | None = None) -> Remedy:
    """A device OOM with no plan to compute from: the three levers, in the order that changes the run least."""
    what = "CUDA out of memory" if cause.get("kind") == "cuda_oom" else "out of accelerator memory"
    return Remedy(str(cause.get("kind") or "cuda_oom"),
                  f"{what}: halve the micro-batch (train.batch_size) and double train.grad_accum (same global batch), "
                  "turn on gradient checkpointing (train.gradient_checkpointing=true), or let the planner pick a batch "
                  "that fits: gputrain plan RECIPE --gpu GPU --fit (no plan.json here to compute by how much)",
                  figures=figures or {})


def _predicted_memory(plan: JobPlan, overrides: list[str]) -> float | None:
    """The planner's memory per GPU for the job's own plan with ``overrides`` added."""
    from gputrain.errors import GputrainError
    from gputrain.planner import make_plan

    try:
        replanned = make_plan(plan.recipe_path, gpu=plan.gpu.name, gpus_per_node=plan.gpus_per_node,
                              nodes=plan.nodes, cluster=plan.cluster.name if plan.cluster else None,
                              overrides=[*original_overrides(plan), *overrides], preset=plan.preset,
                              target=plan.target, check_memory=False)
    except GputrainError:
        return None
    return replanned.estimate.memory_gib_per_gpu


def _time_limit(summary: dict[str, Any], plan: JobPlan | None) -> Remedy:
    steps = summary.get("steps") or {}
    done, planned = steps.get("done"), steps.get("planned") or (plan.estimate.total_steps if plan else None)
    rate = summary.get("steps_per_hour")
    if not rate and done and summary.get("duration_s"):
        rate = done / (float(summary["duration_s"]) / 3600)
    if not (done and planned and rate):
        return Remedy("time_limit", "stopped at its time limit: rerun with a longer resources.time (sbatch --time), "
                      "or save checkpoints often and let Slurm requeue it (--requeue; it resumes from the newest "
                      "checkpoint); no measured step rate in this log to say how long")
    left = max(0, int(planned) - int(done))
    seconds = max(TIME_FLOOR_S, left / float(rate) * 3600 * TIME_MARGIN)
    seconds = math.ceil(seconds / 900) * 900  # whole quarter hours
    figures = {"steps_done": done, "steps_planned": planned, "steps_per_hour": round(float(rate), 2),
               "seconds_needed": seconds}
    limit = plan.cluster.max_time if plan is not None and plan.cluster is not None else None
    if limit:
        # here, not at module level: render.sbatch brings the cluster and asset contracts (~40 ms) that every
        # other remedy, and `gputrain logs --summary`, does without
        from gputrain.render.sbatch import time_seconds
    if limit and seconds > time_seconds(limit):
        parts = math.ceil(seconds / time_seconds(limit))
        return Remedy("time_limit", f"{left} steps left at {rate:.0f} steps/h need ~{_hms(seconds)}, more than the "
                      f"cluster's {limit}: run {parts} jobs of {limit} (each resumes from the last checkpoint)",
                      overrides=[f"resources.time={limit}"], figures=figures | {"jobs": parts})
    return Remedy("time_limit", f"{left} steps left at {rate:.0f} steps/h (measured): resources.time={_hms(seconds)} "
                  f"(+{round((TIME_MARGIN - 1) * 100)} % margin) finishes the run",
                  overrides=[f"resources.time={_hms(seconds)}"], figures=figures)


def _host_oom(plan: JobPlan | None) -> Remedy:
    current = None
    if plan is not None:
        current = plan.recipe.resources.memory_gb or (plan.cluster.memory_gb if plan.cluster else None)
    if current:
        more = math.ceil(current * 1.5)
        return Remedy("host_oom", f"the host ran out of memory (the OOM killer): ask for {more} GB per node "
                      f"instead of {current} (resources.memory_gb), or lower data loader workers",
                      overrides=[f"resources.memory_gb={more}"], figures={"memory_gb": current})
    return Remedy("host_oom", "the host ran out of memory (the OOM killer): ask for more host memory "
                  "(resources.memory_gb, sbatch --mem), or lower data loader workers (train.num_workers) and "
                  "train.batch_size")


def _nccl(cause: dict[str, Any], kind: str) -> Remedy:
    where = ", ".join(x for x in (f"rank {cause['rank']}" if cause.get("rank") is not None else "",
                                  f"host {cause['host']}" if cause.get("host") else "") if x)
    details = cause.get("details") or {}
    what = f"NCCL {details['collective']} timed out" if details.get("collective") else "NCCL failed"
    said = f"{cause.get('headline') or ''} {cause.get('evidence') or ''}"
    if "NET/IB" in said or "ibv_" in said:  # NCCL's InfiniBand/RoCE transport itself failed: the fabric, not a rank
        text = ("the NICs could not reach each other: check the links and the fabric (ibstat, ibv_devinfo, the "
                "HCAs NCCL_IB_HCA names, RoCE's NCCL_IB_GID_INDEX), or rerun with NCCL_IB_DISABLE=1 to confirm over "
                "TCP; rerun with --debug for NCCL's own account")
        return Remedy(kind, f"NCCL's InfiniBand/RoCE transport failed{f' on {where}' if where else ''}: {text}",
                      flags=["--debug"], figures={"rank": cause.get("rank"), "host": cause.get("host"), **details})
    return Remedy(kind, f"{what}{f' on {where}' if where else ''}: a rank stalled or died; rerun with --debug "
                  "(NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG=DETAIL) to see which, and avoid that node if it repeats",
                  flags=["--debug"], figures={"rank": cause.get("rank"), "host": cause.get("host"), **details})


def _preempted(summary: dict[str, Any], plan: JobPlan | None) -> Remedy:
    result = summary.get("result") or {}
    restarts = result.get("restart_count") if isinstance(result, dict) else None
    limit = plan.cluster.max_requeues if plan is not None and plan.cluster is not None else None
    text = f"preempted{f' (resumed {restarts} time(s) so far)' if restarts is not None else ''}: "
    text += "nothing to change; " + (f"Slurm requeues it up to {limit} times, then rerun to continue"
                                     if limit is not None else "rerun to continue from the newest checkpoint")
    return Remedy("preempted", text, figures={"restarts": restarts, "max_requeues": limit})


def original_overrides(plan: JobPlan) -> list[str]:
    """The ``--set`` overrides the job was planned with, read back from the plan's provenance."""
    data = plan.recipe.model_dump(mode="json")
    out = []
    for dotted, layer in sorted(plan.provenance.items()):
        if layer != "--set":
            continue
        value: Any = data
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out.append(f"{dotted}={_literal(value)}")
    return out


def _literal(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and _PLAIN.match(value):
        return value
    return json.dumps(value)


def _hms(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text
