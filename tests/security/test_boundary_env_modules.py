"""Red-team round 5 — a recipe cannot choose the folder Python modules are imported from (``HF_MODULES_CACHE``,
and ``HF_HOME``, whose ``modules/`` it is by default).

What the libraries do with it (read in the installed sources, transformers 5.23, datasets 5.2,
huggingface_hub 2.4): transformers' ``dynamic_module_utils`` is the one reader. To load a repository's own
code it appends ``HF_MODULES_CACHE`` to ``sys.path`` and imports
``transformers_modules.<org>.<repo>.<commit>.<file>`` from it, copying the repository's file there only when
no file of that name is there yet: a file already in the folder is what runs, not the repository's. datasets
5.2 defines the name and no longer reads it (datasets 3.x, which ``pyproject.toml`` still admits, loads
dataset scripts through it the same way); ``TRANSFORMERS_CACHE`` and ``XDG_CACHE_HOME`` have no allowed
prefix and were refused already. Every such import sits behind ``trust_remote_code=True``, which no shipped
entrypoint passes today, so today's trainers do not reach it; but the variable has no tuning use at all: it
is an import root, ``PYTHONPATH``'s sibling, and a recipe that names one (a hub snapshot it had downloaded
earlier, whose path it knows) decides which Python runs the first time any code path trusts a repository.
The data caches next to it (``HF_HUB_CACHE``, ``HF_DATASETS_CACHE``, ``HF_XET_CACHE``) hold files the job
reads as data (safetensors, Arrow, JSON), what the recipe can already choose by naming a model or dataset:
they stay allowed (``test_the_data_caches_stay_allowed``). A site's cache location is the cluster profile's
``cache_dir`` (rendered as ``HF_HOME``), or the user's own environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gputrain.errors import RecipeError
from gputrain.recipe.env_policy import env_name_allowed
from gputrain.recipe.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SELFTEST = ROOT / "recipes" / "selftest.yaml"
CANARY = "CANARY_planted_module_ran_5c0ffee"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _recipe_with_env(tmp_path: Path, env: dict[str, str]) -> Path:
    path = tmp_path / "shared.yaml"
    path.write_text(SELFTEST.read_text(encoding="utf-8") + "\n" + yaml.safe_dump({"env": env}), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["HF_MODULES_CACHE", "HF_HOME"])
def test_a_recipe_cannot_choose_where_python_modules_are_imported_from(tmp_path: Path, name: str) -> None:
    path = _recipe_with_env(tmp_path, {"NCCL_DEBUG": "WARN", name: "/tmp/hf/hub/datasets--evil--d/snapshots/0"})
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"  {name}:"))
    assert "\n" not in message and name in message and "import" in message
    assert message.startswith(f"{path}:{line}:"), message


def test_the_data_caches_stay_allowed() -> None:
    for name in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_XET_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        assert env_name_allowed(name), name


def _hub_snapshot(hub: Path) -> None:
    """A hub cache holding ``trusted/model`` at ``COMMIT``: a config whose class is the repository's own code."""
    repo = hub / "models--trusted--model"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (snap / "config.json").write_text(json.dumps({"model_type": "xcfg", "auto_map": {
        "AutoConfig": "configuration_x.XConfig"}}))
    (snap / "configuration_x.py").write_text(
        "from transformers import PretrainedConfig\n\nclass XConfig(PretrainedConfig):\n    model_type = 'xcfg'\n")


@pytest.mark.slow
def test_the_module_cache_decides_which_code_a_trusted_repository_runs(tmp_path: Path) -> None:
    """Why the name is refused, checked against the installed transformers: a file planted in the folder
    ``HF_MODULES_CACHE`` names runs in place of the repository's own ``configuration_x.py``."""
    _hub_snapshot(tmp_path / "hub")
    planted = tmp_path / "planted" / "transformers_modules" / "trusted" / "model" / COMMIT
    planted.mkdir(parents=True)
    (planted / "configuration_x.py").write_text(
        f"print({CANARY!r})\nfrom transformers import PretrainedConfig\n\n"
        "class XConfig(PretrainedConfig):\n    model_type = 'xcfg'\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"),
           "HF_MODULES_CACHE": str(tmp_path / "planted"), "TRANSFORMERS_VERBOSITY": "error"}
    code = ("from transformers import AutoConfig\n"
            "AutoConfig.from_pretrained('trusted/model', trust_remote_code=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert CANARY in proc.stdout, "transformers no longer imports from HF_MODULES_CACHE: revisit this refusal"
