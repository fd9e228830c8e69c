"""Red-team round 4 — ``secrets:`` names values to forward, never a switch of the shell, loader or sandbox.

The recipe's ``env`` cannot set ``GPUTRAIN_SANDBOX_ALLOW_WEAK`` or ``LD_PRELOAD`` (#25.9), but its
``secrets:`` list could *name* them: ``runpod up`` then copies the launching user's own value to the pod's
training (``NAME=value`` on ssh's stdin, ``set -a``). A user who allows weak isolation on their laptop
(``GPUTRAIN_SANDBOX_ALLOW_WEAK=1``, say because it has no user namespaces) thus had it switched on for the
pod's code reward by any recipe that asked; ``PATH``/``PYTHONPATH``/``LD_PRELOAD``/``BASH_ENV`` of the laptop
replaced the image's. Refused at load time (one line naming the key) and again where secrets are forwarded
(a ``plan.json`` edited by hand).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gputrain.backends.runpod.up import forwarded_secrets
from gputrain.errors import RecipeError
from gputrain.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SELFTEST = ROOT / "recipes" / "selftest.yaml"
SWITCHES = ["GPUTRAIN_SANDBOX_ALLOW_WEAK", "GPUTRAIN_SANDBOX_DISABLE", "LD_PRELOAD", "PYTHONPATH", "PATH",
            "BASH_ENV"]


@pytest.mark.parametrize("name", SWITCHES)
def test_a_recipe_cannot_forward_a_switch_as_a_secret(tmp_path: Path, name: str) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(SELFTEST.read_text() + "\n" + yaml.safe_dump({"secrets": ["HF_TOKEN", name]}))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert name in str(info.value) and "\n" not in str(info.value)


def test_a_hand_edited_plan_does_not_forward_them_either(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SWITCHES:
        monkeypatch.setenv(name, "1" if name.startswith("GPUTRAIN") else "/home/me/x")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert forwarded_secrets(["HF_TOKEN", *SWITCHES]) == ["HF_TOKEN"]
