"""`gputrain validate` lists every problem of a recipe (#31.9): the plan's one-line error says how many more
there are and where to see them; `--json` gives them to a program."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.cli import gputrain as run_gputrain

BAD = """\
name: x
entrypoint: selftest
model: {name: none}
train: {batch_size: 1, max_stepz: 3, learning_rate: 1.0e-3}
resources: {gpus: 1, nodes: 1, time: "00:05:00", memory_gb: 1, cpus_per_gpu: 1}
bogus: 1
"""


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gputrain(*args, cwd=cwd, env=dict(os.environ))


def test_validate_lists_every_error_and_json_gives_them(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    text = _cli(tmp_path, "validate", "bad.yaml")
    assert text.returncode == 2 and "Traceback" not in text.stderr
    lines = text.stderr.splitlines()
    assert any("bad.yaml:4:" in line and "'train.max_stepz'; did you mean 'train.max_steps'?" in line for line in lines)
    assert any("bad.yaml:6:1: unknown key 'bogus'" in line for line in lines)
    rows = json.loads(_cli(tmp_path, "validate", "bad.yaml", "selftest", "--json").stdout)
    assert [(r["recipe"], r["ok"]) for r in rows] == [("bad.yaml", False), ("selftest", True)]
    assert len(rows[0]["errors"]) == 2 and all(e.startswith("bad.yaml:") for e in rows[0]["errors"])
    planned = _cli(tmp_path, "plan", "bad.yaml", "--gpu", "cpu")
    assert planned.returncode == 2 and "(+1 more: `gputrain validate` lists them)" in planned.stderr
