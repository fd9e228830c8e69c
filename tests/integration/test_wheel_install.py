"""A non-editable install carries templates/ and recipes/ (they live outside the package in the repo)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

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

    # A venv that sees the *running* environment's packages (a venv's or the system's, whichever runs the
    # tests) but not its gputrain: the site folders go on its path as plain lines of a .pth file, so their
    # own .pth files (an editable gputrain's finder among them) are not run. PYTHONPATH is dropped too.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    paths = sysconfig.get_paths()
    running = dict.fromkeys([*site.getsitepackages(), paths["purelib"], paths["platlib"]])
    Path(purelib, "running-environment.pth").write_text("".join(f"{p}\n" for p in running if Path(p).is_dir()))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                    str(wheel)], check=True, env=env)
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
