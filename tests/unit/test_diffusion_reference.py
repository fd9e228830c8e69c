"""BD3-LM trained as kuleshov-group/bd3lms trains it: each fixed point of issue 17 that a unit can hold.

t not fed to the network by default; padding neither scored nor counted; sampling steps per block from
the layout; first hitting and nucleus sampling; masks redrawn inside the clip window; the clip search a
function of the weights and the seed.
"""

from __future__ import annotations

import pytest
import torch

from gputrain.recipe.algorithms.diffusion import DiffusionAlgorithm
from gputrain.train.diffusion.clip_search import block_means, clip_candidates, search_clip
from gputrain.train.diffusion.data import ByteTokenizer, generate_problems
from gputrain.train.diffusion.evaluation import Scorer, clip_window, heldout_nelbo
from gputrain.train.diffusion.hierarchy import encode_hdp, hdp_layout
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout, draw_masks, nelbo_per_token, real_mean, real_tokens
from gputrain.train.diffusion.sampler import nucleus, sample
from gputrain.train.diffusion.schedule import LogLinearSchedule

CPU = torch.device("cpu")
VOCAB, EOS, MASK = 40, 38, 39


def random_model(time_conditioning: bool = False, vocab: int = VOCAB) -> DiT:
    """Every weight random (zero-initialised adaLN and head would hide what t and padding do)."""
    torch.manual_seed(0)
    switch = {"time_conditioning": True} if time_conditioning else {}  # the default is what is under test
    m = DiT(DiTConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16, **switch))
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return m.eval()


def test_defaults_are_the_references() -> None:
    algo = DiffusionAlgorithm()
    assert algo.time_conditioning is False and algo.loss_on_padding is False
    assert algo.ema == 0.9999 and algo.dropout == 0.1
    assert algo.adam_betas == (0.9, 0.999) and algo.adam_eps == 1e-8
    assert algo.first_hitting is True and algo.nucleus_p == 0.9 and algo.clip_resample is False
    assert algo.sampling_steps is None  # the layout's block lengths


def test_t_input_has_no_effect_by_default() -> None:
    layout = Layout.bd3(16, 4)
    inputs = layout.training_inputs(CPU)
    x = torch.randint(0, MASK, (3, 32))
    with torch.no_grad():
        outs = [random_model()(x, inputs["positions"], torch.full((3, 5), t), inputs["cond_idx"],
                               mask=inputs["mask"])[0] for t in (0.05, 0.5, 1.0)]
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
        conditioned = random_model(time_conditioning=True)  # the switch still works
        a, b = (conditioned(x, inputs["positions"], torch.full((3, 5), t), inputs["cond_idx"],
                            mask=inputs["mask"])[0] for t in (0.05, 1.0))
        assert not torch.allclose(a, b)


def rows_with_padding(n: int) -> torch.Tensor:
    """Three rows of text of different lengths, one end-of-text each, then padding to ``n``."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for length in (5, 9, 14):
        text = torch.randint(0, EOS, (length,), generator=g).tolist()
        rows.append(text + [EOS] * (n - length))
    return torch.tensor(rows)


def test_appending_padding_does_not_change_nelbo_per_real_token() -> None:
    model, sched = random_model(), LogLinearSchedule(eps=0.0)
    values, padded = [], []
    for n in (16, 24, 32):  # two more padding blocks, then four
        layout = Layout.bd3(n, 4)
        x0 = rows_with_padding(n)
        t = torch.ones(3, layout.num_noisy_blocks)  # t = 1, ε = 0: every position masked, nothing random
        with torch.no_grad():
            per_tok = nelbo_per_token(model, x0, t, layout, sched, MASK, layout.training_inputs(CPU))
        real = real_tokens(x0, layout, EOS)
        assert real.sum(dim=1).tolist() == [6, 10, 15]  # text and its end-of-text
        values.append(float(real_mean(per_tok, real)))
        padded.append(float(per_tok.mean()))
    assert values[1] == pytest.approx(values[0], abs=1e-5) and values[2] == pytest.approx(values[0], abs=1e-5)
    assert abs(padded[2] - padded[0]) > 1e-2  # the old per-position mean moves with the padding


def test_heldout_nelbo_per_real_token_is_independent_of_padding_length() -> None:
    """Through the evaluator the trainer uses: same text, more padding blocks, same number."""
    model = random_model()
    got = []
    for n in (16, 32):
        layout = Layout.bd3(n, 4)
        scorer = Scorer(layout, LogLinearSchedule(eps=0.0), MASK, EOS, layout.training_inputs(CPU))
        got.append(heldout_nelbo(scorer, model, rows_with_padding(n), 3, 1, seed=0, t_range=(1.0 - 1e-9, 1.0)))
    assert got[1]["nelbo"] == pytest.approx(got[0]["nelbo"], abs=1e-5)
    assert got[1]["nelbo_padded"] != pytest.approx(got[0]["nelbo_padded"], abs=1e-3)


def test_hdp_padding_of_plan_and_execution_is_not_scored() -> None:
    tok, q, p, e = ByteTokenizer(), 128, 32, 128
    row = generate_problems(1, seed=2)[0]
    x0 = torch.tensor([encode_hdp(tok, row, q, p, e)])
    real = real_tokens(x0, hdp_layout(q, p, e, 8, 8), tok.eos_id)[0]
    plan_text = len(x0[0, q : q + p]) - int((x0[0, q : q + p] == tok.eos_id).sum())
    assert int(real[:p].sum()) == plan_text + 1 and bool(real[:p][: plan_text + 1].all())
    answer = len(row["answer"].encode())
    assert int(real[p:].sum()) == answer + 1
    assert tok.decode(x0[0, q + p : q + p + answer].tolist()).endswith(row["answer"].split("####")[-1])


class CallLog(torch.nn.Module):
    """Records, for every network call, where the block starts, how many [MASK]s it held and its t."""

    def __init__(self, inner: DiT) -> None:
        super().__init__()
        self.inner, self.cfg = inner, inner.cfg
        self.calls: list[tuple[int, int, float]] = []

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, t: torch.Tensor, *args: object,
                **kwargs: object) -> object:
        self.calls.append((int(positions[0]), int((tokens == MASK).sum()), float(t.flatten()[0])))
        return self.inner(tokens, positions, t, *args, **kwargs)

    def denoising(self) -> dict[int, list[float]]:
        """t of each denoising call per block start (the call that fills the KV cache has no [MASK])."""
        out: dict[int, list[float]] = {}
        for start, masked, t in self.calls:
            if masked:
                out.setdefault(start, []).append(t)
        return out


HDP_PLAN_16 = hdp_layout(4, 16, 8, plan_block=0, exec_block=4)  # a whole 16-token plan, 4-token exec blocks


def sample_hdp(first_hitting: bool) -> CallLog:
    log = CallLog(random_model(time_conditioning=True))  # t-dependent: no output is reused
    prompt = torch.randint(0, EOS, (2, 28))
    sample(log, HDP_PLAN_16, LogLinearSchedule(), MASK, 2, DiffusionAlgorithm().sampling_steps, CPU,
           prompt=prompt, generator=torch.Generator().manual_seed(0), first_hitting=first_hitting)
    return log


def test_first_hitting_takes_one_step_per_token_of_each_block() -> None:
    steps = {start: len(ts) for start, ts in sample_hdp(first_hitting=True).denoising().items()}
    assert steps == {4: 16, 20: 4, 24: 4}


def test_default_sampling_steps_per_block_follow_the_layout() -> None:
    """Without first hitting, the step grid of each block has as many steps as the block has tokens."""
    grids = sample_hdp(first_hitting=False).denoising()
    assert grids[4][:2] == [1.0, pytest.approx(15 / 16)]  # the plan: 16 steps, not block_size = 4
    assert grids[20][:2] == [1.0, pytest.approx(3 / 4)] and grids[24][:2] == [1.0, pytest.approx(3 / 4)]
    assert all(len(ts) <= 16 for ts in grids.values())


def test_first_hitting_reveals_exactly_one_token_per_row_and_step() -> None:
    layout = Layout.bd3(12, 4)
    log = CallLog(random_model())
    sample(log, layout, LogLinearSchedule(), MASK, 3, None, CPU, generator=torch.Generator().manual_seed(1))
    masks = [m for _, m, _ in log.calls if m]
    assert masks == [12, 9, 6, 3] * 3  # 3 rows × 4 masked, one fewer per row at every step


def test_fixed_steps_sampler_reuses_the_output_when_nothing_was_revealed() -> None:
    """A network without t gives the same output for the same input: the reference's p_x0 cache."""
    layout = Layout.bd3(8, 4)
    log = CallLog(random_model())
    sample(log, layout, LogLinearSchedule(), MASK, 1, 64, CPU, generator=torch.Generator().manual_seed(0),
           first_hitting=False)
    calls = [len(ts) for ts in log.denoising().values()]
    assert len(calls) == 2 and all(1 <= c <= 4 for c in calls)  # 64 steps, at most one call per revealed token


@pytest.mark.slow  # a model run per candidate: 4-6 s
def test_sampling_ends_a_segment_at_its_first_end_of_text() -> None:
    vocab = 30
    m = random_model(vocab=vocab)
    with torch.no_grad():
        m.head.bias[vocab - 2] += 6.0  # end-of-text is likely
    out = sample(m, Layout.bd3(16, 4), LogLinearSchedule(), vocab - 1, 4, None, CPU,
                 generator=torch.Generator().manual_seed(0), eos_id=vocab - 2)
    ended = [row for row in out.tolist() if vocab - 2 in row[:-1]]
    assert ended, out
    for row in ended:
        first = row.index(vocab - 2)
        assert all(tok == vocab - 2 for tok in row[first:])  # padding after it, as in training data


def test_nucleus_keeps_the_references_top_p_set() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.95, 0.03, 0.01, 0.01]], dtype=torch.float64)
    kept = nucleus(probs, 0.9)
    assert torch.allclose(kept[0], torch.tensor([0.5, 0.3, 0.0, 0.0], dtype=torch.float64) / 0.8)
    assert torch.equal(kept[1], torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64))  # the top one always
    assert torch.equal(nucleus(probs, 1.0), probs)


def test_masks_are_redrawn_until_every_block_lies_in_the_window() -> None:
    slots = torch.arange(32) // 4
    g = torch.Generator().manual_seed(0)
    t = torch.full((64, 32), 0.5)
    masked = draw_masks(t, slots, LogLinearSchedule(), (0.3, 0.8), generator=g)
    share = masked.view(64, 8, 4).float().mean(-1)
    assert bool(((share >= 0.5) & (share <= 0.75)).all())  # 2 or 3 of 4: the shares inside [0.3, 0.8]
    free = draw_masks(t, slots, LogLinearSchedule(), (0.0, 1.0), generator=torch.Generator().manual_seed(0))
    assert bool(((free.view(64, 8, 4).float().mean(-1) < 0.3) | (free.view(64, 8, 4).float().mean(-1) > 0.8))
                .any())  # the full range never resamples: the bound stays unbiased
    with pytest.raises(ValueError, match="admits no masked share"):
        draw_masks(t, slots, LogLinearSchedule(), (0.3, 0.45))


def test_clip_candidates_are_the_references() -> None:
    cands = clip_candidates([0.5, 0.9], delta=0.05)
    assert (0.0, 1.0) in cands and (0.5, 1.0) in cands and (0.05, 0.95) in cands and (0.1, 1.0) in cands
    assert len(cands) == 1 + 11 + 3


def test_block_means_drop_blocks_without_real_tokens() -> None:
    per_tok = torch.tensor([[1.0, 3.0, 5.0, 7.0]])
    real = torch.tensor([[True, True, True, False]])
    assert block_means(per_tok, real, torch.tensor([0, 0, 1, 1])).tolist() == [2.0, 5.0]
    assert block_means(per_tok, torch.tensor([[True, True, False, False]]), torch.tensor([0, 0, 1, 1])).tolist() \
        == [2.0]


def test_clip_search_picks_the_lowest_variance_window() -> None:
    def estimate(i: int, lo: float, hi: float, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        spread = abs(lo - 0.3) + abs(hi - 0.8) + 0.01  # variance grows away from [0.3, 0.8]
        per_tok = torch.randn(64, 8, generator=g) * spread
        return per_tok, torch.ones_like(per_tok, dtype=torch.bool)

    best, variances = search_clip(estimate, 2, clip_candidates([0.5]), torch.arange(8) // 4, seed=0)
    assert best == (0.3, 0.8) and min(variances.values()) == variances["0.3-0.8"]


@pytest.mark.slow  # a model run per candidate: 4-6 s
def test_clip_search_picks_the_same_window_for_the_same_seed() -> None:
    """Batches, t and masks come from the seed, never from the global RNG that training advances."""
    model, layout = random_model(), Layout.bd3(16, 4)
    scorer = Scorer(layout, LogLinearSchedule(), MASK, EOS, layout.training_inputs(CPU))
    val_x = rows_with_padding(16).repeat(4, 1)
    cands = clip_candidates([0.5, 0.7], delta=0.1)
    runs = []
    for global_seed in (1, 2, 3):
        torch.manual_seed(global_seed)
        runs.append(clip_window(scorer, model, val_x, 8, 2, cands, seed=5))
    assert runs[0] == runs[1] == runs[2]
    assert len(set(runs[0][1].values())) == len(cands)  # the windows were told apart


def test_lower_bound_at_the_floor_is_not_enforced() -> None:
    t = torch.full((32, 4), 0.2)
    masked = draw_masks(t, torch.arange(4) // 4, LogLinearSchedule(), (0.0, 0.3),
                        generator=torch.Generator().manual_seed(0))
    share = masked.float().mean(-1)
    assert bool((share <= 0.3).all()) and bool((share == 0).any())  # empty blocks allowed: β = 0 is the floor
