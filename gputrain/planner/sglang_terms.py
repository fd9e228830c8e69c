"""SGLang's memory terms on a training GPU it shares (``algorithm.rollout_engine=sglang``, colocated).

The static share (weights + KV pool, ``sglang_fit``) is one exact term, alive only while generating where the
run releases it for training (``algorithm.vllm_sleep_mode``: slime's and verl's ``release_memory_occupation``,
which frees the weights and KV cache through torch_memory_saver); the runtime it keeps outside the share
(req_to_token pool, one prefill chunk's activations, the CUDA-graph pool) is a second, persistent, term.
"""

from __future__ import annotations

from gputrain.contract.estimate import MemoryTerm
from gputrain.planner import physics, sglang_fit
from gputrain.planner.memory_terms import _term
from gputrain.planner.workload import Hardware
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe


def sglang_terms(recipe: Recipe, hw: Hardware, share: float) -> list[MemoryTerm]:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    asleep = algo.vllm_sleep_mode
    req_to_token, chunk, graphs = sglang_fit.runtime_bytes(recipe, hw, share)
    tp = sglang_fit.tp_size(recipe)
    return [
        _term("sglang_static", share * hw.gpu.memory_gib * physics.GIB, "memory.sglang_mem_fraction_static",
              phase="rollout" if asleep else "persistent", basis="exact",
              note=f"SGLang weights + KV pool: mem_fraction_static {share:g} of device memory"
              + (f", tensor parallel {tp}" if tp > 1 else "") + (" (released while training)" if asleep else "")),
        _term("sglang_runtime", req_to_token + chunk + graphs, "memory.sglang_mem_fraction_static",
              note=f"outside SGLang's share: req_to_token pool {req_to_token / physics.GIB:.2f} GiB "
              f"({sglang_fit.max_requests(recipe, hw, share)} requests), one prefill chunk's activations "
              f"{chunk / physics.GIB:.2f} GiB, decode CUDA-graph pool {graphs / physics.GIB:.2f} GiB"),
    ]
