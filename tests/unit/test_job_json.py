"""``run --json`` / ``runpod up --json`` (#31): one object on stdout; a job that did not complete carries ``error``
(as every ``--json`` error does) and the command exits with the CLI's code, not the job's."""

from __future__ import annotations

import json
import sys

import pytest
import typer

from gputrain.cli.job_json import emit, job_object, stdout_to_stderr


def test_a_failed_job_is_one_object_with_its_error_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as ended:
        emit(job_object("local-3", "/x/logs/j", "FAILED", 7), error="job local-3 FAILED (exit code 7)", exit_code=1)
    assert ended.value.exit_code == 1
    obj = json.loads(capsys.readouterr().out)
    assert (obj["job_id"], obj["state"], obj["exit_code"], obj["job_dir"]) == ("local-3", "FAILED", 7, "/x/logs/j")
    assert obj["error"] == {"message": "job local-3 FAILED (exit code 7)", "kind": "job_failed", "exit_code": 1}


def test_while_the_job_runs_its_output_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr(True):
        print("[selftest] step 1/1 ok")
    print("plain")
    with stdout_to_stderr(False):
        sys.stdout.write("kept\n")
    out, err = capsys.readouterr()
    assert (out, err) == ("plain\nkept\n", "[selftest] step 1/1 ok\n")
