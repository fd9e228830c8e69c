"""A non-editable install carries templates/ and recipes/ (they live outside the package in the repo), and
``pip install .`` without an extra (no torch) plans and renders (#31: CI plans with torch absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.core_venv import closure, core_requirements, link_into

pytestmark = pytest.mark.integration


def test_wheel_ships_templates_and_recipes_and_finds_them(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(dist), str(src)], check=True)
    wheel = next(dist.glob("gputrain-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "gputrain/templates/launch.sh.j2" in names
    assert "gputrain/recipes/gnn_coloring.yaml" in names
    assert "gputrain/data/catalog.yaml" in names

    # A venv with what `pip install .` gives and nothing more: the wheel and the closure of the core dependencies
    # (linked from the running environment, tests/support/core_venv.py), no extra: torch is absent.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    link_into(Path(purelib), closure(core_requirements(ROOT / "pyproject.toml")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTRAIN_HOME")}
    env |= {"GPUTRAIN_HOME": str(tmp_path / "home"), "GPUTRAIN_CONFIG": str(tmp_path / "clusters.yaml")}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "-q", str(wheel)], check=True, env=env)
    probe = (
        "import gputrain.resources as r, gputrain;"
        "print(gputrain.__file__); print(r.templates_dir()); print(r.recipes_dir())"
    )
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env=env)
    module, templates, recipes = out.stdout.split()
    assert module.startswith(str(env_dir)), "the wheel's copy must be imported, not the checkout"
    assert templates.startswith(str(env_dir)) and recipes.startswith(str(env_dir))
    script = env_dir / "bin" / "gputrain"  # the console script the wheel installs
    plan = subprocess.run([str(script), "plan", "gnn_coloring", "--gpu", "cpu", "--gpus", "2", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["recipe"]["name"] == "gnn_coloring"
    _plans_without_torch(env_dir, src, env)


def _plans_without_torch(env_dir: Path, src: Path, env: dict[str, str]) -> None:
    """The README's first minute before any extra: --help, and its `gputrain plan` lines, run from the clone."""
    python, script = env_dir / "bin" / "python", env_dir / "bin" / "gputrain"
    absent = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True, env=env)
    assert absent.returncode != 0 and "No module named 'torch'" in absent.stderr, "torch must be absent here"
    helped = subprocess.run([str(script), "--help"], cwd=src, capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "plan" in helped.stdout, helped.stderr
    # what needs the `train` extra says so in one line (exit 2), before recording or fetching anything
    for args, missing in ((["run", "selftest", "--gpu", "cpu", "--gpus", "2"], "torch"),
                          (["plan", "selftest", "--gpu", "cpu", "--probe"], "torch"),
                          (["prepare", "grpo_code_mbpp", "--cluster", "supercloud"], "huggingface_hub")):
        bare = subprocess.run([str(script), *args], cwd=src, capture_output=True, text=True, env=env)
        assert bare.returncode == 2 and "`train` extra" in bare.stderr and missing in bare.stderr, bare.stderr
        assert len(bare.stderr.strip().splitlines()) == 1 and not (src / "logs").exists(), bare.stderr
    readme = (src / "README.md").read_text()
    first = readme[readme.index("## First minute"):]
    first = first[: first.index("\n## ", 1)]
    plans = [line.split("#")[0].strip() for line in first.splitlines() if line.startswith("gputrain plan ")]
    assert plans, "the README's first minute plans a job"
    for line in plans:
        args = line.split()[1:]
        done = subprocess.run([str(script), *args], cwd=src, capture_output=True, text=True, env=env)
        assert done.returncode == 0, f"{line}: {done.stderr}"
        assert re.search(r"memory|GiB", done.stdout), done.stdout[-2000:]
