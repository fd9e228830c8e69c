"""Per-GPU memory model: every term named, sized, and tied to the recipe field that cuts it.

Terms are ``persistent`` (held for the whole run), ``train`` (alive during forward/backward) or
``rollout`` (alive while an RL step generates); the peak is persistent + the larger phase. What the
trainers really keep (``gputrain.train``):

- fp32 master weights, fp32 gradients and AdamW's two fp32 moments (16 B/param), divided by the world size
  under FSDP; under DDP with half precision, autocast caches a half copy of every weight it casts;
- FSDP2 unshards two layers at a time in the compute dtype, and while gradient sync is off (accumulation
  over micro-batches) it keeps full-size unsharded gradients until the last micro-batch;
- activations (``physics.activation_bytes``) and the logits: the model's ``[B, T, V]`` output, its
  gradient, the RL temperature-scaled copy of the completion part and one fp32 row for the log-softmax;
- RL: the frozen reference model in the compute dtype when ``beta > 0``; with vLLM, the share of the
  device it reserves for weights and KV cache (vLLM's ``gpu_memory_utilization``: a fraction of *total*
  device memory); with HF generate, the KV cache of the whole rollout batch, its fp32 scores, and under
  FSDP the gathered full weights;
- the CUDA context (GPU) or the process's baseline resident set (CPU).
"""

from __future__ import annotations

from gputrain.contract.estimate import MemoryTerm
from gputrain.planner import physics
from gputrain.planner.workload import Hardware
from gputrain.planner.workload_dense import _graph_shape, diffusion_tokens
from gputrain.planner.workload_rl import rl_shape
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm
from gputrain.recipe.schema import Recipe

GIB = physics.GIB
RL_ENTRYPOINTS = ("grpo_code", "grpo_math", "gdpo")


def _term(name: str, nbytes: float, knob: str = "", *, phase: str = "persistent", batch: bool = False,
          note: str = "") -> MemoryTerm:
    return MemoryTerm(name=name, gib=nbytes / GIB, knob=knob, phase=phase,  # type: ignore[arg-type]
                      scales_with_batch=batch, note=note)


def memory_terms(recipe: Recipe, hw: Hardware) -> list[MemoryTerm]:
    if recipe.entrypoint in ("bd3lm", "hdp"):
        from gputrain.planner.memory_diffusion import diffusion_memory_terms

        return diffusion_memory_terms(recipe, hw)
    model, train = recipe.model, recipe.train
    params = physics.params_of(model)
    fsdp = recipe.distributed.strategy in ("fsdp", "deepspeed") and hw.world > 1
    shard = hw.world if fsdp else 1
    half = physics.half_bytes(hw.precision)
    b = train.batch_size
    terms: list[MemoryTerm] = []
    if params:
        cut = "" if fsdp else "distributed.strategy=fsdp"
        terms += [_term("weights", 4 * params / shard, cut, note="fp32 master weights"),
                  _term("gradients", 4 * params / shard, cut, note="fp32 gradients"),
                  _term("optimizer", 8 * params / shard, cut, note="AdamW moments, fp32")]
        if not fsdp and half == 2:
            terms.append(_term("autocast_weights", 2 * params, "distributed.strategy=fsdp", phase="train",
                               note="half copies cached by autocast"))
    if recipe.entrypoint in RL_ENTRYPOINTS:
        terms += _rl_terms(recipe, hw, params, fsdp, half)
    elif recipe.entrypoint == "gnn_coloring":
        algo = recipe.algorithm
        assert isinstance(algo, GNNColoringAlgorithm)
        nodes, _ = _graph_shape(algo)
        terms.append(_term("activations", b * nodes * (model.hidden_size or 64) * (model.num_layers or 1) * 12 * 4,
                           "train.batch_size", phase="train", batch=True, note="~12 fp32 values per node, layer"))
    elif model.hidden_size and model.num_layers and (model.seq_len or recipe.estimate.tokens_per_sample):
        fed, loss_tokens = (diffusion_tokens(recipe) if recipe.entrypoint in ("bd3lm", "hdp")
                            else (recipe.estimate.tokens_per_sample or model.seq_len or 0, model.seq_len or 0))
        terms.append(_activation_term(recipe, hw, fed, b))
        if model.vocab_size:
            v = model.vocab_size
            terms.append(_term("logits", b * loss_tokens * v * (2 * half + 4), "train.batch_size", phase="train",
                               batch=True, note="[B, T, V] logits, their gradient, the fp32 loss copy"))
    if fsdp and params and model.num_layers:
        terms.append(_term("fsdp_buffers", 2 * params / model.num_layers * half, phase="train",
                           note="two layers unsharded at a time"))
    if hw.gpu.is_cpu:
        terms.append(_term("process_baseline", physics.CPU_PROCESS_BASELINE_GIB * GIB,
                           note="Python, torch and libraries resident before the model"))
    else:
        terms.append(_term("cuda_context", physics.CUDA_CONTEXT_GIB * GIB, note="CUDA context, allocator slack"))
    return terms


def _activation_term(recipe: Recipe, hw: Hardware, tokens: float, batch: int) -> MemoryTerm:
    ckpt = recipe.train.gradient_checkpointing
    nbytes = physics.activation_bytes(recipe.model, tokens, batch, hw.precision, ckpt, recipe.train.attention)
    knob = "train.batch_size" if ckpt else "train.gradient_checkpointing=true"
    note = f"{tokens:.0f} tokens × {batch} per micro-batch, {'with' if ckpt else 'without'} recomputation"
    return _term("activations", nbytes, knob, phase="train", batch=True, note=note)


def _rl_terms(recipe: Recipe, hw: Hardware, params: float, fsdp: bool, half: int) -> list[MemoryTerm]:
    algo = recipe.algorithm
    assert isinstance(algo, GRPOAlgorithm)
    s = rl_shape(recipe, hw)
    model = recipe.model
    shard = hw.world if fsdp else 1
    v = model.vocab_size or 0
    terms = [_activation_term(recipe, hw, s.padded, s.micro)]
    logits = s.micro * v * (2 * s.padded * half + s.completion_max * half) + 2 * s.completion_max * v * 4
    terms.append(_term("logits", logits, "train.batch_size", phase="train", batch=True,
                       note="[B, T, V] logits + gradient, temperature copy of the completion, fp32 rows"))
    if fsdp and s.micro_per_update > 1:
        terms.append(_term("fsdp_unsharded_grads", params * half, "algorithm.ppo_mini_batch_size", phase="train",
                           note=f"full-size gradients while accumulating {s.micro_per_update} micro-batches"))
    if algo.beta > 0 and params:
        terms.append(_term("reference_model", params * half / shard, "algorithm.beta=0",
                           note="frozen reference in the compute dtype"))
    if s.engine == "vllm" and not hw.gpu.is_cpu:
        share = s.share or 0.0
        phase = "rollout" if algo.vllm_sleep_mode else "persistent"
        terms.append(_term("vllm_share", share * hw.gpu.memory_gib * GIB, "memory.vllm_gpu_memory_utilization",
                           phase=phase, note=f"vLLM weights + KV cache: {share:g} of total device memory"
                           + (" (asleep while training)" if algo.vllm_sleep_mode else "")))
    else:
        kv = s.seqs * s.padded * physics.kv_bytes_per_token(model, hw.precision)
        terms.append(_term("kv_cache", kv, "algorithm.train_batch_size", phase="rollout",
                           note=f"HF generate: {s.seqs} sequences × {s.padded:.0f} tokens"))
        terms.append(_term("generation_scores", s.seqs * v * 4 * 2, "algorithm.train_batch_size", phase="rollout",
                           note="fp32 scores and probabilities of one decode step"))
        if fsdp and params:
            terms.append(_term("unsharded_weights", half * params, "algorithm.rollout_engine=vllm", phase="rollout",
                               note="FSDP2 gathers the full compute-dtype weights for HF generate"))
    return terms


def peak_gib(terms: list[MemoryTerm]) -> float:
    persistent = sum(t.gib for t in terms if t.phase == "persistent")
    train = sum(t.gib for t in terms if t.phase == "train")
    rollout = sum(t.gib for t in terms if t.phase == "rollout")
    return persistent + max(train, rollout)


def largest_term(terms: list[MemoryTerm]) -> MemoryTerm:
    cuttable = [t for t in terms if t.knob] or terms
    return max(cuttable, key=lambda t: t.gib)
