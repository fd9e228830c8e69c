"""Slurm backend: write the job folder, ``sbatch`` it, record it; status and cancel by Slurm job id.

The job folder is named after the Slurm job id, which exists only once sbatch returns, and Slurm creates no
folders for ``--output``. So the files are staged in a hidden folder, the job is submitted ``--hold``, the
folder renamed to ``<recipe>_job_<JOBID>_<stamp>``, the job recorded, then released. The job cannot start
before its folder exists, and a failure at any step cancels the held job and leaves nothing behind.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.atomic import write_atomic
from gputrain.backends.base import Backend, JobStatus, Submission
from gputrain.backends.resume import seed_checkpoint
from gputrain.backends.slurm_parse import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    SlurmJob,
    explain_sbatch_error,
    gres_offered,
    parse_sacct,
    parse_sbatch_id,
    parse_scontrol_job,
    parse_squeue,
    slurm_job_id,
)
from gputrain.contract import jobstate
from gputrain.errors import ClusterError, GputrainError, UserError
from gputrain.registry.store import FINAL_STATES, JobRecord, JobRegistry

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan
    from gputrain.render.sbatch import SubmitOptions

_TIMEOUT_S = 90.0


def run_slurm(args: list[str], *, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run one Slurm client command; a missing binary or a hang becomes a one-line ClusterError."""
    if shutil.which(args[0]) is None:
        raise ClusterError(
            f"{args[0]} not found on PATH: run this on a Slurm login node (or `module load slurm`); "
            "`gputrain submit --dry-run` writes the script without Slurm"
        )
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        cmd = " ".join(args)
        raise ClusterError(f"`{cmd}` did not answer in {_TIMEOUT_S:.0f} s; check `scontrol ping`") from None
    if check and proc.returncode != 0:
        raise ClusterError(_one_line(args[0], proc.stderr or proc.stdout))
    return proc


def _one_line(cmd: str, text: str) -> str:
    msg = " ".join(text.split()) or "no message"
    if "unable to contact slurm controller" in msg.lower():
        return f"Slurm controller unreachable ({cmd}: {msg}); check `scontrol ping`"
    return f"{cmd} failed: {msg}"


STAMP_MARK = "__gputrain_submit_stamp__"
"""Stands for the submission time in a prepared job's files (shell-safe as it is: letters and underscores)."""


@dataclass
class PreparedJob:
    """A planned and rendered job, not yet submitted: the job folder's files and the registry's fields.

    Nothing in it depends on the moment of submission except the time stamp, which the files carry as
    :data:`STAMP_MARK`. Keeping the two apart lets ``gputrain submit --sweep`` plan every point before it
    submits any.
    """

    recipe: str
    recipe_path: str
    gpu: str
    gpus_per_node: int
    nodes: int
    cluster: dict[str, Any]
    logs_dir: str
    files: dict[str, str]
    sweep: list[str] = field(default_factory=list)  # this job's point of a --sweep grid, as --set texts
    resume_from: str | None = None  # a job folder whose newest checkpoint the job starts from

    def stamped(self, stamp: str) -> dict[str, str]:
        return {name: text.replace(STAMP_MARK, stamp) for name, text in self.files.items()}



def prepare_job(
    plan: JobPlan, *, logs_dir: Path, debug: bool = False, sweep: list[str] | None = None,
    options: SubmitOptions | None = None, array: tuple[int, int | None] | None = None,
) -> PreparedJob:
    """Render the job folder's files for ``plan`` (imports the renderer: the costly half of a submit)."""
    import yaml

    from gputrain.contract.provenance import PROVENANCE_FILE, launch_json
    from gputrain.render.sbatch import SbatchInputs, render_sbatch

    logs_dir = Path(logs_dir).absolute()
    plan = plan.model_copy(update={"artifacts": {**plan.artifacts, "job.sbatch": "job.sbatch"}})
    inputs = SbatchInputs.here(plan, logs_dir=str(logs_dir), stamp=STAMP_MARK, debug=debug, options=options)
    if array is not None:
        from dataclasses import replace

        inputs = replace(inputs, array=array)
    files = {
        "job.sbatch": render_sbatch(plan, inputs),
        "plan.json": plan.to_json(),
        "recipe.resolved.yaml": yaml.safe_dump(plan.resolved_recipe_data(), sort_keys=False),
        PROVENANCE_FILE: launch_json(),
    }
    cluster = plan.cluster.model_dump(mode="json") if plan.cluster else {}
    return PreparedJob(
        recipe=plan.recipe.name, recipe_path=plan.recipe_path, gpu=plan.gpu.name,
        gpus_per_node=plan.gpus_per_node, nodes=plan.nodes, cluster=cluster,
        logs_dir=str(logs_dir), files=files, sweep=list(sweep or []),
    )


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, registry: JobRegistry | None = None, *, debug: bool = False) -> None:
        self.registry = registry or JobRegistry()
        self.debug = debug
        self._gres_ok: set[tuple[str | None, str]] = set()  # (partition, gres) sinfo confirmed: a sweep asks once

    # ---- submit -------------------------------------------------------------------------------------
    def submit(self, plan: JobPlan, *, logs_dir: Path, dry_run: bool = False) -> Submission:
        return self.submit_prepared(prepare_job(plan, logs_dir=logs_dir, debug=self.debug), dry_run=dry_run)

    def submit_prepared(self, job: PreparedJob, *, dry_run: bool = False) -> Submission:
        """Write the job folder and sbatch it: held, folder renamed to the job id, recorded, released."""
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        files = job.stamped(stamp)
        script = files["job.sbatch"]
        logs_dir = Path(job.logs_dir)
        if dry_run:
            job_dir = logs_dir / f"{job.recipe}_job_dryrun_{stamp}"
            for n in range(2, 10_000):  # several dry runs in one second (a sweep): never overwrite one
                if not job_dir.exists():
                    break
                job_dir = logs_dir / f"{job.recipe}_job_dryrun_{stamp}-{n}"
            self._write_folder(job_dir, files)
            return Submission(job_id="dry-run", job_dir=job_dir, script=script, dry_run=True)

        if shutil.which("sbatch") is None:
            run_slurm(["sbatch"])  # raises the one-line "not found on PATH" error
        self._check_gres(job)
        staging = logs_dir / f".staging_{job.recipe}_{stamp}_{os.urandom(4).hex()}"
        self._write_folder(staging, files)
        if job.resume_from:
            try:
                seed_checkpoint(Path(job.resume_from), staging)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        try:
            job_id = self._sbatch_held(staging / "job.sbatch", job)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        job_dir = logs_dir / f"{job.recipe}_job_{job_id}_{stamp}"
        try:
            os.rename(staging, job_dir)
            self.registry.add(self._record(job_id, job_dir, job))
        except (OSError, GputrainError) as exc:
            run_slurm(["scancel", "--", job_id])
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(job_dir, ignore_errors=True)
            if isinstance(exc, GputrainError):
                raise
            raise ClusterError(f"cannot create job folder {job_dir}: {exc.strerror}") from None
        released = run_slurm(["scontrol", "release", job_id])
        if released.returncode != 0:
            run_slurm(["scancel", "--", job_id])
            self.registry.update(job_id, state="CANCELLED", extra={"reason": "release failed"})
            raise ClusterError(_one_line("scontrol release", released.stderr))
        return Submission(job_id=job_id, job_dir=job_dir, script=script)

    @staticmethod
    def _write_folder(folder: Path, files: dict[str, str]) -> None:
        try:
            (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                write_atomic(folder / name, text, 0o755 if name.endswith(".sbatch") else 0o644)
        except OSError as exc:
            raise ClusterError(f"cannot write job folder {folder}: {exc.strerror}") from None

    @staticmethod
    def _gres(job: PreparedJob) -> str | None:
        if job.gpu == "cpu" or job.gpus_per_node <= 0:
            return None
        kind = job.cluster.get("gres_type")
        return f"gpu:{kind}:{job.gpus_per_node}" if kind else f"gpu:{job.gpus_per_node}"

    def _check_gres(self, job: PreparedJob) -> None:
        """A held job asking for GRES no node has is accepted by sbatch (it pends on BadConstraints
        forever), so ask sinfo first. Also the first contact with the controller."""
        gres = self._gres(job)
        cluster = job.cluster
        if gres is None or (cluster.get("partition"), gres) in self._gres_ok:
            return
        args = ["sinfo", "-h", "-o", "%G"]
        if cluster.get("partition"):
            args += ["-p", str(cluster["partition"])]
        info = run_slurm(args)
        if info.returncode != 0:
            raise ClusterError(_one_line("sinfo", info.stderr))
        if not info.stdout.strip() and cluster.get("partition"):
            raise ClusterError(explain_sbatch_error(
                "Invalid partition name specified", partition=cluster["partition"], gres=gres,
                cluster=cluster.get("name", "?")))
        if not gres_offered(info.stdout, cluster.get("gres_type"), job.gpus_per_node):
            raise ClusterError(explain_sbatch_error(
                "Invalid generic resource (gres) specification", partition=cluster.get("partition"),
                gres=gres, cluster=cluster.get("name", "?"), gres_ok=False))
        self._gres_ok.add((cluster.get("partition"), gres))

    def _sbatch_held(self, script: Path, job: PreparedJob) -> str:
        proc = run_slurm(["sbatch", "--parsable", "--hold", str(script)])
        if proc.returncode == 0:
            return parse_sbatch_id(proc.stdout)
        cluster = job.cluster
        raise ClusterError(explain_sbatch_error(
            proc.stderr or proc.stdout, partition=cluster.get("partition"), gres=self._gres(job),
            cluster=cluster.get("name", "?"), gres_ok=True,
        ))

    @staticmethod
    def _record(job_id: str, job_dir: Path, job: PreparedJob) -> JobRecord:
        cluster = job.cluster
        return JobRecord(
            job_id=job_id, backend="slurm", name=job_dir.name, cluster=cluster.get("name"),
            recipe=job.recipe, recipe_path=job.recipe_path, job_dir=str(job_dir), state=jobstate.PENDING,
            gpu=job.gpu, gpus_per_node=job.gpus_per_node, nodes=job.nodes,
            extra={"partition": cluster.get("partition"), "user": getpass.getuser(),
                   **({"sweep": job.sweep} if job.sweep else {})},
        )

    # ---- status / cancel ----------------------------------------------------------------------------
    def query(self, job_id: str) -> SlurmJob | None:
        """scontrol (live and recently finished jobs), then sacct when accounting exists."""
        job_id = slurm_job_id(job_id)
        proc = run_slurm(["scontrol", "show", "job", "-o", "--", job_id])
        if proc.returncode == 0:
            return parse_scontrol_job(proc.stdout)
        err = proc.stderr.lower()
        if "invalid job id" not in err:
            raise ClusterError(_one_line("scontrol", proc.stderr))
        if shutil.which("sacct") is None:
            return None
        acct = run_slurm(["sacct", "-X", "-n", "-P", "-o", SACCT_FIELDS, "-j", job_id])
        if acct.returncode != 0:
            return None  # "accounting storage is disabled": Slurm has forgotten the job
        return parse_sacct(acct.stdout, job_id)

    def status(self, job_id: str) -> JobStatus:
        job = self.query(job_id)
        record = self.registry.find(job_id)
        if job is None:  # ended long enough ago for scontrol to forget it, and no accounting to ask
            known = record.state if record and record.state in FINAL_STATES else "UNKNOWN"
            return JobStatus(job_id, known, reason="Slurm no longer knows this job (no accounting)",
                             exit_code=record.exit_code if record else None, source="registry")
        state, reason = job.state, "" if job.reason in ("None", "(null)") else job.reason  # Slurm's "no reason"
        if state == jobstate.CANCELLED and job.exit_code in (0, jobstate.REQUEUE_EXIT_CODE):
            # "0:0": cancelled before it ran; 75: the runtime checkpointed on scancel's SIGTERM and stopped with
            # gputrain's requeue code (not requeued: the user cancelled). Neither is the job's own exit code.
            job.exit_code = None
        if state in jobstate.ENDED_STATES:  # the same verdict as the job's summary: exit code + markers
            markers = jobstate.markers_in(record.job_dir if record is not None else None)
            ending = jobstate.end_state(job.exit_code, markers, jobstate.BackendFacts(scheduler_state=state))
            state, reason = ending.state, reason or ending.reason
        if record is not None and record.backend == "slurm" and not self.registry.read_only():
            self.registry.update(
                record.job_id, state=state, exit_code=job.exit_code,
                extra={"reason": reason, "restarts": job.restarts, "nodes": job.nodes},
            )
        return JobStatus(job.job_id, state, reason=reason, exit_code=job.exit_code,
                         elapsed=job.elapsed, nodes=job.nodes, restarts=job.restarts, source=job.source)

    def refresh(self, records: list[JobRecord]) -> list[JobRecord]:
        """Bring unfinished Slurm records up to date with one squeue call (exit codes via scontrol)."""
        todo = [r for r in records if r.backend == "slurm" and r.state not in FINAL_STATES]
        if not todo:
            return records
        proc = run_slurm(["squeue", "--states=all", "-h", "-r", "-u", getpass.getuser(), "-o", SQUEUE_FORMAT])
        if proc.returncode != 0:
            raise ClusterError(_one_line("squeue", proc.stderr))
        live = parse_squeue(proc.stdout)
        updated = {}
        for rec in todo:
            seen = live.get(rec.job_id)
            if seen is not None and seen.state not in jobstate.ENDED_STATES:
                # squeue says all a live job needs (a pending one's reason too); a job that has run before
                # and waits again is REQUEUED
                state = seen.state
                if state == jobstate.PENDING and int((rec.extra or {}).get("restarts") or 0) > 0:
                    state = jobstate.REQUEUED
                updated[rec.job_id] = self.registry.update(rec.job_id, state=state, extra={"reason": seen.reason})
                continue
            st = self.status(rec.job_id)  # ended (or gone from squeue): the exit code needs scontrol/sacct
            updated[rec.job_id] = self.registry.get(rec.job_id) if st.source != "registry" else rec
        return [updated.get(r.job_id, r) for r in records]

    def cancel(self, job_id: str, *, requeue: bool = False) -> str:
        """scancel a job gputrain submitted; returns its state after. A job Slurm reports as ended is left
        alone (its state recorded): scancel on it would answer 0 and say nothing.

        ``requeue``: instead of ending it, ask a running job to checkpoint and go back to the queue (the stop
        request of the job-state contract, cause ``requested``); returns RUNNING (it stops at its next step).
        """
        record = self.registry.find(slurm_job_id(job_id))
        if record is None or record.backend != "slurm":
            raise UserError(f"no Slurm job {job_id} in the registry: gputrain cancels only jobs it submitted")
        current = self.status(job_id)
        if current.state in jobstate.ENDED_STATES:
            return current.state
        if requeue:
            if current.state != jobstate.RUNNING or not record.job_dir:
                raise UserError(f"job {job_id} is {current.state}: only a running job can be checkpointed and "
                                "requeued (cancel it without --requeue)")
            jobstate.write_stop_request(record.job_dir, "requested")
            return jobstate.RUNNING
        if record.job_dir:
            jobstate.write_cancel_marker(record.job_dir, "gputrain cancel")  # the job script must not requeue
        proc = run_slurm(["scancel", "--", job_id])
        if proc.returncode != 0:
            raise ClusterError(_one_line("scancel", proc.stderr))
        self.registry.update(job_id, state=jobstate.CANCELLED, extra={"cancelled_by": getpass.getuser()})
        return jobstate.CANCELLED
