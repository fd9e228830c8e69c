"""benchmarks/diffusion_seeds.py: the best-constant (unigram) predictor is scored by the trainer's own evaluator."""

from __future__ import annotations

import math
from types import ModuleType

from tests.support.benchmarks import load_benchmark


def _module() -> ModuleType:
    return load_benchmark("diffusion_seeds")


def test_unigram_scores_through_heldout_nelbo_on_an_hdp_layout() -> None:
    """The evaluator hands the model flat indices of the scored positions (bucketed head rows): the unigram
    predictor once read them as a mask and summed the indices, a shape error on every HDP/BD3-LM job."""
    import torch

    from gputrain.train.diffusion.data import ByteTokenizer, generate_problems
    from gputrain.train.diffusion.evaluation import heldout_nelbo
    from gputrain.train.diffusion.export import Pretrained
    from gputrain.train.diffusion.hierarchy import encode_hdp, hdp_layout
    from gputrain.train.diffusion.model import DiT, DiTConfig
    from gputrain.train.diffusion.schedule import LogLinearSchedule

    seeds = _module()
    tok = ByteTokenizer()
    layout = hdp_layout(32, 8, 32, 4, 4)
    val = torch.tensor([encode_hdp(tok, r, 32, 8, 32) for r in generate_problems(4, 5)])
    net = DiT(DiTConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, cond_dim=16)).eval()
    pre = Pretrained(net, layout, LogLinearSchedule(1e-3), tok.mask_id, tok.eos_id, {})
    const = seeds.unigram(val, tok.eos_id, tok.vocab_size, layout)
    nelbo = heldout_nelbo(pre.scorer(), const, val, 4, 1, seed=0)["nelbo"]
    # a context-free predictor fitted on these very rows: finite, and below the uniform predictor's ln(257)
    assert math.isfinite(nelbo) and 0 < nelbo < math.log(tok.vocab_size - 1)
