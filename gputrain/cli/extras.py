"""Which install a command needs, checked before it does anything (#31: `pip install .` has no torch).

The CLI and the planner come with ``pip install .``; running a training (``run``, ``plan --probe``) and
fetching from the hub (``prepare``) need the ``train`` extra. Without it those commands refuse in one line
(exit 2, nothing recorded) naming what is missing and the install line, instead of a job that dies with
``No module named 'torch'`` or a traceback. ``importlib.util.find_spec`` finds a package without importing it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from gputrain.errors import UserError

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan

INSTALL = "install it from the clone: {python} -m pip install '.[train]' (torch first, the build for your machine)"


def require_train_extra(command: str, plan: JobPlan) -> None:
    """The interpreter torchrun will start imports what the plan's job needs (``$PYTHON``, else this one)."""
    from gputrain.contract.needs import node_packages
    from gputrain.offline.interpreter import check_interpreter

    python = os.environ.get("PYTHON", sys.executable)
    entrypoint = plan.recipe.entrypoint
    missing = check_interpreter(python, entrypoint, packages=node_packages(plan)).missing
    if missing:
        raise UserError(f"{command} needs the `train` extra: {python} cannot import {', '.join(missing)} "
                        f"(entrypoint {entrypoint}); {INSTALL.format(python=python)}, or set PYTHON to an "
                        "interpreter that has it")


def require_modules(command: str, modules: tuple[str, ...]) -> None:
    """This interpreter can import ``modules`` (the command imports them itself)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"{command} needs the `train` extra: this Python cannot import {', '.join(missing)}; "
                        f"{INSTALL.format(python=sys.executable)}")
