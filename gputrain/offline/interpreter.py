"""Can the interpreter a job will run import gputrain and what the training needs? Asked before submitting.

A job on SuperCloud that starts ``python`` from ``module load anaconda`` without the user's packages dies on
the node, after waiting in the queue, with ``No module named 'torch'``. ``submit`` runs the interpreter
once (``importlib.util.find_spec``: finds the packages without importing torch, about 50 ms) and refuses
with the ``pip install`` line that fixes it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass

from gputrain.errors import UserError
from gputrain.recipe.entrypoints import ENTRYPOINTS

_PROBE = ("import importlib.util as u, json, sys\n"
          "print(json.dumps({m: u.find_spec(m) is not None for m in sys.argv[1:]}))\n")


@dataclass(frozen=True)
class InterpreterCheck:
    python: str
    checked: bool
    missing: tuple[str, ...] = ()
    note: str = ""


def check_interpreter(python: str, entrypoint: str, *, tracking: tuple[str, ...] = (),
                      packages: tuple[str, ...] | None = None) -> InterpreterCheck:
    """Probe ``python`` for gputrain and the entrypoint's packages (plus ``tracking``: wandb, tensorboard).

    An interpreter that is not a file here (a bare ``python`` the set-up lines provide, a container) cannot be
    probed from the login node: the result says so (``checked=False``) instead of guessing.
    """
    if not os.path.isabs(python) or not os.path.isfile(python):
        return InterpreterCheck(python, False, note=f"{python} is not a file on this machine: not checked")
    # the packages the entrypoint imports on the node (its row; the ``train`` extra holds them all)
    # (``packages``: what this recipe needs of them, ``gputrain.contract.needs.node_packages``)
    needs = packages if packages is not None else ENTRYPOINTS[entrypoint].packages if entrypoint in ENTRYPOINTS \
        else ("torch",)
    modules = ("gputrain", *needs, *tracking)
    try:
        proc = subprocess.run([python, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=60,
                              check=False)
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        raise UserError(f"the job's interpreter {python} does not run here (a Python 3 interpreter is needed); "
                        "set python: in the cluster profile")
    return InterpreterCheck(python, True, tuple(m for m in modules if not found.get(m)))


def require_interpreter(python: str, entrypoint: str, *, tracking: tuple[str, ...] = (),
                        packages: tuple[str, ...] | None = None) -> InterpreterCheck:
    """:func:`check_interpreter`, refusing in one line with the install command when something is missing."""
    result = check_interpreter(python, entrypoint, tracking=tracking, packages=packages)
    if result.missing:
        names = ", ".join(result.missing)
        extras = "train,track" if tracking else "train"
        raise UserError(f"the job's interpreter {python} cannot import {names} (entrypoint {entrypoint}): "
                        f"install them in that environment: {python} -m pip install 'gputrain[{extras}]' "
                        "(or name another interpreter with python: in the cluster profile)")
    return result
