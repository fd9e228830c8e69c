"""Property tests: hostile values in every field of a recipe or cluster profile never run a command.

Hypothesis puts a hostile string (shell metacharacters, command substitutions, newlines, carriage returns,
NUL and other control characters, option-looking text) into one field of the recipe schema (every leaf
field, found by walking the pydantic models), of the cluster schema, or into the recipe's *file name*.
Either gputrain refuses with a one-line error, or it renders every target (local, slurm, docker) and the
scripts are executed by bash with a PATH of stub binaries (sbatch, srun, scontrol, torchrun, python, ...)
that only record their argv. A canary file named in every payload must never exist afterwards, and every
script must pass ``bash -n``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gputrain.errors import GputrainError
from gputrain.hardware.clusters import ClusterProfile
from gputrain.planner import make_plan
from gputrain.recipe.schema import Recipe, algorithm_model
from gputrain.render import render_artifacts

ROOT = Path(__file__).resolve().parents[2]


def examples(full: int) -> int:
    """Hypothesis examples per property: all of them under CI (``CI=true``), a quarter in the working loop
    (``pytest -m "not slow"``), so every property stays in the loop at a quarter of its time."""
    return full if os.environ.get("CI") == "true" else max(10, full // 4)

BASE = yaml.safe_load((ROOT / "recipes" / "selftest.yaml").read_text(encoding="utf-8"))
STUBS = ("sbatch", "srun", "scontrol", "squeue", "scancel", "torchrun", "python", "python3", "docker", "pgrep",
         "gputrain", "module", "nvidia-smi", "hostname")
CANARY_NAME = "gputrain-hostile-canary"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def fresh_base() -> dict[str, Any]:
    return {**copy.deepcopy(BASE), "env": {}, "secrets": []}


def _leaf_fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
            annotation = args[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += _leaf_fields(annotation, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


RECIPE_FIELDS = sorted(
    {f for f in _leaf_fields(Recipe) if f[0] not in ("algorithm", "profiles")}
    | {("algorithm", *f) for f in _leaf_fields(algorithm_model("selftest"))}
    | {("env", "RECIPE_HOSTILE"), ("env", "<key>"), ("secrets", "<item>"), ("profiles", "cpu", "description")}
)
CLUSTER_FIELDS = sorted(set(ClusterProfile.model_fields) - {"name", "setup"} | {"setup:single-line"})


def payloads(canary: str) -> st.SearchStrategy[str]:
    shell = [f"$(touch {canary})", f"`touch {canary}`", f"; touch {canary}", f"' ; touch {canary} ; '",
             f'" ; touch {canary} ; "', f"-oProxyCommand=touch {canary}", f"x || touch {canary}",
             f"a & touch {canary}", f"> {canary}", "${IFS}", f"%j; touch {canary}", f"\\$(touch {canary})"]
    controls = [f"\ntouch {canary}\n", f"x\rtouch {canary}", f"a\x00b; touch {canary}", f"\x1b]52;c;{canary}\x07",
                f"12:00:00\ntouch {canary}", f"debug\n#SBATCH --wrap=touch {canary}", f"volta\ntouch {canary}"]
    printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2030, exclude_characters="\x7f"),
                        max_size=12)
    anything = st.text(st.characters(min_codepoint=0, max_codepoint=0x2030), max_size=12)
    return st.one_of(
        st.sampled_from(shell), st.tuples(printable, st.sampled_from(shell)).map("".join),
        st.sampled_from(controls), st.tuples(anything, st.sampled_from(shell + controls)).map("".join),
    )


@contextlib.contextmanager
def sandbox_dir(tmp: Path) -> Iterator[Path]:
    """A fresh folder with stub binaries, as the working directory, and a private GPUTRAIN_CONFIG."""
    work = tmp / f"run{len(list(tmp.iterdir()))}"
    (work / "bin").mkdir(parents=True)
    for name in STUBS:
        stub = work / "bin" / name
        stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >> "{work}/argv.log"\n'
                        'case "$1" in show) echo "NodeAddr=127.0.0.1";; esac\nexit 0\n')
        stub.chmod(0o755)
    old_cwd, old_config = os.getcwd(), os.environ.get("GPUTRAIN_CONFIG")
    os.chdir(work)
    os.environ["GPUTRAIN_CONFIG"] = str(work / "clusters.yaml")
    try:
        yield work
    finally:
        os.chdir(old_cwd)
        if old_config is None:
            os.environ.pop("GPUTRAIN_CONFIG", None)
        else:
            os.environ["GPUTRAIN_CONFIG"] = old_config


def _set(data: dict[str, Any], field: tuple[str, ...], value: str) -> None:
    if field == ("env", "<key>"):
        data["env"] = {value: "1"}
        return
    if field == ("secrets", "<item>"):
        data["secrets"] = [value]
        return
    node = data
    for part in field[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return
    node[field[-1]] = value


#: Checked with ``bash -n`` only: the image's entry script starts sshd and waits (it has no recipe value
#: outside a comment, and its comment holds only the validated recipe name).
NOT_EXECUTED = ("run.sh",)
# `python: python` makes the job run the stub `python` from PATH (by default it is the submitting interpreter's
# absolute path, which would start a real training for every example).
BENIGN_CLUSTER = {"gpus_per_node": 1, "setup": ["true"], "python": "python"}


def _run_scripts(work: Path, files: dict[str, str]) -> None:
    env = {"PATH": f"{work}/bin:/usr/bin:/bin", "HOME": str(work), "PYTHON": str(work / "bin" / "python"),
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0", "GPUTRAIN_JOB_DIR": str(work)}
    for name, text in files.items():
        if not (name.endswith(".sh") or name.endswith(".sbatch")):
            continue
        script = work / name
        script.write_text(text)
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, (name, check.stderr)
        if name in NOT_EXECUTED:
            continue
        subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL)


def _render_all(recipe: Path, cluster: str) -> list[dict[str, str]]:
    rendered = []
    for target in ("local", "docker", "slurm"):
        gpu = "V100-32GB" if target == "slurm" else "cpu"  # a GPU plan: the GRES line is rendered too
        plan = make_plan(recipe, gpu=gpu, gpus_per_node=1, cluster=cluster if target == "slurm" else None,
                         target=target)
        rendered.append(render_artifacts(plan, target=target))
    return rendered


def _attempt(work: Path, recipe_data: dict[str, Any], recipe_name: str, cluster: dict[str, Any] | None,
             *, must_render: bool = False) -> None:
    try:
        recipe = work / recipe_name
        recipe.write_text(yaml.safe_dump(recipe_data, allow_unicode=True))
        profile = cluster if cluster is not None else BENIGN_CLUSTER
        (work / "clusters.yaml").write_text(yaml.safe_dump({"hostile": profile}, allow_unicode=True))
        rendered = _render_all(recipe, "hostile")
    except GputrainError as exc:
        assert not must_render, f"free text was refused: {exc}"
        assert "\n" not in str(exc) and "\r" not in str(exc), repr(str(exc))
        event(f"refused: {type(exc).__name__}")
        return
    except (OSError, ValueError, yaml.YAMLError):
        return  # a file name the file system refuses, or text YAML cannot carry: nothing to render
    event("rendered and executed")
    for files in rendered:
        _run_scripts(work, files)
    made = sorted(p.name for p in work.glob(CANARY_NAME + "*"))  # also `touch canary:1'` from a cut line
    assert not made, f"a hostile value ran a command ({made}): {(work / 'argv.log').read_text()[-2000:]}"


SETTINGS = settings(max_examples=examples(120), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(data=st.data())
def test_hostile_recipe_values_never_run(tmp_path: Path, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(RECIPE_FIELDS), label="field")
    with sandbox_dir(tmp_path) as work:
        value = data.draw(payloads(str(work / CANARY_NAME)), label="value")
        recipe = fresh_base()
        _set(recipe, field, value)
        _attempt(work, recipe, "recipe.yaml", None)


#: Fields that take any single-line text: the payload must reach the scripts (quoted) and stay inert.
#: (``data.source`` is not one for the base recipe: selftest generates its data and refuses any other source,
#: tests/unit/test_data_source_honoured.py.)
FREE_TEXT = [("env", "RECIPE_HOSTILE"), ("model", "name"), ("model", "size"), ("data", "split"),
             ("tracking", "project"), ("description",)]


@settings(max_examples=examples(60), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_free_text_is_rendered_inert(tmp_path: Path, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(FREE_TEXT), label="field")
    with sandbox_dir(tmp_path) as work:
        value = data.draw(payloads(str(work / CANARY_NAME)).filter(lambda v: not CONTROL.search(v)), label="value")
        recipe = fresh_base()
        _set(recipe, field, value)
        _attempt(work, recipe, "recipe.yaml", None, must_render=True)


@SETTINGS
@given(data=st.data())
def test_hostile_cluster_values_never_run(tmp_path: Path, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(CLUSTER_FIELDS), label="field")
    with sandbox_dir(tmp_path) as work:
        value = data.draw(payloads(str(work / CANARY_NAME)), label="value")
        cluster: dict[str, Any] = dict(BENIGN_CLUSTER)
        if field == "setup:single-line":
            # Set-up lines are the user's own commands by design; what must hold is "one line each".
            value = value if "\n" in value or "\r" in value else value + "\n"
            cluster["setup"] = [f"echo {value}"]
        else:
            cluster[field] = value
        _attempt(work, fresh_base(), "recipe.yaml", cluster)


@settings(max_examples=examples(40), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_recipe_file_names_never_run(tmp_path: Path, data: st.DataObject) -> None:
    with sandbox_dir(tmp_path) as work:
        value = data.draw(payloads(str(work / CANARY_NAME)), label="value")
        name = value.replace("/", "_").replace("\x00", "") + ".yaml"
        _attempt(work, fresh_base(), name, None)


def test_a_recipe_file_name_with_a_newline_stays_in_its_comment(tmp_path: Path) -> None:
    """The finding: ``# Generated ... from <path>`` carried a newline, and the next line ran."""
    with sandbox_dir(tmp_path) as work:
        canary = work / CANARY_NAME
        recipe = work / f"x\ntouch {CANARY_NAME}\n.yaml"  # the job script runs in work/
        recipe.write_text(yaml.safe_dump(BASE))
        (work / "clusters.yaml").write_text(yaml.safe_dump({"hostile": BENIGN_CLUSTER}))
        plan = make_plan(recipe, gpu="cpu", gpus_per_node=1, cluster="hostile", target="slurm")
        text = render_artifacts(plan, target="slurm")["job.sbatch"]
        assert f"/x\\ntouch {CANARY_NAME}\\n.yaml (" in text
        _run_scripts(work, {"job.sbatch": text})
        assert not canary.exists() and not list(work.glob(CANARY_NAME + "*"))


@pytest.mark.parametrize(("field", "value"), [
    (("resources", "time"), "12:00:00\n"), (("name",), "selftest\n"), (("env", "RECIPE_A"), "a\nb"),
    (("secrets", "<item>"), "HF_TOKEN\n"),
])
def test_trailing_newlines_are_refused_in_recipes(tmp_path: Path, field: tuple[str, ...], value: str) -> None:
    data = fresh_base()
    _set(data, field, value)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(GputrainError) as refused:
        make_plan(recipe, gpu="cpu", gpus_per_node=1, target="local")
    assert str(recipe) in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("field", ["partition", "account", "qos", "constraint", "max_time", "gres_type"])
def test_cluster_fields_refuse_newlines_and_spaces(field: str) -> None:
    value = "00:10:00\n" if field == "max_time" else "debug\n"
    with pytest.raises(ValueError):
        ClusterProfile(name="h", **{field: value})
    with pytest.raises(ValueError):
        ClusterProfile(name="h", **{field: "a b" if field != "max_time" else "1:00 :00"})
    assert sys.version_info >= (3, 10)
