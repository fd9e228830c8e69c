"""Cluster profiles: built-ins, user file, GRES spelling, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputrain.errors import ClusterError
from gputrain.hardware.clusters import list_clusters, load_cluster


@pytest.fixture(autouse=True)
def _no_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(tmp_path / "absent.yaml"))


def test_supercloud_builtin_asks_volta_gres() -> None:
    sc = load_cluster("supercloud")
    assert sc.gpu == "V100-32GB" and sc.gpus_per_node == 2
    assert sc.gres_option(2) == "--gres=gpu:volta:2"
    assert any("module load anaconda" in line for line in sc.setup)


def test_gres_styles() -> None:
    sc = load_cluster("supercloud")
    assert sc.model_copy(update={"gres_style": "plain"}).gres_option(4) == "--gres=gpu:4"
    assert sc.model_copy(update={"gres_style": "gpus-per-node"}).gres_option(4) == "--gpus-per-node=volta:4"
    assert sc.gres_option(0) is None


def test_unknown_cluster_lists_known_names() -> None:
    with pytest.raises(ClusterError, match="supercloud, testbed"):
        load_cluster("nope")


def test_user_file_adds_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text("mylab:\n  gpu: A100-80GB\n  gpus_per_node: 4\n  gres_style: plain\n"
                   "supercloud:\n  gpu: V100-32GB\n  partition: xeon-g6-volta\n")
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(cfg))
    assert load_cluster("mylab").gres_option(4) == "--gres=gpu:4"
    assert load_cluster("supercloud").partition == "xeon-g6-volta"
    assert {c.name for c in list_clusters()} == {"mylab", "supercloud", "testbed"}


def test_bad_user_profile_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text("mylab:\n  gpus_per_nodes: 4\n")
    monkeypatch.setenv("GPUTRAIN_CONFIG", str(cfg))
    with pytest.raises(ClusterError) as info:
        load_cluster("mylab")
    assert "gpus_per_nodes" in str(info.value) and "\n" not in str(info.value)
    cfg.write_text("mylab:\n  max_time: 12h\n")
    with pytest.raises(ClusterError, match="max_time"):
        load_cluster("mylab")
