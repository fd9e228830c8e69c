"""The one learning-rate schedule: warm-up ramp, then cosine / linear / constant."""

from __future__ import annotations

import pytest

from gputrain.train.runtime.schedule import lr_factor


def test_warmup_then_each_shape() -> None:
    cosine = lr_factor("cosine", warmup=4, total=104)
    assert [cosine(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert cosine(54) == pytest.approx(0.5) and cosine(104) == pytest.approx(0.0)
    linear = lr_factor("linear", warmup=0, total=10)
    assert linear(0) == 1.0 and linear(5) == pytest.approx(0.5) and linear(20) == 0.0
    assert lr_factor("constant", warmup=2, total=10)(9) == 1.0


def test_unknown_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown lr_schedule"):
        lr_factor("exponential", 0, 10)
