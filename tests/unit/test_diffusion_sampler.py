import torch

from gputrain.train.diffusion.hierarchy import hdp_layout
from gputrain.train.diffusion.model import DiT, DiTConfig
from gputrain.train.diffusion.objective import Layout
from gputrain.train.diffusion.sampler import sample
from gputrain.train.diffusion.schedule import LogLinearSchedule

CPU = torch.device("cpu")


def model(vocab: int) -> DiT:
    torch.manual_seed(0)
    m = DiT(DiTConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16))
    for p in m.parameters():  # leave zero-init: random logits exercise the sampler harder
        torch.nn.init.normal_(p, std=0.2)
    return m


def test_sampler_leaves_no_mask_for_any_step_count() -> None:
    vocab = 30
    for steps in (1, 2, 4, 7):
        out = sample(model(vocab), Layout.bd3(16, 4), LogLinearSchedule(), vocab - 1, 3, steps, CPU,
                     generator=torch.Generator().manual_seed(steps), first_hitting=False)
        assert out.shape == (3, 16)
        assert not (out == vocab - 1).any()
    out = sample(model(vocab), Layout.bd3(16, 4), LogLinearSchedule(), vocab - 1, 3, None, CPU,
                 generator=torch.Generator().manual_seed(0), first_hitting=True, nucleus_p=0.5)
    assert not (out == vocab - 1).any()


def test_kv_cache_matches_full_recompute() -> None:
    """A clean block's cached keys equal those of a full pass over the clean prefix (block-causal)."""
    vocab = 30
    m = model(vocab).eval()
    x = torch.randint(0, vocab - 1, (2, 8))
    t0 = torch.zeros(2, 1)
    _, kv_a = m(x[:, :4], torch.arange(4), t0, torch.zeros(4, dtype=torch.long))
    _, kv_b = m(x[:, 4:], torch.arange(4, 8), t0, torch.zeros(4, dtype=torch.long), past=kv_a)
    ids = torch.arange(8) // 4
    mask = ids[None, :] <= ids[:, None]
    _, kv_full = m(x, torch.arange(8), t0, torch.zeros(8, dtype=torch.long), mask=mask)
    for (k_b, _), (k_f, _) in zip(kv_b, kv_full, strict=True):
        assert torch.allclose(k_b, k_f[:, :, 4:], atol=1e-5)


def test_hdp_sampling_keeps_the_question() -> None:
    vocab = 30
    layout = hdp_layout(4, 4, 8, exec_block=4)
    prompt = torch.randint(0, vocab - 1, (2, 16))
    out = sample(model(vocab), layout, LogLinearSchedule(), vocab - 1, 2, 3, CPU, prompt=prompt,
                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[:, :4], prompt[:, :4])
    assert not (out == vocab - 1).any()


def test_bf16_autocast_trains_and_samples() -> None:
    """The GPU precision path (bf16 autocast) on the CPU: dtypes mix without errors, loss is finite."""
    from gputrain.train.diffusion.objective import draw_times, nelbo_per_token

    vocab, layout = 30, Layout.bd3(16, 4)
    m = DiT(DiTConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, cond_dim=16,
                      gradient_checkpointing=True))
    x0 = torch.randint(0, vocab - 1, (4, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t = draw_times(4, layout, 0.0, 1.0, True, CPU)
        loss = nelbo_per_token(m, x0, t, layout, LogLinearSchedule(), vocab - 1,
                               layout.training_inputs(CPU)).mean()
    loss.backward()
    assert torch.isfinite(loss) and m.embed.weight.grad is not None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sample(m, layout, LogLinearSchedule(), vocab - 1, 2, 2, CPU)
    assert not (out == vocab - 1).any()


def test_given_prompt_positions_are_kept_per_row_even_mid_block() -> None:
    vocab = 30
    prompt = torch.randint(0, vocab - 1, (2, 16))
    given = torch.zeros(2, 16, dtype=torch.bool)
    given[0, :6], given[1, :9] = True, True  # question lengths differ and end inside a block
    out = sample(model(vocab), Layout.bd3(16, 4), LogLinearSchedule(), vocab - 1, 2, 3, CPU, prompt=prompt,
                 given=given, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[given], prompt[given])
    assert not (out == vocab - 1).any()
