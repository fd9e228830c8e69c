"""Verdicts from a real sandboxed run (whatever isolation this machine allows): each status and reason."""

from __future__ import annotations

import os

import pytest

from gputrain.train.sandbox import Job, SandboxLimits, SandboxPool

LIMITS = SandboxLimits(wall_seconds=6.0, test_seconds=2.0, cpu_seconds=3)


@pytest.fixture(scope="module")
def pool() -> SandboxPool:
    return SandboxPool(workers=1, limits=LIMITS)


def statuses(pool: SandboxPool, program: str, tests: list[str]) -> list[tuple[str, str]]:
    return [(o.status, o.reason) for o in pool.run(Job(program, tests)).outcomes]


def test_each_test_gets_its_own_verdict(pool: SandboxPool) -> None:
    program = "def half(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x // 2\n"
    got = statuses(pool, program, ["assert half(4) == 2", "assert half(5) == 3", "assert half(-1) == 0",
                                   "assert nothere(1) == 1"])
    assert got[0] == ("passed", "")
    assert got[1] == ("failed", "assertion failed")
    assert got[2][0] == "failed" and "ValueError: negative" in got[2][1]
    assert got[3][0] == "failed" and "NameError" in got[3][1]


def test_a_test_may_expect_the_programs_exception(pool: SandboxPool) -> None:
    program = "def check(x):\n    if x < 0:\n        raise ValueError(x)\n    return x\n"
    test = "try:\n    check(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError"
    assert statuses(pool, program, [test]) == [("passed", "")]


def test_hang_in_one_test_does_not_sink_the_next(pool: SandboxPool) -> None:
    program = "def f(x):\n    while x:\n        pass\n    return 7\n"
    got = statuses(pool, program, ["assert f(1) == 7", "assert f(0) == 7"])
    assert got[0][0] == "timed_out"
    assert got[1] == ("passed", "")


def test_crash_and_load_failure_are_reported(pool: SandboxPool) -> None:
    got = statuses(pool, "import os\ndef f():\n    os._exit(3)\n", ["assert f() is None", "assert 1"])
    assert got[0] == ("crashed", "program exited with status 3")
    got = statuses(pool, "raise RuntimeError('boom')\n", ["assert f() == 1", "assert f() == 2"])
    assert [s for s, _ in got] == ["crashed", "crashed"]
    assert "RuntimeError: boom" in got[0][1]


def test_objects_are_usable_but_never_compare(pool: SandboxPool) -> None:
    program = (
        "class Box:\n    def __init__(self, v):\n        self.v = v\n    def get(self):\n        return self.v\n"
        "    def __eq__(self, other):\n        return True\n"
        "def unbox(b):\n    return b.v\n"
    )
    got = statuses(pool, program, ["assert unbox(Box(3)) == 3", "assert Box(3).get() == 3", "assert Box(3) == 4",
                                   "assert Box(0)"])
    assert [s for s, _ in got] == ["passed", "passed", "failed", "failed"]


def test_setup_code_runs_on_both_sides_and_prelude_only_in_the_judge(pool: SandboxPool) -> None:
    job = Job("def f():\n    return LIMIT + 1\n", ["assert f() == LIMIT + 1 == helper()"],
              setup_code="LIMIT = 4", judge_prelude="def helper():\n    return 5\n")
    assert [o.status for o in pool.run(job).outcomes] == ["passed"]


def test_program_output_is_captured(pool: SandboxPool) -> None:
    result = pool.run(Job("print('hello from the program')\ndef f():\n    return 1\n", ["assert f() == 1"]))
    assert result.fraction == 1.0
    assert "hello from the program" in result.stdout


def test_weakest_isolation_still_judges_correctly() -> None:
    from gputrain.train.sandbox import Isolation, run_tests

    result = run_tests("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(1) == 3"],
                       limits=LIMITS, isolation=Isolation("rlimits", ("rlimits",)))
    assert result.isolation == "rlimits"
    assert [o.status for o in result.outcomes] == ["passed", "failed"]


def test_program_cannot_shadow_builtins_the_test_uses(pool: SandboxPool) -> None:
    # Were `set` a proxy, both sides of the assert would be the program's answer: 1 == 1.
    program = "def set(*a):\n    return 1\ndef common(a, b):\n    return None\n"
    got = statuses(pool, program, ["assert set(common((3, 4, 5), (5, 4, 9))) == set((4, 5))"])
    assert got[0][0] == "failed"
    good = "def common(a, b):\n    return [x for x in a if x in b]\n"
    assert statuses(pool, good, ["assert set(common((3, 4, 5), (5, 4, 9))) == set((4, 5))"]) == [("passed", "")]


def test_prelude_helpers_stay_the_judges_and_its_stubs_are_the_programs(pool: SandboxPool) -> None:
    # HumanEval/38's shape: the prompt defines encode(), declares decode(); check() relies on encode().
    prelude = 'def encode(s):\n    return s[1:] + s[:1]\n\ndef decode(s):\n    """Undo encode."""\n'
    test = "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n\ncheck(decode)\n"
    cheat = "def encode(s):\n    return s\n\ndef decode(s):\n    return s\n"
    honest = prelude + "    return s[-1:] + s[:-1]\n"
    assert pool.run(Job(honest, [test], judge_prelude=prelude)).fraction == 1.0
    assert pool.run(Job(cheat, [test], judge_prelude=prelude)).fraction == 0.0


def test_a_program_dying_before_it_reads_its_settings_is_a_crash_not_an_exception(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    import tempfile

    from gputrain.train.sandbox import Isolation, run_tests
    from gputrain.train.sandbox.process import SandboxDied, SandboxProcess

    def broken_pipe(self: SandboxProcess, msg: dict, timeout: float) -> None:
        raise SandboxDied("control pipe closed")

    monkeypatch.setattr(SandboxProcess, "send", broken_pipe)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = run_tests("def f():\n    return 1\n", ["assert f() == 1", "assert f()"],
                       limits=LIMITS, isolation=Isolation("rlimits", ("rlimits",)))
    assert [(o.status, o.reason) for o in result.outcomes] == [("crashed", "control pipe closed")] * 2
    assert list(os.listdir(str(tmp_path))) == []  # its working folder went with it


def test_a_program_cannot_replace_a_helper_that_setup_code_defines(pool: SandboxPool) -> None:
    # The judge puts the program's proxies in first; the task's setup code then defines its own helpers.
    setup = "def expected(x):\n    return x * x\n"
    cheat = "def expected(x):\n    return 0\ndef square(x):\n    return 0\n"
    honest = "def square(x):\n    return x * x\n"
    test = "assert square(3) == expected(3)"
    assert pool.run(Job(cheat, [test], setup_code=setup)).fraction == 0.0
    assert pool.run(Job(honest, [test], setup_code=setup)).fraction == 1.0


def test_stop_iteration_escaping_the_program_is_a_failure(pool: SandboxPool) -> None:
    # Raised inside all(map(...)), a StopIteration would end the iteration early and pass the assert.
    program = "def square(x):\n    raise StopIteration\n"
    for test in ("assert all(map(lambda x: square(x) == x * x, [1, 2, 3]))",
                 "assert all(square(x) == x * x for x in [1, 2])", "assert list(map(square, [1])) == [1]"):
        assert statuses(pool, program, [test])[0][0] == "failed", test
    expecting = "try:\n    square(1)\nexcept StopIteration:\n    raise AssertionError('must not be catchable')\n" \
                "except Exception:\n    pass\n"
    assert statuses(pool, program, [expecting]) == [("passed", "")]


def test_dataset_setup_and_test_code_run_inside_the_sandbox(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    secret = "canary-" + os.urandom(6).hex()
    monkeypatch.setenv("HF_TOKEN", secret)
    marker = os.path.join(str(tmp_path), "written-by-the-dataset")
    os.chmod(str(tmp_path), 0o777)
    setup = f"import os\ntry:\n    open({marker!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
    tests = [f"import os\nassert {secret!r} in repr(dict(os.environ))",
             f"assert os.path.exists({marker!r}) or open({marker!r}, 'w')"]
    result = pool.run(Job("def f():\n    return 1\n", tests, setup_code=setup))
    assert [o.status for o in result.outcomes] == ["failed", "failed"]
    assert not os.path.exists(marker)


def test_weak_isolation_is_refused_unless_explicitly_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputrain.errors import SandboxError
    from gputrain.train.sandbox import choose_isolation

    monkeypatch.setenv("GPUTRAIN_SANDBOX_DISABLE", "namespaces,userns,landlock")
    monkeypatch.delenv("GPUTRAIN_SANDBOX_ALLOW_WEAK", raising=False)
    choose_isolation.cache_clear()
    try:
        with pytest.raises(SandboxError) as refused:
            SandboxPool(workers=1, limits=LIMITS)
        message = str(refused.value)
        assert "\n" not in message and "GPUTRAIN_SANDBOX_ALLOW_WEAK=1" in message
        assert "namespaces: disabled" in message and "Landlock disabled" in message
        monkeypatch.setenv("GPUTRAIN_SANDBOX_ALLOW_WEAK", "1")
        weak = SandboxPool(workers=1, limits=LIMITS)
        assert weak.describe()["strong"] is False
        assert weak.run(Job("def f():\n    return 2\n", ["assert f() == 2"])).fraction == 1.0
    finally:
        choose_isolation.cache_clear()
