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
from gputrain.planner.memory_rl import RL_ENTRYPOINTS as RL_ENTRYPOINTS
from gputrain.planner.memory_rl import gradients_at_peak, rl_terms, rollout_offload
from gputrain.planner.memory_terms import BASIS_RANGE as BASIS_RANGE
from gputrain.planner.memory_terms import _term, state_terms
from gputrain.planner.parallel import layout
from gputrain.planner.workload import Hardware
from gputrain.planner.workload_dense import _graph_shape, diffusion_tokens
from gputrain.recipe.algorithms.gnn_coloring import GNNColoringAlgorithm
from gputrain.recipe.entrypoints import entrypoint_of
from gputrain.recipe.schema import Recipe

GIB = physics.GIB


def memory_terms(recipe: Recipe, hw: Hardware) -> list[MemoryTerm]:
    if entrypoint_of(recipe.entrypoint).workload == "diffusion":
        from gputrain.planner.memory_diffusion import diffusion_memory_terms

        return diffusion_memory_terms(recipe, hw)
    model, train = recipe.model, recipe.train
    params = physics.params_of(model)
    lay = layout(recipe, hw.world)
    fsdp = lay.sharded
    half = physics.half_bytes(hw.precision)
    b = train.batch_size
    terms: list[MemoryTerm] = state_terms(recipe, hw, params, lay) if params else []
    if recipe.entrypoint in RL_ENTRYPOINTS:
        terms = rollout_offload(recipe, hw, gradients_at_peak(recipe, hw, lay,
                                                              terms + rl_terms(recipe, hw, params, lay, half)))
    elif entrypoint_of(recipe.entrypoint).workload == "gnn":
        algo = recipe.algorithm
        assert isinstance(algo, GNNColoringAlgorithm)
        nodes, _ = _graph_shape(algo)
        terms.append(_term("activations", b * nodes * (model.hidden_size or 64) * (model.num_layers or 1) * 12 * 4,
                           "train.batch_size", phase="train", batch=True, note="~12 fp32 values per node, layer"))
    elif model.hidden_size and model.num_layers and (model.seq_len or recipe.estimate.tokens_per_sample):
        fed, loss_tokens = (diffusion_tokens(recipe) if entrypoint_of(recipe.entrypoint).workload == "diffusion"
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
        terms.append(_term("process_baseline", physics.CPU_PROCESS_BASELINE_GIB * GIB, basis="measured",
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


def peak_gib(terms: list[MemoryTerm], bound: int | None = None) -> float:
    """Persistent terms plus the larger phase; ``bound`` 0/1 takes every term at the low/high end of its
    basis's range (:data:`BASIS_RANGE`)."""
    def size(t: MemoryTerm) -> float:
        return t.gib if bound is None else t.gib * BASIS_RANGE[t.basis][bound]

    persistent = sum(size(t) for t in terms if t.phase == "persistent")
    train = sum(size(t) for t in terms if t.phase == "train")
    rollout = sum(size(t) for t in terms if t.phase == "rollout")
    return persistent + max(train, rollout)


def peak_range(terms: list[MemoryTerm]) -> tuple[float, float]:
    return peak_gib(terms, 0), peak_gib(terms, 1)


def largest_term(terms: list[MemoryTerm]) -> MemoryTerm:
    cuttable = [t for t in terms if t.knob] or terms
    return max(cuttable, key=lambda t: t.gib)
