import pytest

from gputrain.train.diffusion.mfu import flops_per_sequence, mfu
from gputrain.train.diffusion.model import DiTConfig


def test_flops_count_both_halves_of_the_sequence() -> None:
    cfg = DiTConfig(vocab_size=1000, hidden_size=64, num_layers=2, mlp_ratio=4)
    n = 128
    body = 2 * (4 * 64 * 64 + 2 * 4 * 64 * 64)
    expected = 6 * (body * 2 * n + 64 * 1000 * n) + 12 * 2 * 64 * (2 * n) ** 2
    assert flops_per_sequence(cfg, 2 * n, n) == expected
    assert flops_per_sequence(cfg, 2 * n, n) > 2 * flops_per_sequence(cfg, n, n) - 6 * 64 * 1000 * n


def test_mfu_uses_the_catalog_peak_from_the_plan() -> None:
    """The peak comes from the hardware catalog (the plan's GPU), not a table of the trainer's own."""
    from gputrain.hardware.catalog import get_gpu

    cfg = DiTConfig(vocab_size=1000, hidden_size=64, num_layers=2)
    peak = get_gpu("H200").tflops_bf16
    assert peak == pytest.approx(989)
    assert mfu(cfg, 256, 128, 1.0, None) is None
    got = mfu(cfg, 256, 128, 1000.0, peak)
    assert got == pytest.approx(flops_per_sequence(cfg, 256, 128) * 1000.0 / 989e12)
    assert flops_per_sequence(cfg, 256, 128, attention=False) == pytest.approx(
        flops_per_sequence(cfg, 256, 128) - 12 * 2 * 64 * 256**2)
