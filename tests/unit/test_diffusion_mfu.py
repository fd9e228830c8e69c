import pytest

from gputrain.train.diffusion.mfu import flops_per_sequence, mfu, peak_flops
from gputrain.train.diffusion.model import DiTConfig


def test_flops_count_both_halves_of_the_sequence() -> None:
    cfg = DiTConfig(vocab_size=1000, hidden_size=64, num_layers=2, mlp_ratio=4)
    n = 128
    body = 2 * (4 * 64 * 64 + 2 * 4 * 64 * 64)
    expected = 6 * (body * 2 * n + 64 * 1000 * n) + 12 * 2 * 64 * (2 * n) ** 2
    assert flops_per_sequence(cfg, 2 * n, n) == expected
    assert flops_per_sequence(cfg, 2 * n, n) > 2 * flops_per_sequence(cfg, n, n) - 6 * 64 * 1000 * n


def test_mfu_uses_the_device_peak() -> None:
    cfg = DiTConfig(vocab_size=1000, hidden_size=64, num_layers=2)
    assert peak_flops("NVIDIA H200") == pytest.approx(989e12)
    assert mfu(cfg, 256, 128, 1.0, "cpu") is None
    got = mfu(cfg, 256, 128, 1000.0, "NVIDIA H100 80GB HBM3")
    assert got == pytest.approx(flops_per_sequence(cfg, 256, 128) * 1000.0 / 989e12)
