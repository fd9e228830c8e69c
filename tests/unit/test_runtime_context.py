"""setup_run in one process: plan errors, config access, precision on CPU, signals, metrics redaction."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gputrain.contract.plan import SCHEMA_VERSION  # noqa: E402
from gputrain.errors import GputrainError  # noqa: E402
from gputrain.recipe.algorithms.grpo import GRPOAlgorithm  # noqa: E402
from gputrain.recipe.algorithms.selftest import SelftestAlgorithm  # noqa: E402
from gputrain.train.runtime import REQUEUE_EXIT_CODE, setup_run  # noqa: E402
from gputrain.train.runtime.metrics import redact  # noqa: E402
from gputrain.train.runtime.precision import make_precision  # noqa: E402
from gputrain.train.runtime.signals import PreemptionFlag  # noqa: E402
from tests.support.plans import toy_recipe, write_plan  # noqa: E402


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "GPUTRAIN_JOB_DIR"):
        monkeypatch.delenv(name, raising=False)


def _plan(tmp: Path, **train: object) -> Path:
    return write_plan(tmp, toy_recipe(**train), gpus=1)


def test_missing_or_foreign_plan_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GputrainError, match="plan file not found"):
        setup_run(["--plan", str(tmp_path / "nope.json")])
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(GputrainError, match="not a gputrain plan"):
        setup_run(["--plan", str(tmp_path / "x.json")])
    (tmp_path / "old.json").write_text(json.dumps({"config": {"train": {"batch_size": 4}}}))
    with pytest.raises(GputrainError, match="not a gputrain plan"):
        setup_run(["--plan", str(tmp_path / "old.json")])
    (tmp_path / "next.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(GputrainError, match=f"schema version {SCHEMA_VERSION + 1}.* reads version {SCHEMA_VERSION}"):
        setup_run(["--plan", str(tmp_path / "next.json")])


def test_context_reads_the_typed_plan_and_defaults_job_dir_to_plan_folder(tmp_path: Path) -> None:
    plan = _plan(tmp_path, seed=3, precision="bf16", batch_size=4)
    ctx = setup_run(["--plan", str(plan), "--extra", "1"])
    try:
        assert (ctx.rank, ctx.world_size, ctx.is_main) == (0, 1, True)
        assert ctx.job_dir == tmp_path
        assert ctx.recipe.train.batch_size == 4 and ctx.seed == 3
        assert ctx.algorithm(SelftestAlgorithm).iterations == 5  # the schema's default, filled by the plan
        with pytest.raises(GputrainError, match="SelftestAlgorithm settings; this training needs GRPOAlgorithm"):
            ctx.algorithm(GRPOAlgorithm)
        assert not hasattr(ctx, "get") and not hasattr(ctx, "config")
        assert ctx.args == ["--extra", "1"]
        assert ctx.precision.name == "fp32"  # CPU always trains in fp32
        assert not ctx.scaler.is_enabled()
        ctx.metrics.log(1, loss=0.5)
        assert not ctx.should_stop()
        ctx.preemption.trigger()
        assert ctx.should_stop()
    finally:
        ctx.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["loss"] == 0.5


def test_exit_for_requeue_checkpoints_writes_preempted_and_exits_75(tmp_path: Path) -> None:
    ctx = setup_run(["--plan", str(_plan(tmp_path)), "--job-dir", str(tmp_path / "job")])
    model = torch.nn.Linear(2, 1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert ctx.should_stop()
    with pytest.raises(SystemExit) as exc:
        ctx.exit_for_requeue(12, {"model": model})
    assert exc.value.code == REQUEUE_EXIT_CODE == 75
    info = json.loads((tmp_path / "job" / "PREEMPTED").read_text())
    assert info["step"] == 12 and info["signal"] == "SIGTERM"
    assert (tmp_path / "job" / "checkpoints" / "step_00000012" / "meta.json").is_file()


def test_signal_sets_flag_and_uninstall_restores_handler() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    flag = PreemptionFlag()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert flag.raised and flag.signal_name == "SIGUSR1" and flag.code == int(signal.SIGUSR1)
    flag.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before
    other = PreemptionFlag()
    other.adopt(int(signal.SIGUSR1))
    assert other.signal_name == "SIGUSR1"
    other.uninstall()


def test_precision_obeys_plan_on_cpu_and_autocast_is_a_noop() -> None:
    prec = make_precision("fp16", torch.device("cpu"))
    assert prec.name == "fp32" and not prec.scaler.is_enabled()
    with prec.autocast():
        out = torch.nn.Linear(2, 2)(torch.ones(1, 2))
    assert out.dtype == torch.float32


def test_secret_values_are_redacted_from_tracking_config(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"env": {"A": "prefix-s3cr3t-value"}, "secrets": ["WANDB_API_KEY"], "name": "x"}
    out = redact(cfg, {"s3cr3t-value"})
    assert out == {"env": {"A": "***"}, "secrets": ["WANDB_API_KEY"], "name": "x"}


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_eval_shards_cover_every_item_exactly_once(world: int) -> None:
    from gputrain.train.runtime.context import eval_shard

    for n in range(0, 11):
        items = [i for rank in range(world) for i in eval_shard(n, rank, world)]
        assert sorted(items) == list(range(n))  # no item twice (a DistributedSampler pads), none missing


def test_eval_loader_holds_this_ranks_share_unpadded(tmp_path: Path) -> None:
    plan = _plan(tmp_path, seed=0, batch_size=4)
    ctx = setup_run(["--plan", str(plan)])
    try:
        ctx.rank, ctx.world_size = 1, 2  # rank 1 of 2, as a torchrun launch would set it
        loader = ctx.make_eval_loader(list(range(7)), 2)
        assert [int(x) for batch in loader for x in batch] == [1, 3, 5]
    finally:
        ctx.close()


def test_a_cancelled_job_checkpoints_but_leaves_only_its_cancelled_marker(tmp_path: Path) -> None:
    """gputrain cancel writes CANCELLED before its SIGTERM: the runtime still saves, but never claims a
    preemption as well (one end-state marker per job folder)."""
    job = tmp_path / "job"
    ctx = setup_run(["--plan", str(_plan(tmp_path)), "--job-dir", str(job)])
    (job / "CANCELLED").write_text('{"by": "gputrain cancel"}\n')
    os.kill(os.getpid(), signal.SIGTERM)
    assert ctx.should_stop()
    with pytest.raises(SystemExit) as exc:
        ctx.exit_for_requeue(7, {"model": torch.nn.Linear(2, 1)})
    assert exc.value.code != 0
    assert sorted(p.name for p in job.iterdir() if p.name.isupper()) == ["CANCELLED"]
    assert (job / "checkpoints" / "step_00000007" / "meta.json").is_file()
