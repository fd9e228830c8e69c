"""Model FLOPs utilisation for block diffusion, counting the 2n tokens of ``x_t ⊕ x_0``.

A training step runs the transformer over both halves, so the honest token count is the processed one
(2n for BD3-LM, p + e + q + p + e for HDP), not the n data tokens. FLOPs per processed token follow the
PaLM appendix: ``6·N`` for the matmuls (N = non-embedding parameters; the output head only on the masked tokens,
the only rows the loss reads) and
``12·L·D·S`` for attention scores and values over a dense ``S``-long sequence. The block mask skips about
half of those scores with FlexAttention, but MFU conventionally counts the dense work.
"""

from __future__ import annotations

from gputrain.train.diffusion.model import DiTConfig

#: Dense bf16 peak FLOP/s per GPU (vendor data sheets, SXM parts, no sparsity).
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12,
             "L4": 121e12, "B200": 2250e12, "4090": 165e12}


def flops_per_sequence(cfg: DiTConfig, processed_len: int, head_len: int) -> float:
    """Training FLOPs (forward + backward) of one sequence: ``processed_len`` tokens through the body,
    ``head_len`` of them (the masked ones) through the output head."""
    d, layers, s = cfg.hidden_size, cfg.num_layers, processed_len
    body = layers * (4 * d * d + 2 * cfg.mlp_ratio * d * d)
    return 6.0 * (body * s + d * cfg.vocab_size * head_len) + 12.0 * layers * d * s * s


def peak_flops(device_name: str) -> float | None:
    for key, value in PEAK_BF16.items():
        if key in device_name:
            return value
    return None


def mfu(cfg: DiTConfig, processed_len: int, head_len: int, sequences_per_s_per_gpu: float,
        device_name: str) -> float | None:
    """Fraction of the GPU's bf16 peak (None where the peak is not known, e.g. on a CPU)."""
    peak = peak_flops(device_name)
    if peak is None:
        return None
    return flops_per_sequence(cfg, processed_len, head_len) * sequences_per_s_per_gpu / peak
