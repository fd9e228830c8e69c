"""Block diffusion language models: BD3-LM and its hierarchical variant HDP.

Ideas (not code) from Arriola et al., "Block Diffusion: Interpolating Between Autoregressive and Diffusion
Language Models" (ICLR 2025) and its reference implementation kuleshov-group/bd3lms (Apache-2.0); SUBS and
the log-linear schedule from Sahoo et al., "Simple and Effective Masked Diffusion Language Models"
(MDLM); adaLN-Zero from Peebles & Xie (DiT).

Modules, leaves first:

* ``masks``       — the ``x_t ⊕ x_0`` attention mask as a pure function of block ids (+ brute force, flex).
* ``schedule``    — log-linear α_t, NELBO weight 1/t, per-block antithetic t in ``[β, ω]``.
* ``model``       — DiT-style transformer: rotary positions, adaLN (t only with ``time_conditioning``),
  dropout, SDPA or FlexAttention, KV cache.
* ``objective``   — ``Layout`` (what is noised, block ids), SUBS NELBO, real-token mask, masks redrawn
  inside a clip window.
* ``clip_search`` — the reference's variance-minimising choice of [β, ω] (per-block, shared batches).
* ``evaluation``  — ``Scorer`` (training terms), held-out NELBO per real token, the clip search on held-out
  batches; seeded, so numbers are comparable across evaluations and runs.
* ``ema``         — the averaged weights used for evaluation and sampling (reference decay and warm-up).
* ``sampler``     — semi-autoregressive, first-hitting or fixed steps per block, nucleus, KV cache of clean
  blocks, never a [MASK].
* ``hierarchy``   — HDP's question/plan/execution layout; *its docstring is the HDP design*.
* ``data``        — GSM8K-format rows (files, hub, seeded generator), GPT-2 or byte tokenizer.
* ``mfu``         — FLOPs of the 2n processed tokens and MFU against the GPU's bf16 peak.
* ``trainer``     — the loop shared by ``python -m gputrain.train.bd3lm`` and ``python -m gputrain.train.hdp``.

Departures from the reference training are switches of ``gputrain.recipe.algorithms.diffusion``,
defaulting to the reference's choice.

Nothing here is imported outside ``gputrain.train``; launchers run the entrypoints with ``python -m``.
"""
