"""Activation memory a mixture-of-experts layer adds to the dense layer of the same active width.

The dense term (``memory_rl.decoder_activation_bytes``) already prices a token's expert MLP at the active
width (the SwiGLU's ``k·F`` intermediates, ``i`` from ``model.active_params``) and the layer's ``h``-wide
input and output once. A routed layer also holds ``k`` copies of each token's hidden state. Read from the
torchtitan-style layer prime-rl trains (``trainer/models/layers/moe.py``, Qwen3-MoE: softmax router,
``score_before_experts=False``, no shared expert), per token, ``k`` experts per token, ``H`` the hidden size,
``E`` the routed experts, bytes of the compute dtype ``c`` (2):

- kept for backward, every MoE layer: the gathered input of the grouped GEMMs ``[T·k, H]`` (``c·k·H``) and
  the experts' output cast to fp32 for the score multiply (``4·k·H``, saved by the multiply); the router's
  fp32 softmax ``[T, E]`` (``4·E``) and the int64 indices of top-k, the argsort and the token index
  (``3·8·k``) plus the fp32 top-k scores (``4·k``);
- transient, in one layer's backward at the score multiply: the incoming gradient gathered from
  ``scatter_add``'s output and cast to fp32 (``4·k·H``), the multiply's fp32 gradient for the experts'
  output (``4·k·H``) and the fp32 product summed into the score gradient (``4·k·H``): ``12·k·H``.

With recomputation only the recomputed layer holds the saved part, so the layer adds
``(c + 4 + 12)·k·H + 4·E + 28·k`` bytes a token once; without it every layer keeps its saved part and one
layer's backward adds the transient. No factor: each term is a tensor the layer allocates.
"""

from __future__ import annotations

from gputrain.recipe.schema import ModelSpec

#: fp32 copies of the routed hidden states alive together in the backward of the score multiply
TRANSIENT_FP32_COPIES = 3
#: int64 index tensors of T·k entries kept for backward (top-k, argsort, token index)
INDEX_TENSORS = 3


def moe_saved_bytes_per_token(model: ModelSpec, half: int) -> float:
    """Bytes one MoE layer keeps for backward per token beyond the dense layer of the active width."""
    k, h = model.experts_per_token or 0, model.hidden_size or 0
    if not k or not h:
        return 0.0
    router = 4 * (model.num_experts or 0) + INDEX_TENSORS * 8 * k + 4 * k
    return float((half + 4) * k * h + router)


def moe_transient_bytes_per_token(model: ModelSpec) -> float:
    """Bytes per token one MoE layer's backward allocates at the score multiply (fp32 routed copies)."""
    k, h = model.experts_per_token or 0, model.hidden_size or 0
    return float(TRANSIENT_FP32_COPIES * 4 * k * h)


def moe_routing_bytes(model: ModelSpec, tokens: float, checkpointing: bool, half: int) -> float:
    """Routing activations of ``tokens`` tokens through the model's MoE layers (0 for a dense model)."""
    saved = moe_saved_bytes_per_token(model, half)
    if not saved:
        return 0.0
    layers = 1 if checkpointing else (model.num_layers or 0)
    return tokens * (saved * layers + moe_transient_bytes_per_token(model))
