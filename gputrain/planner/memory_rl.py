"""RL memory terms (grpo_code, grpo_math, gdpo), from the code that allocates them (``gputrain.train.grpo``).

- Activations of a HF decoder layer under bf16 autocast with fp32 weights and SDPA (memory-efficient
  kernel, no score matrix): ``h·(32 + 4·kv_heads/heads) + 8·i`` bytes per token per layer, ``i`` the MLP
  width. Counted on CPU with ``torch.autograd.graph.saved_tensors_hooks`` on transformers' Qwen2 (the
  fp32 RMSNorm inputs and outputs, rotary q/k, the bf16 casts of every matmul input, SwiGLU's three
  ``i``-wide tensors): 60.07·h at i = 3h, 76.07·h at i = 5h, 56.87·h with 4 of 20 KV heads. With
  recomputation only each layer's fp32 input (4·h) stays, plus one layer recomputed at a time; where the
  forward runs on half-precision parameters (``distributed.sharding`` zero1/2/3: DeepSpeed, torch FSDP's mixed
  precision, Megatron; CPU offload) that input is in the compute dtype (2·h). The recomputed layer keeps the
  autocast constants (an upper bound for a pure-bf16 layer).
- Logits of the training forward (``loss.completion_logprobs``): the head's ``[B, T, V]`` output, the
  tempered ``[B, C, V]`` copy, and every row's fp32 log-softmax output, which autograd keeps until the
  backward (the row loop bounds the fp32 copy only under ``no_grad``); the backward adds a half gradient
  of the first two and one row's fp32 gradient at a time.
  ``algorithm.logprob_vocab_chunk`` (prime-rl's fused head) loops over vocabulary chunks instead: a
  ``[T, chunk]`` working set and the head's weight gradient, never ``[T, V]``.
- Sequences are padded to the longest in the micro-batch (``algorithm.sequence_packing: false``) or packed
  (true: the expected real length; under FlexAttention the micro-batch's bins × their 128-aligned width, as
  ``train.grpo.packed_pass.processed_tokens`` counts them). The lengths are the recipe's ``estimate``
  fractions: a packed plan's activations are only as right as its expected completion length (H200
  2026-11-27: 32 + 179 assumed, 19 + 90 ran; the 1.5× over-prediction was that, not a term).
- Gradients (``gradients_at_peak``): on one GPU with one micro-batch per update the peak is the start of the
  backward, before any gradient exists (``zero_grad(set_to_none=True)``, no DDP reducer); several ranks or
  accumulated micro-batches keep them resident (H200 2026-11-27, benchmarks/PLANNER.md).
- The reference model in the compute dtype when ``beta > 0``; vLLM's share of *total* device memory
  (checked in ``gputrain.planner.vllm_fit``), or the HF-generate KV cache of the whole rollout batch and
  its fp32 scores, and under FSDP the gathered full weights.
"""

from __future__ import annotations

from gputrain.contract.estimate import MemoryTerm
from gputrain.planner import physics
from gputrain.planner.memory_terms import _term
from gputrain.planner.moe_memory import moe_routing_bytes
from gputrain.planner.parallel import Layout
from gputrain.planner.workload import Hardware
from gputrain.planner.workload_rl import ENGINES, rl_shape
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.entrypoints import ENTRYPOINTS
from gputrain.recipe.schema import ModelSpec, Recipe

RL_ENTRYPOINTS = tuple(name for name, row in ENTRYPOINTS.items() if row.workload == "rl")
#: bytes per token per layer and per hidden unit (``h`` part, MHA) and per MLP unit (measured, see docstring)
LAYER_BYTES_H, LAYER_BYTES_KV, LAYER_BYTES_I = 32.0, 4.0, 8.0


def mlp_width(model: ModelSpec) -> float:
    """The MLP width ``i`` from the parameter count (q, o: h·heads·d; k, v: h·kv_heads·d, d the head width;
    gate, up, down: 3·h·i); a mixture of experts counts the experts a token is routed to (active parameters)."""
    h, layers = model.hidden_size or 0, model.num_layers or 0
    if not h or not layers:
        return 0.0
    heads = model.num_heads or max(1, h // 64)
    width = physics.head_width(model)
    attention = 2 * h * width * (heads + (model.num_kv_heads or heads))  # q, o and k, v projections
    # mixture-of-experts: a token's activations come from the experts it is routed to (active parameters)
    per_layer = ((model.active_params or physics.params_of(model)) - (model.vocab_size or 0) * h) / layers
    return max(float(h), (per_layer - attention) / (3 * h))


def decoder_activation_bytes(model: ModelSpec, tokens: float, checkpointing: bool, input_bytes: int = 4,
                             on_host: bool = False) -> float:
    """Activations kept for backward of ``tokens`` tokens through every layer (see module docstring).
    ``input_bytes``: the residual stream's element size, which recomputation keeps per layer (4 under autocast
    over fp32 weights; the compute dtype's where the forward runs on half-precision parameters).
    ``on_host``: what the forward saves leaves the GPU as it is saved and comes back when backward needs it
    (torchtune's ``OffloadActivations``, which prime-rl wraps around the forward): one layer's working set
    stays, the recomputed one (or, without recomputation, the one whose backward runs)."""
    h, layers = model.hidden_size or 0, model.num_layers or 0
    heads = model.num_heads or max(1, h // 64)
    kv = (model.num_kv_heads or heads) / heads
    layer = tokens * (h * (LAYER_BYTES_H + LAYER_BYTES_KV * kv) + LAYER_BYTES_I * mlp_width(model))
    if on_host:
        return layer
    if checkpointing:
        return tokens * input_bytes * h * layers + layer
    return layer * layers


def rl_terms(recipe: Recipe, hw: Hardware, params: float, lay: Layout, half: int) -> list[MemoryTerm]:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    s = rl_shape(recipe, hw)
    model = recipe.model
    v = model.vocab_size or 0
    tp = recipe.distributed.tensor_parallel
    ckpt = recipe.train.gradient_checkpointing
    length = s.train_tokens
    # ZeRO / FSDP mixed precision / Megatron / offload run the forward on half-precision parameters: the
    # residual stream a recomputed layer keeps is in the compute dtype, not autocast's fp32
    half_params = recipe.distributed.sharding != "auto" or lay.offload
    on_host = recipe.memory.activations_on_host and not hw.gpu.is_cpu
    acts = decoder_activation_bytes(model, s.micro * length, ckpt, half if half_params else 4, on_host) / tp
    how = ("padded to the longest" if not algo.sequence_packing else "packed, expected real length"
           + (f" {s.real_tokens:.0f} in FlexAttention bins of {s.bin_width}" if s.bin_width else ""))
    terms = [_term("activations", acts, "train.batch_size" if ckpt else "train.gradient_checkpointing=true",
                   phase="train", batch=True, note=f"{length:.0f} tokens ({how}) × {s.micro} per micro-batch, "
                   f"{'with' if ckpt else 'without'} recomputation"
                   + ("; saved tensors on the host (memory.activations_on_host)" if on_host else "")
                   + "; HF decoder layer, measured on CPU",
                   basis="measured")]
    routed = moe_routing_bytes(model, s.micro * length, ckpt, half) / tp
    if routed:
        terms.append(_term("moe_routing", routed, "train.batch_size", phase="train", batch=True,
                           note=f"{model.experts_per_token} routed copies of each token's hidden state (gathered "
                           "input, fp32 output and its backward), router scores and indices; "
                           + ("one recomputed layer" if ckpt else "every layer")))
    completion = s.completion if algo.sequence_packing else s.completion_max
    if algo.logprob_vocab_chunk:
        # prime-rl's FusedOutputLinear (trainer/models/layers/lm_head.py): the backward, per vocabulary chunk,
        # recomputes the [T, C] product in the compute dtype, its fp32 tempered copy, the fp32 softmax and its
        # fp32 gradient, cast to the compute dtype for the two matmuls; the head's weight gradient is full-size
        c = min(algo.logprob_vocab_chunk, v)
        logits = (s.micro * length * c * (2 * half + 12) + v * (model.hidden_size or 0) * half) / tp
        note = f"vocabulary chunks of {c} columns: a [T, {c}] working set (compute-dtype product, fp32 copy, " \
               "softmax and gradient, its cast) and the head's weight gradient; no [T, V] tensor"
    elif algo.logits_in_place:
        # verl's dp_actor: the head's output divided by the temperature in place, log-probs by flash-attn's
        # Triton cross-entropy with inplace_backward (its gradient written into the logits); padded, the
        # completion slice is copied by the reshape and the slice's backward allocates a full-size gradient
        logits = s.micro * v * half * (length + (0 if algo.sequence_packing else completion)) / tp
        note = "one [T, V] compute-dtype tensor: temperature divided in place, the fused cross-entropy's gradient " \
               "written into it" + ("" if algo.sequence_packing else ", plus the completion slice's copy")
    else:
        logits = (s.micro * v * (2 * length * half + completion * (2 * half + 4)) + 2 * completion * v * 4) / tp
        note = ("[B, T, V] head output + gradient, tempered copy + gradient, every row's fp32 log-softmax kept "
                "for backward, one row's fp32 copy and gradient")
    terms.append(_term("logits", logits, "train.batch_size", phase="train", batch=True, note=note))
    if lay.full_grads_while_accumulating and s.micro_per_update > 1:
        terms.append(_term("fsdp_unsharded_grads", lay.trainable / lay.model_parallel * half,
                           "train.batch_size", phase="train",
                           note=f"full-size gradients while accumulating {s.micro_per_update} micro-batches "
                           "(FSDP2 with sync off, as the trainer runs it)"))
    if algo.beta > 0 and params and not recipe.memory.reference_on_host and not model.lora_rank:
        # LoRA: the reference is the base with its adapters off (no copy)
        terms.append(_term("reference_model", params * half / lay.weights_shard / lay.model_parallel,
                           "algorithm.beta=0", note="frozen reference in the compute dtype"))
    if s.engine == "sglang" and not hw.gpu.is_cpu:
        if algo.vllm_mode == "server":
            return terms  # SGLang runs on its own GPUs: nothing of it on a training GPU
        from gputrain.planner.sglang_terms import sglang_terms

        return terms + sglang_terms(recipe, hw, s.share or 0.0)
    if s.engine == "vllm" and not hw.gpu.is_cpu:
        if algo.vllm_mode == "server":
            return terms  # vLLM runs on its own GPUs: nothing of it on a training GPU
        share = s.share or 0.0
        phase = "rollout" if algo.vllm_sleep_mode else "persistent"
        terms.append(_term("vllm_share", share * hw.gpu.memory_gib * physics.GIB,
                           "memory.vllm_gpu_memory_utilization", phase=phase,
                           note=f"vLLM weights + KV cache: {share:g} of total device memory"
                           + (" (asleep while training)" if algo.vllm_sleep_mode else "")))
    else:
        kv = s.seqs * s.cache_tokens * physics.kv_bytes_per_token(model, hw.precision)
        terms.append(_term("kv_cache", kv, "algorithm.train_batch_size", phase="rollout",
                           note=f"HF generate: {s.seqs} sequences × {s.cache_tokens:.0f} tokens ({s.cache} cache)"))
        terms.append(_term("generation_scores", s.seqs * v * 4 * 2, "algorithm.train_batch_size", phase="rollout",
                           note="fp32 scores and probabilities of one decode step"))
        if lay.sharded and params:
            terms.append(_term("unsharded_weights", half * params, "algorithm.rollout_engine=vllm", phase="rollout",
                               note="FSDP2 gathers the full compute-dtype weights for HF generate"))
    return terms


def gradients_at_peak(recipe: Recipe, hw: Hardware, lay: Layout, terms: list[MemoryTerm]) -> list[MemoryTerm]:
    """On one GPU the update's peak is the start of its backward, before any gradient exists: the trainer
    clears them with ``zero_grad(set_to_none=True)`` (``runtime.context.step_optimizer``), runs one backward per
    micro-batch and wraps no DDP (``strategy=single``: no reducer buckets), and the backward frees each layer's
    saved tensors as it allocates that layer's gradients. So the gradients count only by what they exceed the
    activations and logits by (the end of the backward). Several ranks (DDP's reducer keeps a flat copy of every
    gradient; FSDP) or several micro-batches per update (the gradients accumulate) keep them resident."""
    algo = recipe.algorithm
    if (not isinstance(algo, GRPOAlgorithm) or hw.gpu.is_cpu or lay.train_world != 1 or lay.sharded or lay.offload
            or lay.sharding != "auto" or rl_shape(recipe, hw).micro_per_update != 1):
        return terms
    freed = sum(t.gib for t in terms if t.name in ("activations", "logits"))
    return [t.model_copy(update={
        "gib": max(0.0, t.gib - freed), "phase": "train",
        "note": t.note + ": allocated during the backward as the activations are freed (set_to_none, one "
                "micro-batch per update, one GPU), so only what exceeds them counts at the peak"})
            if t.name == "gradients" and t.phase == "persistent" else t for t in terms]


#: model states the trainer can move to the host while a colocated engine generates
MODEL_STATES = frozenset({"weights", "master_weights", "optimizer", "gradients", "frozen_weights",
                          "autocast_weights"})


def rollout_offload(recipe: Recipe, hw: Hardware, terms: list[MemoryTerm]) -> list[MemoryTerm]:
    """``memory.offload_during_rollout`` with colocated vLLM: the model states leave the GPU while vLLM
    generates (NeMo RL's Megatron worker moves gradients and optimizer in ``offload_before_refit``, the
    weights in ``offload_after_refit``, and all back in ``prepare_for_training``), so they count in the
    training phase only, not on top of vLLM's share."""
    algo = recipe.algorithm
    if (not recipe.memory.offload_during_rollout or not isinstance(algo, GRPOAlgorithm) or hw.gpu.is_cpu
            or rl_shape(recipe, hw).engine not in ENGINES or algo.vllm_mode == "server"):
        return terms
    return [t.model_copy(update={"phase": "train", "note": t.note + "; on the host while vLLM generates"})
            if t.name in MODEL_STATES and t.phase == "persistent" else t for t in terms]


def offloaded_bytes(recipe: Recipe, hw: Hardware, terms: list[MemoryTerm]) -> float:
    """Bytes per GPU that ``rollout_offload`` moves to the host (and back) every step."""
    moved = rollout_offload(recipe, hw, terms)
    return sum(t.gib for t, m in zip(terms, moved, strict=True) if t.phase != m.phase) * physics.GIB
