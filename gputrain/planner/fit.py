"""``plan --fit``: the largest per-GPU micro-batch whose *upper* memory bound fits, the global batch kept.

Why the upper bound: a plan's memory is a sum of terms, some exact byte counts (parameters, a configured
vLLM reservation), some formulas checked against a measurement, some only assumed
(``gputrain.planner.memory.BASIS_RANGE``). Advice taken at the central figure ran out of memory on the
H200 sheet (``reference/gpu-h200-2026-11-26.md``: the H100 plan of ``bd3lm_gsm8k`` advised batch 139,
which needs 111 GiB). So the search keeps ``margin`` of the device free of the *high* end of the range,
and says which terms were assumed.

Only the micro-batch (``train.batch_size``) and gradient accumulation change: the global batch, and so the
learning rate and the training itself, stay the recipe's. For RL the micro-batch never changes the step's
work (``algorithm.train_batch_size`` prompts), so accumulation is not touched; when even micro-batch 1
does not fit beside a colocated vLLM engine, the vLLM share is lowered, never below what vLLM itself needs
(``gputrain.planner.vllm_fit``); beside SGLang (plan-only), its ``mem_fraction_static`` is, never below weights +
one sequence (``gputrain.planner.sglang_fit``).
"""

from __future__ import annotations

from collections.abc import Callable

from gputrain.contract.estimate import FitSuggestion, MemoryTerm
from gputrain.planner import sglang_fit
from gputrain.planner.memory import BASIS_RANGE, RL_ENTRYPOINTS, memory_terms, peak_range
from gputrain.planner.vllm_fit import minimum_share
from gputrain.planner.workload import Hardware
from gputrain.planner.workload_rl import rl_shape
from gputrain.recipe.schema import Recipe

FIT_MARGIN = 0.1


def _changed(recipe: Recipe, batch: int, accum: int, share: float | None,
             field: str = "vllm_gpu_memory_utilization") -> Recipe:
    return recipe.model_copy(update={
        "train": recipe.train.model_copy(update={"batch_size": batch, "grad_accum": accum}),
        "memory": recipe.memory.model_copy(update={field: share}),
    })


def _largest(candidates: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest candidate that fits (memory is monotone in the micro-batch): binary search."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(candidates[mid]):
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    return best


def _assumed(terms: list[MemoryTerm]) -> list[str]:
    return [t.name for t in terms if t.scales_with_batch and t.basis == "assumed"]


def fit_suggestion(recipe: Recipe, hw: Hardware, margin: float = FIT_MARGIN) -> FitSuggestion:
    limit = hw.gpu.memory_gib * (1 - margin)
    rl = recipe.entrypoint in RL_ENTRYPOINTS
    per_rank = recipe.train.batch_size * recipe.train.grad_accum

    def accum_for(batch: int) -> int:
        return recipe.train.grad_accum if rl else per_rank // batch

    sglang = rl and rl_shape(recipe, hw).engine == "sglang"
    field = "sglang_mem_fraction_static" if sglang else "vllm_gpu_memory_utilization"

    def high(batch: int, share: float | None) -> float:
        return peak_range(memory_terms(_changed(recipe, batch, accum_for(batch), share, field), hw))[1]

    if rl:
        shape = rl_shape(recipe, hw)
        per_update = max(1, shape.seqs // shape.updates)
        candidates = list(range(1, max(per_update, recipe.train.batch_size) + 1))
    else:  # divisors of the per-rank batch: micro × accumulation stays the recipe's
        candidates = [b for b in range(1, per_rank + 1) if per_rank % b == 0]
    share = shape.share if sglang else recipe.memory.vllm_gpu_memory_utilization
    engine = "SGLang" if sglang else "vLLM"
    overrides: list[str] = []
    if rl and shape.engine in ("vllm", "sglang") and share is not None and high(1, share) > limit:
        floor = sglang_fit.least_share(recipe, hw) if sglang else minimum_share(recipe, hw)
        options = [round(share - 0.05 * k, 2) for k in range(1, 20) if share - 0.05 * k >= floor - 1e-9]
        share = next((s for s in options if high(1, s) <= limit), None)
        if share is None:
            return FitSuggestion(margin=margin, note=f"no micro-batch fits, even with the least {engine} share that "
                                 f"holds its weights and one sequence ({floor:.2f}): shard (fsdp), recompute "
                                 "activations, or use a larger GPU")
        overrides.append(f"memory.{field}={share:g}")
    best = _largest(candidates, lambda b: high(b, share) <= limit)
    if best is None:
        return FitSuggestion(margin=margin, note="even train.batch_size=1 does not fit with the margin: shard "
                             "(fsdp), recompute activations (train.gradient_checkpointing=true), or use a larger GPU")
    accum = accum_for(best)
    terms = memory_terms(_changed(recipe, best, accum, share, field), hw)
    low_gib, high_gib = peak_range(terms)
    overrides.insert(0, f"train.batch_size={best}")
    if not rl:  # always both: a --set micro-batch stops a borrowed profile's resizing of the accumulation
        overrides.insert(1, f"train.grad_accum={accum}")
    assumed = _assumed(terms)
    lo_x, hi_x = BASIS_RANGE["assumed"]
    sure = (f"{', '.join(assumed)} assumed (not yet checked against a measurement: ×{lo_x:g}-{hi_x:g})"
            if assumed else "every batch-sized term measured or exact")
    kept = ("the step's prompts unchanged" if rl
            else f"global batch {per_rank * hw.world} kept (micro {best} × accum {accum} × {hw.world} GPU(s))")
    note = (f"{kept}; predicted {low_gib:.1f}-{high_gib:.1f} GiB, the upper bound with {margin:.0%} of "
            f"{hw.gpu.memory_gib:g} GiB left free; {sure}")
    return FitSuggestion(batch_size=best, grad_accum=accum, margin=margin,
                         vllm_gpu_memory_utilization=None if sglang else share,
                         overrides=overrides, memory_gib=(round(low_gib, 2), round(high_gib, 2)),
                         confidence="assumed" if assumed else "measured", note=note)
