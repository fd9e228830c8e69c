"""The planner's call of the one kernel resolver (``gputrain.contract.kernels``), with the catalog's facts.

The plan then predicts the path that will run (attention kernel, compile, precision) and records it with the
reason (``JobPlan.kernels``); the trainer makes the same call with the facts of its node.
"""

from __future__ import annotations

from gputrain.contract.hardware import GPUFacts
from gputrain.contract.kernels import DeviceFacts, KernelChoice, KernelError, KernelRequest, MaskKind, resolve
from gputrain.recipe.schema import Recipe

#: entrypoints whose attention mask is the block-diffusion one (FlexAttention's case)
BLOCK_MASK_ENTRYPOINTS = ("bd3lm", "hdp")


def catalog_facts(gpu: GPUFacts) -> DeviceFacts:
    return DeviceFacts(device="cpu" if gpu.is_cpu else "cuda", name=gpu.name, bf16=gpu.bf16, source="catalog")


def plan_kernels(recipe: Recipe, gpu: GPUFacts) -> KernelChoice | None:
    """The resolver's choice for ``recipe`` on ``gpu`` (None where the request cannot run there at all: the
    precision check elsewhere refuses it with its own message)."""
    mask: MaskKind = "block" if recipe.entrypoint in BLOCK_MASK_ENTRYPOINTS else "causal"
    precision = recipe.train.precision
    try:
        return resolve(KernelRequest(attention=recipe.train.attention, compile=recipe.train.compile,
                                     precision=precision, mask=mask), catalog_facts(gpu))
    except KernelError:
        return None


def diffusion_loss_kernel(recipe: Recipe, choice: KernelChoice | None, gpu: GPUFacts) -> str:
    """The head + loss path a block-diffusion trainer runs: ``algorithm.loss_kernel``, except that
    ``compiled`` runs only where the blocks compile on a GPU (``trainer.py``; ``compiled_ce.head_cross_entropy``)
    and is the eager ``torch`` loss elsewhere. ``torch`` for a recipe without the diffusion algorithm."""
    kernel = str(getattr(recipe.algorithm, "loss_kernel", "torch"))
    if kernel == "compiled" and not (choice is not None and choice.compile and not gpu.is_cpu):
        return "torch"
    return kernel
