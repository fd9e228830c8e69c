"""Recipe fields the planner prices but the trainers do not run yet: ``plan`` accepts them, launching refuses.

One row per field: the dotted name and when a recipe's value asks for something the trainers lack. A field
leaves this table when its trainer implements it (``algorithm.sequence_packing`` left with the packed
RL passes of #27: ``train/grpo/packed_pass.py``). ``gputrain run``, ``submit`` and ``runpod up`` call
:func:`refuse_plan_only`.
"""

from __future__ import annotations

from collections.abc import Callable

from gputrain.errors import PlanError
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe


def _algo(recipe: Recipe) -> GRPOAlgorithm | None:
    return recipe.algorithm if isinstance(recipe.algorithm, GRPOAlgorithm) else None


PLAN_ONLY: tuple[tuple[str, Callable[[Recipe], bool]], ...] = (
    ("distributed.sharding", lambda r: r.distributed.sharding != "auto"),
    ("distributed.tensor_parallel", lambda r: r.distributed.tensor_parallel > 1),
    ("distributed.pipeline_parallel", lambda r: r.distributed.pipeline_parallel > 1),
    ("distributed.expert_parallel", lambda r: r.distributed.expert_parallel > 1),
    ("distributed.cpu_offload", lambda r: r.distributed.cpu_offload),
    ("distributed.grads_in_fp32", lambda r: not r.distributed.grads_in_fp32),
    ("model.lora_rank", lambda r: r.model.lora_rank is not None and _algo(r) is None),  # LoRA runs in the RL trainings
    ("algorithm.rollout_engine", lambda r: (a := _algo(r)) is not None and a.rollout_engine == "sglang"),
    ("algorithm.vllm_mode", lambda r: (a := _algo(r)) is not None and a.vllm_mode != "colocate"),
    ("algorithm.vllm_tensor_parallel_size", lambda r: (a := _algo(r)) is not None and a.vllm_tensor_parallel_size > 1),
    ("algorithm.vllm_enforce_eager", lambda r: (a := _algo(r)) is not None and a.vllm_enforce_eager),
    ("algorithm.vllm_max_num_seqs", lambda r: (a := _algo(r)) is not None and a.vllm_max_num_seqs is not None),
    ("algorithm.logits_in_place", lambda r: (a := _algo(r)) is not None and a.logits_in_place),
    ("algorithm.logprob_vocab_chunk", lambda r: (a := _algo(r)) is not None and a.logprob_vocab_chunk is not None),
    ("algorithm.off_policy_steps", lambda r: (a := _algo(r)) is not None and a.off_policy_steps > 0),
    ("algorithm.old_logprob_pass", lambda r: (a := _algo(r)) is not None and a.old_logprob_pass != "auto"),
    ("memory.offload_during_rollout", lambda r: r.memory.offload_during_rollout),
    ("memory.reference_on_host", lambda r: r.memory.reference_on_host),
    ("memory.activations_on_host", lambda r: r.memory.activations_on_host),
)


def plan_only_fields(recipe: Recipe) -> list[str]:
    return [name for name, asks in PLAN_ONLY if asks(recipe)]


def refuse_plan_only(recipe: Recipe) -> None:
    """One line naming the first field that only the planner understands."""
    fields = plan_only_fields(recipe)
    if fields:
        more = f" (and {', '.join(fields[1:])})" if len(fields) > 1 else ""
        raise PlanError(f"{fields[0]}{more} is plan-only: `gputrain plan` prices it, but the trainers do not "
                        "run it yet; remove it (or set it back to its default) to launch")
