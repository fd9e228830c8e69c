"""A sandbox level is chosen, reported and kept (issue #25, point 8).

An interpreter that lives under ``/tmp`` used to break the namespace levels (the private ``/tmp`` covered
it) and scoring fell silently to Landlock. Here such an interpreter (a copy of the system one) must get the
namespace level, as root and as uid 65534, and score a correct program 1.0. And where the kernel offers a
level that our sandbox fails to build on, the choice fails loudly instead of dropping to a weaker level.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputrain.errors import SandboxError
from gputrain.train.sandbox import probe
from tests.security.sandbox_levels import LEVELS, Level, run_level

NAMESPACE_LEVELS = [lv for lv in LEVELS if lv.expected in ("namespaces", "userns")]


@pytest.fixture(scope="module")
def tmp_python() -> Iterator[str]:
    """The system interpreter and its standard library, copied under /tmp (readable by everyone)."""
    real = Path(shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3").resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(f"/usr/lib/{version}")
    if not stdlib.is_dir() or real.name != version:
        pytest.fail(f"expected the system {version} at /usr/bin with its library at {stdlib}")
    base = Path(tempfile.mkdtemp(prefix="gputrain-tmp-python-"))
    try:
        (base / "bin").mkdir()
        shutil.copy2(real, base / "bin" / version)
        shutil.copytree(stdlib, base / "lib" / version, symlinks=True,
                        ignore=shutil.ignore_patterns("test", "__pycache__", "idlelib", "tkinter", "ensurepip"))
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        base.chmod(0o755)
        yield str(base / "bin" / version)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("level", NAMESPACE_LEVELS, ids=[lv.name for lv in NAMESPACE_LEVELS])
def test_an_interpreter_under_tmp_keeps_the_namespace_level(level: Level, portable_packages: Path,
                                                            tmp_python: str) -> None:
    portable = Level(level.name, level.uid, level.disable, level.expected, portable=True)
    report = run_level(portable, portable_packages, "good", python=tmp_python)
    assert report["interpreter"].startswith("/tmp/"), report
    assert report["good"] == 1.0, report


def test_a_level_the_kernel_offers_but_we_fail_to_build_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision only: the build of every level fails (injected), the kernel offers the first one."""
    monkeypatch.setattr(probe, "_works", lambda isolation: "mount /tmp: Permission denied")
    monkeypatch.setattr(probe, "_kernel_offers", lambda level: True)
    monkeypatch.delenv(probe.DISABLE_ENV, raising=False)
    probe.choose_isolation.cache_clear()
    try:
        with pytest.raises(SandboxError) as err:
            probe.choose_isolation()
    finally:
        probe.choose_isolation.cache_clear()
    message = str(err.value)
    assert "\n" not in message
    assert "mount /tmp: Permission denied" in message and probe.DISABLE_ENV in message
