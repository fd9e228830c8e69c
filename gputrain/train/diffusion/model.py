"""A DiT-style transformer for block diffusion: rotary positions, adaptive layer norm on the noise level.

With ``time_conditioning`` each token is conditioned on the t of its block (clean tokens on t = 0) through
adaLN-Zero (Peebles & Xie, "Scalable Diffusion Models with Transformers"): a per-layer linear map of the
time embedding yields shift/scale/gate for the attention and MLP branches. t takes only a handful of values
per sequence (one per block), so the modulation is computed per *condition slot* ``(B, K, 6D)`` and gathered
per token with ``cond_idx`` — the cost is K vectors, not S.

By default the network does not see t (kuleshov-group/bd3lms ``configs/algo/bd3lm.yaml``:
``time_conditioning: False``; ``diffusion.py: _process_sigma`` zeroes sigma): every t is replaced by 0, so
the modulation is one learned affine map shared by all tokens. A masked token already says it is masked,
and a network trained on a clipped range [β, ω] cannot then misread a t outside it at evaluation.
Every slot then holds the same vector, so ``shared_modulation`` computes it once per sequence and broadcasts
it: the same values, without the per-token gather and its backward's scatter-add into a few slots (#27).
Dropout (the reference's ``model.dropout: 0.1``) acts on the attention and MLP branches before the
residual sum, as in the reference's ``bias_dropout_add_scale``.

Attention: SDPA with a boolean mask (any device); FlexAttention with a ``BlockMask`` when one is passed
(``masks.flex_block_mask``, GPU only: it skips the fully masked tiles, about half of the 2n × 2n square).
flash-attn cannot express the block mask, so it is not used. At sampling time ``past`` holds the keys and
values of finished clean blocks, and no mask is needed: the current block sees all of them and itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gputrain.contract.vocab import VOCAB_MULTIPLE, padded_vocab

KV = tuple[torch.Tensor, torch.Tensor]


@dataclass
class DiTConfig:
    vocab_size: int
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    cond_dim: int = 128
    mlp_ratio: int = 4
    rope_base: float = 10000.0
    gradient_checkpointing: bool = False
    dropout: float = 0.0
    time_conditioning: bool = False
    vocab_multiple: int = VOCAB_MULTIPLE  # embedding and head built this wide; 1 = unpadded (before #27)
    #: without ``time_conditioning`` every token's adaLN input is the same vector: compute the modulation once
    #: per sequence and broadcast it instead of gathering it per token (same values; #27)
    shared_modulation: bool = False

    @property
    def shares_modulation(self) -> bool:
        return self.shared_modulation and not self.time_conditioning

    @property
    def padded_vocab(self) -> int:
        return padded_vocab(self.vocab_size, self.vocab_multiple)


def rotary_tables(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[:, None] * inv[None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    return out.to(x.dtype)


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended up to ``rows`` (a vocabulary-sized weight, bias or optimizer moment)."""
    return torch.cat([t, t.new_zeros((rows - t.shape[0], *t.shape[1:]))])


def pad_vocab_moments(optimizer: torch.optim.Optimizer) -> None:
    """After loading an optimizer state saved unpadded: zero-pad each moment whose first dimension is
    shorter than its parameter's (the vocabulary rows), so training resumes on the padded model.
    Registered with ``register_load_state_dict_post_hook`` by the trainer."""
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if (isinstance(value, torch.Tensor) and value.dim() == param.dim() and value.dim() > 0
                    and value.shape[0] < param.shape[0] and value.shape[1:] == param.shape[1:]):
                state[key] = pad_rows(value, param.shape[0])


class TimeEmbedding(nn.Module):
    """Sinusoidal features of 1000·t followed by an MLP (as in DiT)."""

    def __init__(self, cond_dim: int, freq_dim: int = 256) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.fc1, self.fc2 = nn.Linear(freq_dim, cond_dim), nn.Linear(cond_dim, cond_dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device).float() / half)
        args = 1000.0 * t.float()[..., None] * freqs
        feats = torch.cat([args.cos(), args.sin()], dim=-1).to(self.fc1.weight.dtype)
        return self.fc2(F.silu(self.fc1(feats)))


#: ``torch.compile`` arguments of each block per ``algorithm.compile_mode``. ``autotune-attention`` benchmarks
#: FlexAttention's forward and backward tile configurations (6 + 28 Triton kernels) and leaves the GEMMs on
#: cuBLAS (Inductor's Triton GEMM templates rarely beat the sm90 kernels and cost most of max-autotune's
#: compile); ``max-autotune-no-cudagraphs`` tunes both and the pointwise kernels' launch parameters.
COMPILE_MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "autotune-attention": {"options": {"max_autotune": True, "max_autotune_gemm_backends": "ATEN"}},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
}

_FLEX: Any = None


def compiled_flex() -> Any:
    """FlexAttention compiled once per process (uncompiled it materialises the full score matrix)."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class DiTBlock(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.heads = cfg.num_heads
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(cfg.mlp_ratio * d, d))
        self.ada = nn.Linear(cfg.cond_dim, 6 * d)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, cond_idx: torch.Tensor | None, cos: torch.Tensor,
                sin: torch.Tensor, mask: object, past: KV | None) -> tuple[torch.Tensor, KV]:
        """``cond_idx`` None: ``cond`` is one slot ``(B, 1, C)`` shared by every token (broadcast)."""
        mod = self.ada(cond) if cond_idx is None else self.ada(cond)[:, cond_idx]  # (B, S or 1, 6D)
        sh1, sc1, g1, sh2, sc2, g2 = mod.chunk(6, dim=-1)
        b, s, d = x.shape
        q, k, v = self.qkv(modulate(self.norm1(x), sh1, sc1)).view(b, s, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        new_kv = (k, v)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        if mask is None or isinstance(mask, torch.Tensor):
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            att = compiled_flex()(q, k, v, block_mask=mask)
        x = x + g1 * self.drop(self.proj(att.transpose(1, 2).reshape(b, s, d)))
        x = x + g2 * self.drop(self.mlp(modulate(self.norm2(x), sh2, sc2)))
        return x, new_kv


class DiT(nn.Module):
    """Diffusion transformer over token ids; the output head predicts ``x_0`` logits over the vocabulary."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.num_heads:
            raise ValueError("hidden_size must be a multiple of num_heads")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.padded_vocab, cfg.hidden_size)
        self.time = TimeEmbedding(cfg.cond_dim)
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, elementwise_affine=False)
        self.final_ada = nn.Linear(cfg.cond_dim, 2 * cfg.hidden_size)
        self.head = nn.Linear(cfg.hidden_size, cfg.padded_vocab)
        self.apply(self._init)
        for block in self.blocks:
            assert isinstance(block, DiTBlock)
            nn.init.zeros_(block.ada.weight)
            nn.init.zeros_(block.ada.bias)
        for layer in (self.final_ada, self.head):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self._register_load_state_dict_pre_hook(self._pad_vocab_rows)

    def _pad_vocab_rows(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        """Load weights saved unpadded (before #27, ``vocab_size`` rows): zero rows are appended up to the
        padded width. The padded rows are never read (ids < V, logits sliced), so the model is unchanged."""
        for name in ("embed.weight", "head.weight", "head.bias"):
            key = prefix + name
            if key in state and state[key].shape[0] == self.cfg.vocab_size < self.cfg.padded_vocab:
                state[key] = pad_rows(state[key], self.cfg.padded_vocab)

    def compile_blocks(self, mode: str = "default") -> None:
        """``torch.compile`` each transformer block in place (regional compilation, as torchtitan does): the
        twelve identical blocks share one compiled graph, so compiling costs one block's trace instead of the
        whole unrolled model's, and the data-dependent head rows stay outside any graph. ``mode``: one of
        :data:`COMPILE_MODES` (autotuning compiles longer; the compile phase is timed on its own)."""
        kw = COMPILE_MODES[mode]
        for block in self.blocks:
            block.compile(dynamic=False, **kw)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, t_cond: torch.Tensor,
                cond_idx: torch.Tensor, mask: object = None, past: list[KV] | None = None,
                head_len: int | None = None, head_rows: torch.Tensor | None = None, return_hidden: bool = False
                ) -> tuple[torch.Tensor, list[KV]]:
        """Logits and each layer's new keys/values.

        ``t_cond`` (B, K) holds the noise levels (read only with ``time_conditioning``), ``cond_idx`` (S,)
        picks each token's slot. Logits cover the first ``head_len`` tokens (all if None), shape
        (B, head_len, V); with ``head_rows``, a boolean (B, head_len), only those rows, shape (rows, V):
        training reads the masked positions only, which halves the head's work and the memory of the largest
        tensor in the step; or a long tensor of flat row indices into ``(B·head_len)`` (a fixed-size bucket,
        ``head_rows.py``). V is the real vocabulary: the head is ``cfg.padded_vocab`` wide (aligned GEMMs)
        and its padded columns are sliced off. ``return_hidden``: the head's input instead of its output
        (``chunked_ce`` applies the head chunk by chunk).
        """
        x = self.embed(tokens)
        if not self.cfg.time_conditioning:
            t_cond = torch.zeros_like(t_cond)
        cond = F.silu(self.time(t_cond))
        block_idx: torch.Tensor | None = cond_idx
        if self.cfg.shares_modulation:  # t is 0 everywhere: every slot holds the same vector
            cond, block_idx = cond[:, :1], None
        cos, sin = rotary_tables(positions, self.cfg.hidden_size // self.cfg.num_heads, self.cfg.rope_base)
        kvs: list[KV] = []
        for i, block in enumerate(self.blocks):
            layer_past = past[i] if past is not None else None
            if self.cfg.gradient_checkpointing and self.training:
                x, kv = checkpoint(block, x, cond, block_idx, cos, sin, mask, layer_past, use_reentrant=False)
            else:
                x, kv = block(x, cond, block_idx, cos, sin, mask, layer_past)
            kvs.append(kv)
        if head_len is not None:
            x, cond_idx = x[:, :head_len], cond_idx[:head_len]
        final = self.final_ada(cond)
        final = final[:, cond_idx] if block_idx is not None else final.expand(-1, x.shape[1], -1)
        shift, scale = final.chunk(2, dim=-1)
        if head_rows is not None and head_rows.dtype == torch.bool:
            x, shift, scale = x[head_rows], shift[head_rows], scale[head_rows]
        elif head_rows is not None:  # flat row indices of a fixed (bucketed) length: head_rows.py
            x, shift, scale = (a.flatten(0, 1).index_select(0, head_rows) for a in (x, shift, scale))
        hidden = modulate(self.final_norm(x), shift, scale)
        if return_hidden:
            return hidden, kvs
        return self.head(hidden)[..., : self.cfg.vocab_size], kvs  # the padded ids never score nor get drawn
