"""Shell completion of values (recipe names, GPU types, clusters, presets, job ids) through the real
completion protocol, and the XDG base directories for data and config (#31 point 12)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputrain.hardware.clusters import config_path
from gputrain.home import gputrain_home
from gputrain.registry.store import JobRecord, JobRegistry
from tests.support.cli import gputrain as run_gputrain


def _complete(words: str, tmp_path: Path, **env: str) -> list[str]:
    """What bash would offer for the last word of ``words`` (the script `gputrain --show-completion` installs)."""
    cword = len(words.split()) - 1
    full = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_GPUTRAIN_COMPLETE": "complete_bash",
            "GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "c.yaml"), **env}
    proc = run_gputrain(env=full, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.split()


def test_completes_recipe_names_gpu_types_clusters_and_presets(tmp_path: Path) -> None:
    assert _complete("gputrain plan gnn", tmp_path) == ["gnn_coloring"]
    assert _complete("gputrain run selft", tmp_path) == ["selftest"]
    assert "H100-80GB" in _complete("gputrain plan gnn_coloring --gpu H1", tmp_path)
    assert _complete("gputrain submit gnn_coloring --cluster superc", tmp_path) == ["supercloud"]
    assert _complete("gputrain plan bd3lm_gsm8k --preset rec", tmp_path) == ["recommended"]


def test_completes_job_ids_from_the_registry(tmp_path: Path) -> None:
    registry = JobRegistry(tmp_path / "home" / "jobs.db")
    registry.add(JobRecord(job_id="", backend="local", recipe="selftest"))
    assert _complete("gputrain logs loc", tmp_path) == ["local-1"]
    assert _complete("gputrain cancel loc", tmp_path) == ["local-1"]


def test_data_and_config_follow_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUTRAIN_HOME", raising=False)
    monkeypatch.delenv("GPUTRAIN_CONFIG", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert gputrain_home() == tmp_path / "data" / "gputrain"
    assert config_path() == tmp_path / "config" / "gputrain" / "clusters.yaml"
    monkeypatch.setenv("GPUTRAIN_HOME", str(tmp_path / "mine"))  # the explicit variable still wins
    assert gputrain_home() == tmp_path / "mine"


def test_without_xdg_the_old_defaults_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUTRAIN_HOME", "GPUTRAIN_CONFIG", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # not absolute: ignored, as the XDG spec says
    assert gputrain_home() == Path("~/.local/share/gputrain").expanduser()
    assert config_path() == Path("~/.config/gputrain/clusters.yaml").expanduser()
