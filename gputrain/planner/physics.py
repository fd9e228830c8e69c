"""Device rates and transformer arithmetic shared by the workload and memory models.

Every constant here is an assumption a plan names in its output; calibration from measured runs corrects
the per-(entrypoint, GPU type) efficiency, not these formulas.

- FLOPs: a dense decoder does ``2·N`` FLOPs per token forward plus ``4·L·h·c`` for attention scores and
  values over a context of ``c`` tokens (causal: the mean context is half the sequence); training is 3×
  forward, 4× with activation recomputation (Kaplan et al. 2020; Korthikanti et al. 2022).
- Activations (Korthikanti et al. 2022, Table 2): ``34·s·b·h`` bytes per layer in half precision with a
  fused attention kernel (no ``5·a·s²·b`` score tensor); ``2·s·b·h`` per layer with full recomputation
  (the layer input) plus one layer recomputed at a time. fp32 activations are twice that.
- Kernel dispatch: eager PyTorch pays a few microseconds of host time per operator; small models are bound
  by this, not by FLOP/s. HF ``generate`` (transformers 5.23, Qwen2) dispatches 72 ATen operators per decoder
  layer per decode step and 64 more per step outside the layers (sampling, logits processors, stopping
  criteria); under FSDP2 every wrapped module's forward hooks still run on every decode step even with the
  weights gathered. Counted and timed here (``TorchDispatchMode`` count; CPU process time, so the shared
  machine's load does not inflate it): 709 µs per layer per token plain, 1159 µs under ``fully_shard``.
"""

from __future__ import annotations

from gputrain.contract.hardware import GPUFacts
from gputrain.recipe.schema import ModelSpec

GIB = 1024**3
#: host time per eager operator dispatch, seconds (GPU: launch + Python; CPU: op overhead of tiny tensors)
OP_SECONDS_GPU = 15e-6
OP_SECONDS_CPU = 10e-6
#: the same with CUDA graphs (vLLM decode)
OP_SECONDS_GRAPHED = 3e-6
#: eager operators per decoder layer in one decode step of HF generate (norms, rotary, attention, MLP, cache)
HF_OPS_PER_LAYER = 72  # counted: transformers 5.23 Qwen2, TorchDispatchMode
#: eager operators per HF decode step outside the layers (embedding, head, sampling, stopping criteria)
HF_OPS_PER_TOKEN = 64  # counted as above
#: host time of FSDP2's pre/post-forward hooks per wrapped module per forward call, seconds
FSDP2_HOOK_SECONDS = 4.5e-4  # measured here: 1159 - 709 µs per layer per decode token, weights gathered
#: kernels per decoder layer in one graphed vLLM decode step (not re-measured: needs a GPU)
VLLM_OPS_PER_LAYER = 40
#: share of peak memory bandwidth reached by decode (weights + KV cache streamed once per token)
DECODE_BANDWIDTH_EFFICIENCY = 0.6
#: CUDA context + allocator slack per GPU process, GiB
CUDA_CONTEXT_GIB = 1.0
#: resident set of a CPU training process before the model (Python, torch, transformers), GiB
CPU_PROCESS_BASELINE_GIB = 0.45


def half_bytes(precision: str) -> int:
    """Bytes per element of activations and half copies under the run's precision."""
    return 4 if precision == "fp32" else 2


def peak_flops_per_rank(gpu: GPUFacts, precision: str, world: int) -> float:
    """Dense peak FLOP/s one rank can use. CPU: the whole machine's rate is shared by the local ranks."""
    rate = gpu.peak_tflops(precision) * 1e12
    return rate / world if gpu.is_cpu else rate


def bandwidth_per_rank(gpu: GPUFacts, world: int) -> float:
    """Memory bandwidth in bytes/s one rank can use (CPU: shared by the local ranks)."""
    rate = gpu.bandwidth_gbs * 1e9
    return rate / world if gpu.is_cpu else rate


def op_seconds(gpu: GPUFacts) -> float:
    return OP_SECONDS_CPU if gpu.is_cpu else OP_SECONDS_GPU


def params_of(model: ModelSpec) -> float:
    if model.params:
        return model.params
    if model.hidden_size and model.num_layers:
        return 12 * model.num_layers * model.hidden_size**2 + (model.vocab_size or 0) * model.hidden_size
    return 0.0


def head_width(model: ModelSpec) -> float:
    """Width of one attention head: ``model.head_dim`` where the config states it (Qwen3's 128 is wider than
    ``hidden_size / num_heads``), else ``hidden_size / num_heads`` as transformers derives it."""
    h = model.hidden_size or 0
    heads = model.num_heads or max(1, h // 64)
    return float(model.head_dim) if model.head_dim else h / heads


def attention_width(model: ModelSpec) -> float:
    """Width of the query projection, ``num_heads · head_dim``: what the score and value products run over."""
    return (model.num_heads or max(1, (model.hidden_size or 0) // 64)) * head_width(model)


def forward_flops_per_token(model: ModelSpec, context: float) -> float:
    """Forward FLOPs of one token that attends to ``context`` tokens (mixture-of-experts: the parameters
    active per token, ``model.active_params``); the scores and the weighted values are ``2 · 2 · context``
    FLOPs per query channel (``attention_width``)."""
    attn = 4 * (model.num_layers or 0) * attention_width(model) * context
    return 2 * (model.active_params or params_of(model)) + attn


def sequence_forward_flops(model: ModelSpec, tokens: float) -> float:
    """Forward FLOPs of one causal sequence of ``tokens`` (mean context tokens / 2)."""
    return tokens * forward_flops_per_token(model, tokens / 2)


def kv_bytes_per_token(model: ModelSpec, precision: str) -> float:
    """K and V of every layer for one token: 2 · layers · kv_heads · head_dim · bytes."""
    h = model.hidden_size or 0
    heads = model.num_heads or max(1, h // 64)
    kv_heads = model.num_kv_heads or heads
    return 2 * (model.num_layers or 0) * kv_heads * head_width(model) * half_bytes(precision)


def activation_bytes(model: ModelSpec, tokens: float, batch: float, precision: str, checkpointing: bool,
                     attention: str = "sdpa") -> float:
    """Activations kept for backward of one micro-batch (see module docstring)."""
    h, layers = model.hidden_size or 0, model.num_layers or 0
    heads = model.num_heads or max(1, h // 64)
    sbh = tokens * batch * h
    scores = 5 * heads * tokens / h if attention == "eager" and h else 0.0
    full_layer = sbh * (34 + scores) * half_bytes(precision) / 2
    if checkpointing:
        return 2 * sbh * layers * half_bytes(precision) / 2 + full_layer
    return full_layer * layers
