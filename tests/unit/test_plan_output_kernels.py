"""The plan's text says the path it priced: the attention row names the resolver's choice and the MFU line the
efficiency the step time was computed at (it said "flash-attn … else sdpa" and 35 % while the step used flex +
compile at the measured 40 %)."""

from __future__ import annotations

import re

from tests.conftest import RECIPES
from tests.support.cli import gputrain


def test_the_attention_row_and_the_mfu_line_name_the_priced_path() -> None:
    res = gputrain("plan", str(RECIPES / "bd3lm_gsm8k.yaml"), "--gpu", "H100")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    attention = next(line for line in out.splitlines() if line.strip().startswith("attention"))
    assert "flex" in attention and "flash-attn if installed" not in attention, attention
    priced = re.search(r"at ([\d.]+)% MFU measured", out)
    shown = re.search(r"compute at ([\d.]+)% MFU", out)
    assert priced and shown, out
    assert round(float(priced.group(1))) == round(float(shown.group(1))), (priced.group(0), shown.group(0))
