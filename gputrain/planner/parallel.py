"""How the model states are laid out over the training GPUs: the strategy that will *run*, not the one named.

One home for what the memory and time models need to know about distribution:

- ``ddp`` (and ``none``): every rank holds everything;
- ``fsdp`` as the project's trainer runs it (FSDP2 ``fully_shard``, sharding ``auto``): weights, gradients
  and AdamW moments sharded over the data-parallel ranks, but while gradient sync is off (accumulation over
  micro-batches) each rank keeps *full-size unsharded* gradients until the last micro-batch;
- ``zero1``/``zero2``/``zero3`` (DeepSpeed ZeRO, verl's FSDP, Megatron's distributed optimizer): optimizer /
  + gradients / + weights sharded; gradients reduce-scattered after every micro-batch, so no full copy;
- ``deepspeed`` with sharding ``auto``: the trainers have no DeepSpeed engine and run DDP (the GRPO trainer
  says so in a warning), so it is planned as DDP, and the plan says it;
- tensor and pipeline parallelism split the model states by ``tp × pp`` and leave ``world / (tp × pp)``
  data-parallel ranks; CPU offload keeps the fp32 weights and the optimizer on the host;
- LoRA trains ``lora_rank`` adapters on the frozen model: the trainable parameters are
  ``rank × hidden × layers × 16`` (q, k, v, o, gate, up, down adapted; MLP width ~4× hidden), the frozen
  weights stay in the compute dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputrain.planner import physics
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe


@dataclass(frozen=True)
class Layout:
    train_world: int          # GPUs that train (server-mode rollout GPUs excluded)
    dp: int                   # data-parallel ranks
    model_parallel: int       # tp × pp (× ep): how far the model states are split
    weights_shard: int
    grads_shard: int
    optimizer_shard: int
    full_grads_while_accumulating: bool
    offload: bool
    trainable: float          # parameters with gradients and optimizer state
    label: str
    sharding: str = "auto"    # auto: the trainer's FSDP2/DDP; zero1/2/3: master weights sharded with the optimizer

    @property
    def sharded(self) -> bool:
        return self.weights_shard > 1


def rollout_gpus(recipe: Recipe, world: int) -> int:
    """GPUs given to a vLLM server (0: colocated or HF generate)."""
    algo = recipe.algorithm
    if isinstance(algo, GRPOAlgorithm) and algo.vllm_mode == "server":
        return min(world - 1, algo.rollout_gpus or max(1, world // 4)) if world > 1 else 0
    return 0


def lora_params(recipe: Recipe) -> float:
    model = recipe.model
    return float((model.lora_rank or 0) * (model.hidden_size or 0) * (model.num_layers or 0) * 16)


def layout(recipe: Recipe, world: int) -> Layout:
    dist = recipe.distributed
    train_world = max(1, world - rollout_gpus(recipe, world))
    mp = dist.tensor_parallel * dist.pipeline_parallel
    dp = max(1, train_world // mp)
    states_split = mp * dist.expert_parallel  # experts dominate a MoE's parameters: split them all by EP
    strategy = dist.strategy
    sharding = dist.sharding
    if strategy == "deepspeed" and sharding == "auto":
        strategy = "ddp"
    w = g = o = 1
    full_grads = False
    if dp > 1:
        if sharding == "auto" and strategy == "fsdp":
            w = g = o = dp
            full_grads = True
        elif sharding in ("zero1", "zero2", "zero3"):
            o = dp
            g = dp if sharding != "zero1" else 1
            w = dp if sharding == "zero3" else 1
    label = {"ddp": "DDP", "none": "one process", "fsdp": "FSDP2", "deepspeed": "DeepSpeed"}[strategy]
    if sharding != "auto":
        label += f" ({sharding.upper()}, gradients reduce-scattered per micro-batch)"
    elif full_grads:
        label += " (full unsharded gradients while accumulating)"
    if mp > 1 or dist.expert_parallel > 1:
        label += f", TP {dist.tensor_parallel} × PP {dist.pipeline_parallel} × EP {dist.expert_parallel}"
    trainable = lora_params(recipe) if recipe.model.lora_rank else physics.params_of(recipe.model)
    return Layout(train_world, dp, states_split, w, g, o, full_grads, dist.cpu_offload, trainable, label,
                  sharding)


def deepspeed_runs_as_ddp(recipe: Recipe) -> bool:
    return recipe.distributed.strategy == "deepspeed" and recipe.distributed.sharding == "auto"
