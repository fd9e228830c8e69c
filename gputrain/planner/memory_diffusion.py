"""Block-diffusion (BD3-LM, HDP) memory, term by term, from the code that allocates it.

The allocator peak (what ``torch.cuda.max_memory_allocated`` reports) of a training step comes at the start
of the backward pass, when every layer's saved activations and the loss's full-vocabulary tensors are alive
at once. Terms (``benchmarks/PLANNER.md`` derives each and compares them with the H200 sheet):

- fp32 weights, AdamW's two fp32 moments, and the EMA copy (``algorithm.ema`` > 0), counted from the DiT's
  real shapes (``gputrain.train.diffusion.model``: embedding, blocks with adaLN, time MLP, head), not from
  ``model.params``; fp32 gradients only when micro-batches accumulate (with one micro-batch they are
  allocated during backward, after the peak);
- the bf16 copies of the linear weights autocast makes in forward and backward keeps (the saved inputs of
  every ``F.linear``);
- activations: bytes saved for backward per token and layer, measured on the CPU at the real shapes under
  bf16 autocast with ``saved_tensors_hooks`` (the attention kernel replaced by what CUDA's fused kernels keep:
  the output and a float log-sum-exp; SDPA with a boolean mask runs the memory-efficient kernel on CUDA):
  ``(58 + 4·mlp_ratio)·D`` bytes + 4 per head. Compiled blocks keep 60 % of that
  (``COMPILED_ACTIVATION_SHARE``, measured on an H200);
- the loss: the head's rows are the masked tokens only (share (β+ω)/2 of the noised ones on average), and
  what is alive of their ``rows × V`` tensors follows the path that runs (``planner.kernels.
  diffusion_loss_kernel``): the eager loss keeps the fp32 copy of those logits for log-softmax's backward,
  and the backward holds its incoming and outgoing fp32 gradients at once: three ``rows × V × 4`` tensors.
  The compiled loss (``compiled_ce.py``, the default where the blocks compile) saves only the head's bf16
  logits and two fp32 values per row, and its backward writes the logits' bf16 gradient into that same
  buffer (Inductor reuses the dead input: ``buf1 = addmm; del addmm  # reuse`` in its generated backward):
  ``rows × V × 2``. The chunked loss keeps one log-sum-exp per row; its backward holds one chunk's fp32
  logits, shifted logits and softmax at once: ``chunk × V × 12``;
- the CUDA context (outside the allocator), as for every workload.
"""

from __future__ import annotations

from gputrain.contract.estimate import MemoryTerm
from gputrain.contract.vocab import padded_vocab
from gputrain.planner import physics
from gputrain.planner.kernels import diffusion_loss_kernel, plan_kernels
from gputrain.planner.workload import Hardware
from gputrain.planner.workload_dense import diffusion_tokens
from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.recipe.schema import Recipe

GIB = physics.GIB
#: bytes saved for backward per token and DiT layer, per unit of hidden size, outside the MLP (measured:
#: benchmarks/diffusion_memory_terms.py at D = 768, S = 1024, bf16 autocast, dropout 0.1: 57,168 B/token)
EAGER_BYTES_PER_D = 58.0
#: ... and per unit of hidden size per MLP expansion (the fc1 output and the GELU output, bf16: 2 × 2 B)
EAGER_MLP_BYTES_PER_D = 4.0
#: share of the eager activations compiled blocks keep (Inductor's partitioner recomputes pointwise work in
#: backward instead of saving it). Measured on the H200 at the benchmark shape only (benchmarks/RESULTS.md,
#: 2026-11-26: bench_default 36.64 GiB allocated = 25.3 GiB of activations vs 41.9 eager); the gputrain run
#: rows (batch 64/128/192, HDP) are the held-out check. The CPU's Inductor keeps less (0.44), so the CPU
#: measurement is not used for CUDA.
COMPILED_ACTIVATION_SHARE = 0.604
#: bytes per head row and vocabulary column alive at the peak, per head + loss path (the module docstring;
#: the compiled loss's saved tensors listed with ``saved_tensors_hooks`` on the CPU, its backward's buffer
#: reuse read from Inductor's generated code; held against the H200's bench_fast row, 28.85 GiB allocated)
LOSS_BYTES_PER_ROW_V = {"torch": 3 * 4, "compiled": 2, "chunked": 3 * 4}
#: rows per chunk of the chunked loss (``chunked_ce.chunked_cross_entropy``'s ``chunk``)
CHUNKED_CE_ROWS = 4096


def dit_params(recipe: Recipe) -> tuple[float, float]:
    """(all parameters, parameters of the linear layers) of the DiT the trainer builds."""
    m = recipe.model
    d, layers, v = m.hidden_size or 0, m.num_layers or 0, padded_vocab(m.vocab_size or 0)  # as the DiT builds it
    algo = recipe.algorithm
    cond = algo.cond_dim if isinstance(algo, DiffusionAlgorithm) else 128
    r = 4
    block = 3 * d * d + d * d + (r * d * d + r * d) + (r * d * d + d) + (cond * 6 * d + 6 * d)
    time_mlp = 256 * cond + cond + cond * cond + cond
    final = cond * 2 * d + 2 * d
    head = d * v + v
    linear = layers * block + time_mlp + final + head
    return linear + v * d, linear


def activation_bytes_per_token_layer(recipe: Recipe) -> float:
    m = recipe.model
    d, heads = m.hidden_size or 0, m.num_heads or 1
    return (EAGER_BYTES_PER_D + EAGER_MLP_BYTES_PER_D * 4) * d + 4 * heads


def diffusion_memory_terms(recipe: Recipe, hw: Hardware) -> list[MemoryTerm]:
    from gputrain.planner.memory_terms import _term

    model, train = recipe.model, recipe.train
    algo = recipe.algorithm
    params, linear = dit_params(recipe)
    b = train.batch_size
    fed, loss_tokens = diffusion_tokens(recipe)
    share = (algo.clip_beta + algo.clip_omega) / 2 if isinstance(algo, DiffusionAlgorithm) else 0.5
    rows = b * loss_tokens * share
    v = padded_vocab(model.vocab_size or 0)
    choice = plan_kernels(recipe, hw.gpu)
    compiled = bool(choice and choice.compile)
    act = activation_bytes_per_token_layer(recipe) * (COMPILED_ACTIVATION_SHARE if compiled else 1.0)
    if train.gradient_checkpointing:  # each block's input kept, one block's activations recomputed at a time
        act_total = b * fed * ((model.num_layers or 0) * 4 * (model.hidden_size or 0) + act)
    else:
        act_total = b * fed * (model.num_layers or 0) * act
    terms = [_term("weights", 4 * params, note="fp32 weights (the DiT's own count, embedding and head included)"),
             _term("optimizer", 8 * params, note="AdamW moments, fp32")]
    if isinstance(algo, DiffusionAlgorithm) and algo.ema > 0:
        terms.append(_term("ema", 4 * params, "algorithm.ema=0", note="EMA copy of the weights, fp32"))
    if train.grad_accum > 1:
        terms.append(_term("gradients", 4 * params, "train.grad_accum=1",
                           note="fp32 gradients held while micro-batches accumulate"))
    if hw.precision != "fp32":
        terms.append(_term("autocast_weights", 2 * linear, phase="train",
                           note="bf16 copies of the linear weights, saved for backward"))
    path = choice.label() if choice else "sdpa (eager)"
    terms.append(_term("activations", act_total, "train.batch_size", phase="train", batch=True,
                       note=f"{act / (model.hidden_size or 1):.0f}·D bytes per token and layer ({path}), "
                       f"{fed} tokens × {b} per micro-batch", basis="measured"))
    loss = diffusion_loss_kernel(recipe, choice, hw.gpu)
    live_rows = min(rows, CHUNKED_CE_ROWS) if loss == "chunked" else rows
    what = {"torch": "log-softmax's fp32 output and its two fp32 gradients (eager loss)",
            "compiled": "the bf16 logits the compiled loss saves, its gradient written over them",
            "chunked": f"one chunk of {CHUNKED_CE_ROWS} rows: fp32 logits, shifted logits, softmax"}[loss]
    terms.append(_term("logits", LOSS_BYTES_PER_ROW_V[loss] * live_rows * v, "train.batch_size", phase="train",
                       batch=loss != "chunked", note=f"~{rows / max(b, 1):.0f} masked rows per sample × V: {what} "
                       "at the start of backward", basis="measured"))
    if hw.gpu.is_cpu:
        terms.append(_term("process_baseline", physics.CPU_PROCESS_BASELINE_GIB * GIB,
                           note="Python, torch and libraries resident before the model"))
    else:
        terms.append(_term("cuda_context", physics.CUDA_CONTEXT_GIB * GIB, note="CUDA context (outside the "
                           "allocator: not in max_memory_allocated)"))
    return terms
