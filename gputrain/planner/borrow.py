"""A GPU without its own profile borrows the nearest one by memory, without changing the training.

Scaling the micro-batch by the memory ratio alone used to change the global batch (and with it the learning
rate and the step count): ``plan bd3lm_gsm8k --gpu H100`` trained 288 samples per step instead of 512. Now
the micro-batch shrinks to the largest divisor of the per-GPU batch that fits the ratio and gradient
accumulation makes up the rest, so the global batch stays the recipe's. RL recipes count their work in
prompts (``algorithm.train_batch_size``); where a recipe leaves that to the micro-batch, it is pinned to the
owner profile's value before the micro-batch changes. A ``--set train.batch_size`` wins over all of this.
"""

from __future__ import annotations

from gputrain.contract.hardware import GPUFacts
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, max(1, min(n, at_most)) + 1) if n % d == 0)


def resize_borrowed(recipe: Recipe, owner: GPUFacts, gpu: GPUFacts, world: int,
                    provenance: dict[str, str]) -> tuple[Recipe, str]:
    """``recipe`` (merged with ``owner``'s profile) resized for ``gpu``; the note says what changed."""
    if provenance.get("train.batch_size") == "--set":
        return recipe, "train.batch_size as given with --set"
    ratio = gpu.memory_gib / owner.memory_gib if owner.memory_gib else 1.0
    train, algo = recipe.train, recipe.algorithm
    micro = max(1, int(train.batch_size * ratio))
    label = f"borrowed:{owner.name}"
    if isinstance(algo, GRPOAlgorithm):
        update: dict[str, object] = {}
        note = f"micro-batch {train.batch_size} → {micro} (memory ratio {ratio:.2f})"
        if algo.train_batch_size is None:
            from gputrain.planner.workload_rl import step_prompts

            prompts, _ = step_prompts(algo, train.batch_size, world)
            update["algorithm"] = algo.model_copy(update={"train_batch_size": prompts})
            provenance["algorithm.train_batch_size"] = label
            note += f"; {prompts} prompts per step kept"
        update["train"] = train.model_copy(update={"batch_size": micro})
        provenance["train.batch_size"] = label
        return recipe.model_copy(update=update), note
    if micro >= train.batch_size:
        return recipe, f"micro-batch {train.batch_size} kept (memory ratio {ratio:.2f}; `plan --fit` may raise it)"
    per_rank = train.batch_size * train.grad_accum
    micro = _largest_divisor(per_rank, micro)
    accum = per_rank // micro
    provenance["train.batch_size"] = provenance["train.grad_accum"] = label
    resized = recipe.model_copy(update={"train": train.model_copy(update={"batch_size": micro, "grad_accum": accum})})
    return resized, (f"micro-batch {train.batch_size} → {micro} with grad accumulation {train.grad_accum} → {accum} "
                     f"(memory ratio {ratio:.2f}): the global batch stays {per_rank * world} and the training is "
                     "the recipe's (--set train.batch_size=N changes it)")
