"""SGLang's memory on one GPU of an engine, as its model runner sizes it; the refusal of a share that cannot hold it.

Read from sgl-project/sglang (``python/sglang/srt/model_executor/model_runner.py``: ``profile_max_num_token``,
``init_memory_pool``; ``server_args.py``: the ``mem_fraction_static`` default), the mid-2025 code that slime,
AReaL and verl's SGLang rollout pin:

- ``mem_fraction_static`` (here ``memory.sglang_mem_fraction_static``) is the *static* share: weights plus the
  KV pool. The runner measures the free memory before loading (``total``, the least over the ``tp_size``
  ranks), loads the weights (split over ``tp_size``), and gives the KV pool
  ``free_after_load - total · (1 - share)``, i.e. ``share · total - weights``. If that holds no token,
  SGLang stops ("Not enough memory. Please try to increase --mem-fraction-static"); a request longer than
  the pool is cut or rejected, so a share below weights + one ``max_prompt + max_completion`` sequence is
  refused here, naming the share that holds it (as ``vllm_fit`` does for vLLM). The planner takes
  ``total`` as the device's memory: the engine starts before the trainer allocates, or the trainer's memory is
  released (slime, verl's sleep), as the rows' sources run it.
- Outside the share, in the ``1 - share`` the runner leaves free: the ``req_to_token`` pool (int32,
  ``max_num_reqs + 1`` rows × ``context_len + 4``, ``max_num_reqs`` = ``clamp(tokens / context_len · 512,
  2048, 4096)``), the activations of one prefill chunk (``chunked_prefill_size`` tokens through one layer:
  residual, normed input, gate-up output and its SiLU·mul, ``2h + 3i/tp`` values a token) and the CUDA-graph
  pool of the largest captured decode batch (``cuda_graph_max_bs`` tokens through the same working set plus
  fp32 logits). ``chunked_prefill_size`` and ``cuda_graph_max_bs`` follow SGLang's defaults by GPU memory.
  A decode batch above ``cuda_graph_max_bs`` is not replayed from a graph (``CudaGraphRunner.can_run``) and
  runs eagerly; slime's docs warn of it for engines given more than 160 concurrent requests.
- Tensor parallel: weights and the KV heads split over ``tp_size``, each GPU keeping at least one KV head
  (``get_num_kv_heads``: heads are replicated when ``tp_size`` exceeds them).
- No share set: SGLang's default, ``(memory - reserved) / memory`` with ``reserved`` its estimate of the
  activations and CUDA-graph buffers by GPU class (H100/A100: 9.5 + tp/2 GiB; H20, H200: 12 + tp/2;
  B200/MI300: 32; 24-35 GiB parts: 2.8 + tp/10).
"""

from __future__ import annotations

import math

from gputrain.planner import physics
from gputrain.planner.vllm_fit import refuse_share
from gputrain.planner.workload import Hardware
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe

#: bounds of SGLang's ``max_num_reqs`` (rows of the req_to_token pool) when ``max_running_requests`` is unset
MIN_REQS, MAX_REQS = 2048, 4096


def tp_size(recipe: Recipe) -> int:
    algo = recipe.algorithm
    return algo.vllm_tensor_parallel_size if isinstance(algo, GRPOAlgorithm) else 1


def default_share(hw: Hardware, tp: int) -> float:
    """SGLang's ``mem_fraction_static`` when none is given (server_args.py), by the GPU's memory."""
    gib = hw.gpu.memory_gib
    if gib < 35:
        reserved = 2.8 + tp / 10
    elif gib < 90:
        reserved = 9.5 + tp / 2
    elif gib < 160:
        reserved = 12 + tp / 2
    else:
        reserved = 32.0
    return round((gib - reserved) / gib, 3)


def share_of(recipe: Recipe, hw: Hardware) -> float:
    share = recipe.memory.sglang_mem_fraction_static
    return share if share is not None else default_share(hw, tp_size(recipe))


def graph_and_chunk(hw: Hardware) -> tuple[int, int]:
    """(cuda_graph_max_bs, chunked_prefill_size): SGLang's defaults by GPU memory."""
    gib = hw.gpu.memory_gib
    if gib < 35:
        return 8, 2048
    if gib < 90:
        return 160, 8192
    if gib < 160:
        return 256, 8192
    return 512, 16384


def kv_cell_bytes(recipe: Recipe, hw: Hardware) -> float:
    """K and V of one token on one GPU of the engine (``get_num_kv_heads``: at least one head a GPU)."""
    model = recipe.model
    heads = model.num_heads or max(1, (model.hidden_size or 0) // 64)
    kv_heads = model.num_kv_heads or heads
    per_gpu = max(1, kv_heads // tp_size(recipe))
    return physics.kv_bytes_per_token(model, hw.precision) * per_gpu / kv_heads


def weights_bytes(recipe: Recipe, hw: Hardware) -> float:
    return physics.params_of(recipe.model) * physics.half_bytes(hw.precision) / tp_size(recipe)


def sequence_tokens(recipe: Recipe) -> int:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    return algo.max_prompt_length + algo.max_completion_length


def kv_pool_bytes(recipe: Recipe, hw: Hardware, share: float) -> float:
    """SGLang's KV pool on one GPU: ``share · memory - weights``."""
    return max(0.0, share * hw.gpu.memory_gib * physics.GIB - weights_bytes(recipe, hw))


def pool_tokens(recipe: Recipe, hw: Hardware, share: float) -> float:
    """Tokens the engine's KV pool holds (``max_total_num_tokens``)."""
    return kv_pool_bytes(recipe, hw, share) / max(1.0, kv_cell_bytes(recipe, hw))


def max_requests(recipe: Recipe, hw: Hardware, share: float) -> int:
    """Rows of the req_to_token pool: the most requests running at once."""
    context = recipe.model.seq_len or sequence_tokens(recipe)
    return min(max(int(pool_tokens(recipe, hw, share) / context * 512), MIN_REQS), MAX_REQS)


def runtime_bytes(recipe: Recipe, hw: Hardware, share: float) -> tuple[float, float, float]:
    """(req_to_token pool, prefill chunk, CUDA-graph pool) bytes on one GPU, outside the static share."""
    from gputrain.planner.memory_rl import mlp_width  # memory_rl -> workload_rl -> this module

    model = recipe.model
    tp = tp_size(recipe)
    half = physics.half_bytes(hw.precision)
    context = recipe.model.seq_len or sequence_tokens(recipe)
    req_to_token = (max_requests(recipe, hw, share) + 1) * (context + 4) * 4
    per_token = (2 * (model.hidden_size or 0) + 3 * mlp_width(model) / tp) * half
    graph_bs, chunk = graph_and_chunk(hw)
    graphs = graph_bs * (per_token + (model.vocab_size or 0) * 4)
    return float(req_to_token), chunk * per_token, graphs


def least_share(recipe: Recipe, hw: Hardware) -> float:
    """The least share (rounded up to 0.01) whose static part holds the weights and one sequence's KV."""
    if not hw.gpu.memory_gib:
        return 0.0
    need = weights_bytes(recipe, hw) + sequence_tokens(recipe) * kv_cell_bytes(recipe, hw)
    return math.ceil(need / physics.GIB / hw.gpu.memory_gib * 100) / 100


def check_share(recipe: Recipe, hw: Hardware, share: float) -> None:
    """Refuse a share whose KV pool cannot hold one sequence (one line, naming the share that works)."""
    tokens = sequence_tokens(recipe)
    pool = kv_pool_bytes(recipe, hw, share)
    one = tokens * kv_cell_bytes(recipe, hw)
    if pool >= one:
        return
    refuse_share("memory.sglang_mem_fraction_static", share, least_share(recipe, hw),
                 "use a larger GPU, algorithm.vllm_tensor_parallel_size (SGLang's tp_size), or another engine",
                 f"gives SGLang's weights and KV pool {share * hw.gpu.memory_gib:.1f} GiB of {hw.gpu.name}'s "
                 f"{hw.gpu.memory_gib:g} GiB: weights {weights_bytes(recipe, hw) / physics.GIB:.1f} GiB leave "
                 f"{pool / physics.GIB:.2f} GiB of KV pool, below one {tokens}-token sequence's "
                 f"{one / physics.GIB:.2f} GiB")
