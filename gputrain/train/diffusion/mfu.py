"""Model FLOPs utilisation for block diffusion, counting the 2n tokens of ``x_t ⊕ x_0``.

A training step runs the transformer over both halves, so the honest token count is the processed one
(2n for BD3-LM, p + e + q + p + e for HDP), not the n data tokens. FLOPs per processed token follow the
PaLM appendix: ``6·N`` for the matmuls (N = non-embedding parameters; the output head only on the masked tokens,
the only rows the loss reads) and ``12·L·D·S`` for attention scores and values over a dense ``S``-long
sequence. The block mask skips about half of those scores with FlexAttention, but MFU conventionally counts
the dense work (``attention=False`` gives the count without it). The peak is the hardware catalog's dense
bf16 rate of the GPU the plan is for (``plan.gpu.tflops_bf16``): there is no second table here.
"""

from __future__ import annotations

from gputrain.train.diffusion.model import DiTConfig


def flops_per_sequence(cfg: DiTConfig, processed_len: int, head_len: int, attention: bool = True) -> float:
    """Training FLOPs (forward + backward) of one sequence: ``processed_len`` tokens through the body,
    ``head_len`` of them (the masked ones) through the output head; dense attention scores when ``attention``."""
    d, layers, s = cfg.hidden_size, cfg.num_layers, processed_len
    body = layers * (4 * d * d + 2 * cfg.mlp_ratio * d * d)
    scores = 12.0 * layers * d * s * s if attention else 0.0
    return 6.0 * (body * s + d * cfg.vocab_size * head_len) + scores


def mfu(cfg: DiTConfig, processed_len: int, head_len: int, sequences_per_s_per_gpu: float,
        peak_tflops: float | None) -> float | None:
    """Fraction of the GPU's dense bf16 peak (None where no peak is known, e.g. on a CPU)."""
    if not peak_tflops:
        return None
    return flops_per_sequence(cfg, processed_len, head_len) * sequences_per_s_per_gpu / (peak_tflops * 1e12)
