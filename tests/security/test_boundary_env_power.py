"""Red-team round 4 — an allow-listed prefix is not a licence: library variables that send credentials
elsewhere, load code or choose files are refused in a recipe.

The attacks (each accepted by the allow-list of #25.9, which admits every name under ``HF_*``, ``WANDB_*``,
``NCCL_*`` and ``TORCH_NCCL_*`` as "tuning knobs"):

- ``HF_ENDPOINT: https://attacker`` — the hub client sends the user's token (``HF_TOKEN`` forwarded by the
  recipe's ``secrets:``, or ``~/.cache/huggingface/token``) as ``Authorization: Bearer`` to that server:
  checked by hand with transformers 5.23 / huggingface_hub 2.4 against a local HTTP server, the token
  arrived on the first ``/api/models/...`` request. ``WANDB_BASE_URL`` does the same with the W&B key, and
  ``*_PROXY`` routes the traffic through the recipe's server.
- ``NCCL_NET_PLUGIN`` / ``NCCL_TUNER_PLUGIN`` / ``NCCL_PROFILER_PLUGIN`` / ``NCCL_ENV_PLUGIN`` take a path to
  a shared library that NCCL ``dlopen``s in every rank (NCCL and RCCL docs): a recipe that also picks
  ``HF_HOME`` and a hub repository knows where its own ``.so`` lands, so this is code execution.
- ``NCCL_DEBUG_FILE`` / ``NCCL_TOPO_DUMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` write (truncate) a
  file the recipe names (``~/.bashrc``); ``NCCL_CONF_FILE`` reads more NCCL variables — plugins included —
  from a file.

Each must be refused at load time like ``LD_PRELOAD`` is: one line naming the key at its ``file:line``,
through the recipe, ``--set env.X=...`` and a profile. The user may still set them in their own environment.
"""

from __future__ import annotations

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
CLI = [sys.executable, "-m", "gputrain.cli.main"]

#: (name, a value an attacker would give it)
POWERFUL = [
    ("HF_ENDPOINT", "https://hub.attacker.example"),
    ("HF_INFERENCE_ENDPOINT", "https://hub.attacker.example"),
    ("WANDB_BASE_URL", "https://wandb.attacker.example"),
    ("WANDB_HTTPS_PROXY", "http://proxy.attacker.example:3128"),
    ("NCCL_NET_PLUGIN", "/tmp/hf/hub/models--evil--m/snapshots/0/libevil.so"),
    ("NCCL_TUNER_PLUGIN", "/tmp/libevil.so"),
    ("NCCL_PROFILER_PLUGIN", "/tmp/libevil.so"),
    ("NCCL_ENV_PLUGIN", "/tmp/libevil.so"),
    ("NCCL_CONF_FILE", "/tmp/nccl.conf"),
    ("NCCL_DEBUG_FILE", "/home/user/.bashrc"),
    ("NCCL_TOPO_DUMP_FILE", "/home/user/.profile"),
    ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/home/user/.bashrc"),
]


def _recipe_with_env(tmp_path: Path, env: dict[str, str]) -> Path:
    path = tmp_path / "shared.yaml"
    path.write_text(SELFTEST.read_text(encoding="utf-8") + "\n" + yaml.safe_dump({"env": env}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "value"), POWERFUL)
def test_a_recipe_cannot_redirect_credentials_load_code_or_name_files(tmp_path: Path, name: str,
                                                                      value: str) -> None:
    path = _recipe_with_env(tmp_path, {"NCCL_DEBUG": "WARN", name: value})
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"  {name}:"))
    assert "\n" not in message and name in message
    assert message.startswith(f"{path}:{line}:"), message


def test_set_cannot_point_the_hub_at_another_server(tmp_path: Path) -> None:
    proc = subprocess.run([*CLI, "plan", str(SELFTEST), "--gpu", "cpu", "--gpus", "2",
                           "--set", "env.HF_ENDPOINT=https://hub.attacker.example"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "HF_ENDPOINT" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_tuning_knobs_next_to_them_stay_allowed() -> None:
    for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT", "WANDB_PROJECT",
                 "WANDB_MODE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME",
                 "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        assert env_name_allowed(name), name


@pytest.mark.parametrize("value", ["{{ RUNPOD_SECRET_aws_key }}", "eth0{{RUNPOD_SECRET_db}}"])
def test_a_recipe_value_cannot_pull_a_platform_secret_into_the_pod(tmp_path: Path, value: str) -> None:
    """RunPod replaces ``{{ RUNPOD_SECRET_name }}`` in a pod's env values with the account's stored secret
    at boot (docs.runpod.io, "Manage secrets"): a recipe's ``env`` value would put the user's secret into
    the pod's environment, where ``NCCL_DEBUG=INFO`` prints ``NCCL_SOCKET_IFNAME``'s value into the log."""
    path = _recipe_with_env(tmp_path, {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": value})
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert "NCCL_SOCKET_IFNAME" in str(info.value) and "\n" not in str(info.value)
