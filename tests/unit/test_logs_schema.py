"""The metrics.jsonl contract: what trainings write is what summaries read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gputrain.errors import LogError
from gputrain.logs.schema import MetricsWriter, looks_like_secret, read_metrics, validate_record


def test_writer_appends_one_flushed_line_per_step_readable_before_close(tmp_path: Path) -> None:
    path = tmp_path / "job" / "metrics.jsonl"
    writer = MetricsWriter(path)
    writer.log(0, loss=2.5, lr=1e-3, epoch=0.0)
    # Flushed per line: another reader sees it while the writer is still open.
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["step"] == 0 and rec["loss"] == 2.5 and rec["lr"] == 1e-3
    assert isinstance(rec["time"], float) and rec["time"] > 1.6e9
    writer.log(1, loss=2.0, time=1234.5)
    writer.close()
    records = read_metrics(path)
    assert [r["step"] for r in records] == [0, 1]
    assert records[1]["time"] == 1234.5


def test_writer_drops_non_finite_and_non_numeric_values(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with MetricsWriter(path) as writer:
        written = writer.log(3, loss=float("nan"), grad_norm=float("inf"), note="hello", ok=True, kl=0.1)
    assert written == {"step": 3, "time": written["time"], "ok": 1, "kl": 0.1}  # type: ignore[index]
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text and "hello" not in text
    assert writer.dropped == {"loss": 1, "grad_norm": 1, "note": 1}


@pytest.mark.parametrize("key", ["hf_token", "WANDB_API_KEY", "db_password", "secret", "auth"])
def test_writer_refuses_secret_looking_keys(tmp_path: Path, key: str) -> None:
    with MetricsWriter(tmp_path / "m.jsonl") as writer, pytest.raises(ValueError, match="secret"):
        writer.log(1, **{key: 1.0})
    assert (tmp_path / "m.jsonl").read_text() == ""


def test_tokens_per_s_is_not_a_secret() -> None:
    assert not looks_like_secret("tokens_per_s")
    assert not looks_like_secret("reward_mean")
    assert looks_like_secret("hf_token")


def test_disabled_writer_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with MetricsWriter(path, enabled=False) as writer:
        assert writer.log(1, loss=1.0) is None
    assert not path.exists()


def test_step_must_be_a_non_negative_int(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path / "m.jsonl") as writer:
        with pytest.raises(TypeError):
            writer.log(1.5, loss=1.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            writer.log(-1, loss=1.0)


def test_reader_skips_garbage_partial_and_overlong_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = json.dumps({"step": 1, "time": 10.0, "loss": 1.0, "name": "x", "api_key": 5})
    long_line = '{"step": 2, "time": 1, "pad": "' + "a" * (3 << 20) + '"}'
    path.write_bytes(
        b"\x00\xff garbage\n"
        + good.encode()
        + b"\n{not json\n"
        + long_line.encode()
        + b"\n"
        + b'{"time": 5}\n'
        + b'{"step": 4, "time": 11.0, "loss": 0.5}\n'
        + b'{"step": 5, "time": 12'
    )
    records = read_metrics(path)
    assert records == [{"step": 1, "time": 10.0, "loss": 1.0}, {"step": 4, "time": 11.0, "loss": 0.5}]


def test_reader_missing_file_is_a_log_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no such metrics file"):
        read_metrics(tmp_path / "absent.jsonl")


def test_validate_record_requires_step_and_time() -> None:
    assert validate_record({"step": 1}) is None
    assert validate_record({"step": True, "time": 1}) is None
    assert validate_record([1, 2]) is None
    rec = validate_record({"step": 2.0, "time": 3, "loss": math.inf, "kl": 0.25})
    assert rec == {"step": 2, "time": 3.0, "kl": 0.25}


def test_non_finite_step_is_skipped_not_a_crash(tmp_path: Path) -> None:
    # json.loads accepts NaN and Infinity; int() of either raises
    assert validate_record({"step": math.inf, "time": 1}) is None
    assert validate_record({"step": math.nan, "time": 1}) is None
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": Infinity, "time": 1}\n{"step": NaN, "time": 1}\n{"step": 3, "time": 2, "loss": 1}\n')
    assert read_metrics(path) == [{"step": 3, "time": 2.0, "loss": 1.0}]
