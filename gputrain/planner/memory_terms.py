"""Building blocks of the memory model: a term with its basis, and the model states per the layout that runs.

Model states (``gputrain.planner.parallel.Layout``): fp32 master weights, fp32 gradients and AdamW's two
fp32 moments (16 B per trainable parameter) split by tensor/pipeline parallelism and sharded as the
strategy really shards them; FSDP2 as the project's trainer runs it keeps full-size unsharded gradients in
the compute dtype while accumulating micro-batches; ZeRO-2/3 reduce-scatter after each micro-batch and
do not. ZeRO-3 under torch FSDP keeps the fp32 parameters only (cast per unit on all-gather); DeepSpeed's
ZeRO-3 and Megatron keep a compute-dtype copy too. Under DDP with half precision, autocast caches a half copy
of every weight it casts. CPU offload moves the fp32 weights and the optimizer to the host and keeps a
compute-dtype copy on the GPU. LoRA keeps the frozen weights in the compute dtype (in fp32 under torch FSDP
full-shard, which shards the model as loaded) and states only for the adapters.
"""

from __future__ import annotations

from gputrain.contract.estimate import MemoryTerm
from gputrain.planner import physics
from gputrain.planner.parallel import Layout
from gputrain.planner.workload import Hardware
from gputrain.recipe.schema import Recipe

GIB = physics.GIB
#: terms that are byte counts of parameters or a configured reservation (everything else is a formula)
_EXACT = frozenset({"weights", "master_weights", "gradients", "optimizer", "autocast_weights", "fsdp_unsharded_grads",
                    "reference_model", "vllm_share", "fsdp_buffers", "unsharded_weights", "frozen_weights"})
#: (low, high) multipliers of a term by its basis. ``assumed``: a formula not yet checked against a
#: measurement; its high end covers the worst under-prediction of such terms on the H200 sheet
#: (``reference/gpu-h200-2026-11-26.md``: 1.52-1.61× on block diffusion, 1.42× on 0.5B GRPO).
BASIS_RANGE = {"exact": (1.0, 1.02), "measured": (0.9, 1.1), "assumed": (0.75, 1.65)}


def _term(name: str, nbytes: float, knob: str = "", *, phase: str = "persistent", batch: bool = False,
          note: str = "", basis: str | None = None) -> MemoryTerm:
    chosen = basis or ("exact" if name in _EXACT else "assumed")
    return MemoryTerm(name=name, gib=nbytes / GIB, knob=knob, phase=phase,  # type: ignore[arg-type]
                      scales_with_batch=batch, note=note, basis=chosen)  # type: ignore[arg-type]


def grad_bytes(recipe: Recipe, hw: Hardware) -> int:
    """Bytes of one gradient: fp32, or the compute dtype under a distributed optimizer that reduces in it
    (``distributed.grads_in_fp32: false``, Megatron's ``grad_reduce_in_fp32: false``)."""
    if recipe.distributed.sharding != "auto" and not recipe.distributed.grads_in_fp32:
        return physics.half_bytes(hw.precision)
    return 4


def state_terms(recipe: Recipe, hw: Hardware, params: float, lay: Layout) -> list[MemoryTerm]:
    half = physics.half_bytes(hw.precision)
    mp = lay.model_parallel
    cut = "" if lay.sharded else "distributed.strategy=fsdp"
    trainable = lay.trainable / mp
    terms: list[MemoryTerm] = []
    if recipe.model.lora_rank:
        # torch FSDP full-shard of a model loaded in fp32 (prime-rl's optimization_dtype, verl's actor) keeps
        # the frozen base sharded in fp32 too, cast per unit on all-gather; TRL/peft load it in the compute dtype
        fp32_shard = lay.sharding == "zero3" and recipe.distributed.strategy == "fsdp"
        terms.append(_term("frozen_weights", (4 if fp32_shard else half) * params / mp / lay.weights_shard, cut,
                           note="frozen base weights " + ("in fp32, sharded (FSDP full-shard of an fp32 model)"
                                                          if fp32_shard else "in the compute dtype") + " (LoRA)"))
    if lay.sharding != "auto" and not lay.offload:  # ZeRO / distributed optimizer: fp32 master with the moments
        zero3 = lay.sharding == "zero3"
        # torch FSDP full-shard stores the sharded parameters in fp32 and casts one unit at a time on all-gather
        # (FSDP1's low-precision shard is freed after the all-gather; FSDP2 keeps the sharded data in its
        # original dtype): no compute-dtype copy beside the fp32 one (verl's actor loads fp32, NeMo RL's DTensor
        # policy too). DeepSpeed ZeRO-3 and Megatron keep one.
        if not (zero3 and recipe.distributed.strategy == "fsdp"):
            terms.append(_term("weights", half * params / mp / (lay.dp if zero3 else 1), "distributed.sharding=zero3",
                               note="compute-dtype weights"))
        terms += [_term("master_weights", 4 * trainable / lay.optimizer_shard, note="fp32 master weights, sharded "
                        "with the optimizer" + (" (FSDP's own parameters, cast per unit on all-gather)"
                                                if zero3 and recipe.distributed.strategy == "fsdp" else "")),
                  _term("optimizer", 8 * trainable / lay.optimizer_shard, note="AdamW moments, fp32, sharded"),
                  _term("gradients", grad_bytes(recipe, hw) * trainable / lay.grads_shard, "distributed.sharding=zero2",
                        note=("fp32" if recipe.distributed.grads_in_fp32 else "compute-dtype") + " gradients"
                        + (", reduce-scattered per micro-batch" if lay.grads_shard > 1 else ""))]
        return terms
    if lay.offload:
        terms.append(_term("weights", half * trainable / lay.weights_shard, note="compute-dtype weights on the "
                           "GPU; fp32 master weights and AdamW moments offloaded to the host"))
    else:
        terms += [_term("weights", 4 * trainable / lay.weights_shard, cut, note="fp32 master weights"),
                  _term("optimizer", 8 * trainable / lay.optimizer_shard, cut, note="AdamW moments, fp32")]
    terms.append(_term("gradients", 4 * trainable / lay.grads_shard, cut, note="fp32 gradients"))
    if not lay.sharded and half == 2 and not recipe.model.lora_rank:
        terms.append(_term("autocast_weights", 2 * params / mp, "distributed.strategy=fsdp", phase="train",
                           note="half copies cached by autocast"))
    return terms
