"""Slurm backend: write the job folder, ``sbatch`` it, record it; status and cancel by Slurm job id.

The job folder is named after the Slurm job id, which exists only once sbatch returns, and Slurm creates no
folders for ``--output``. So the files are staged in a hidden folder, the job is submitted ``--hold``, the
folder renamed to ``<recipe>_job_<JOBID>_<stamp>``, the job recorded, then released. The job cannot start
before its folder exists, and a failure at any step cancels the held job and leaves nothing behind.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.backends.base import Backend, JobRequest, JobStatus, Submission
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
    start_epoch,
)
from gputrain.contract import jobstate
from gputrain.errors import ClusterError, UserError
from gputrain.registry.store import FINAL_STATES, JobRecord, JobRegistry
from gputrain.registry.transitions import record_state

if TYPE_CHECKING:
    from gputrain.contract.plan import JobPlan
    from gputrain.render.sbatch import SubmitOptions

_TIMEOUT_S = 90.0


_NEVER_RUNS = ("allocation failure", "requested node configuration is not available", "node count specification",
               "memory specification", "more processors requested than permitted", "partition node limit",
               "requested time limit is invalid", "invalid generic resource")


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
    options: SubmitOptions | None = None, array: tuple[int, int | None] | None = None, dry_run: bool = False,
) -> PreparedJob:
    """Render the job folder's files for ``plan`` (imports the renderer: the costly half of a submit). A dry
    run's script names its own folder (:func:`dry_run_dir`), so a plain ``sbatch`` of it runs there."""
    import yaml

    from gputrain.contract.provenance import PROVENANCE_FILE, launch_json
    from gputrain.render.sbatch import SbatchInputs, render_sbatch

    logs_dir = Path(logs_dir).absolute()
    plan = plan.model_copy(update={"artifacts": {**plan.artifacts, "job.sbatch": "job.sbatch"}})
    inputs = SbatchInputs.here(plan, logs_dir=str(logs_dir), stamp=STAMP_MARK, debug=debug, options=options)
    if array is not None:
        from dataclasses import replace

        inputs = replace(inputs, array=array)
    elif dry_run:
        from dataclasses import replace

        inputs = replace(inputs, job_dir=str(dry_run_dir(logs_dir, plan.recipe.name, STAMP_MARK)))
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


@dataclass(frozen=True)
class _Prepared(JobRequest):
    """A request already rendered (:meth:`SlurmBackend.submit_all` renders every point first)."""

    job: PreparedJob | None = None


def dry_run_dir(logs_dir: Path, recipe: str, stamp: str) -> Path:
    """A dry run's job folder: no job id yet, so its script names this folder itself."""
    return Path(logs_dir) / f"{recipe}_job_dryrun_{stamp}"


def free_stamp(folders: Callable[[str], list[Path]]) -> str:
    """A dry run's stamp (the time, to the second) whose ``folders(stamp)`` are all free: several dry runs in
    one second (a sweep, a script) get ``-2``, ``-3``... and never write into another's folders."""
    base = datetime.now().strftime("%Y%m%d_%H%M%S")
    for stamp in (base, *(f"{base}-{n}" for n in range(2, 10_000))):
        if not any(d.exists() or d.is_symlink() for d in folders(stamp)):
            return stamp
    raise UserError(f"too many dry runs in one second ({base})")


class SlurmBackend(Backend):
    """``options``: sbatch's own (account, qos, dependencies ...); ``array``: a sweep's points as one job
    array (``max_parallel`` at once) rather than one job each."""

    name = "slurm"
    plan_target = "slurm"
    needs_cluster = True

    def __init__(self, registry: JobRegistry | None = None, *, debug: bool = False,
                 options: SubmitOptions | None = None, array: bool = True, max_parallel: int | None = None) -> None:
        self.registry = registry or JobRegistry()
        self.debug = debug
        self.options = options
        self.array = array
        self.max_parallel = max_parallel
        self._gres_ok: set[tuple[str | None, str]] = set()  # (partition, gres) sinfo confirmed: a sweep asks once

    # ---- submit -------------------------------------------------------------------------------------
    def submit(self, request: JobRequest) -> Submission:
        job = request.job if isinstance(request, _Prepared) and request.job else self._prepare(request)
        return self.submit_prepared(job, dry_run=request.dry_run)

    def _prepare(self, request: JobRequest, array: tuple[int, int | None] | None = None) -> PreparedJob:
        job = prepare_job(request.plan, logs_dir=request.logs_dir, debug=self.debug, sweep=list(request.sweep),
                          options=self.options, array=array, dry_run=request.dry_run)
        if request.resume_from is not None:
            from dataclasses import replace

            job = replace(job, resume_from=str(request.resume_from))
        return job

    def submit_all(self, requests: Sequence[JobRequest]) -> list[Submission]:
        """Every point rendered before any is submitted; a sweep as one array unless ``array`` is off; all
        or nothing either way (:mod:`gputrain.backends.slurm_submit`)."""
        if not (self.array and len(requests) > 1):
            ready = [_Prepared(r.plan, r.logs_dir, r.dry_run, r.sweep, r.resume_from, self._prepare(r))
                     for r in requests]
            from gputrain.backends.slurm_submit import submit_each

            return submit_each(self, [r.job for r in ready if r.job], dry_run=requests[0].dry_run)
        from gputrain.backends.slurm_array import same_script, submit_array

        jobs = [self._prepare(r, array=(len(requests), self.max_parallel)) for r in requests]
        if not same_script(jobs) or any(r.resume_from for r in requests):
            from gputrain.errors import ClusterProfileError

            raise ClusterProfileError("--sweep: the points need different job scripts (a resource or the "
                                      "environment differs) or --resume-from was given; pass --no-array")
        return submit_array(self, jobs, dry_run=requests[0].dry_run)

    def submit_prepared(self, job: PreparedJob, *, dry_run: bool = False) -> Submission:
        """Write the job folder and sbatch it: held, folder renamed to the job id, recorded, released (all
        or nothing: :mod:`gputrain.backends.slurm_submit`). A dry run writes the folder whole or not at all."""
        if dry_run:
            logs_dir = Path(job.logs_dir)
            stamp = free_stamp(lambda st: [dry_run_dir(logs_dir, job.recipe, st)])
            files = job.stamped(stamp)  # the script names its folder through the stamp
            job_dir = dry_run_dir(logs_dir, job.recipe, stamp)
            self._write_folder(job_dir, files)
            return Submission(job_id="dry-run", job_dir=job_dir, script=files["job.sbatch"], dry_run=True)

        if shutil.which("sbatch") is None:
            run_slurm(["sbatch"])  # raises the one-line "not found on PATH" error
        from gputrain.backends.slurm_submit import submit_held

        return submit_held(self, [job], array=False)[0]

    @staticmethod
    def _write_folder(folder: Path, files: dict[str, str]) -> None:
        """A dry run's folder, whole or not at all."""
        from gputrain.backends.slurm_submit import write_folders

        write_folders([(folder, files)], folder.parent, dry_run=True)

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
        self._test_only(script, job)
        proc = run_slurm(["sbatch", "--parsable", "--hold", str(script)])
        if proc.returncode == 0:
            return parse_sbatch_id(proc.stdout)
        cluster = job.cluster
        raise ClusterError(explain_sbatch_error(
            proc.stderr or proc.stdout, partition=cluster.get("partition"), gres=self._gres(job),
            cluster=cluster.get("name", "?"), gres_ok=True,
        ))

    def _test_only(self, script: Path, job: PreparedJob) -> None:
        """A held submission is accepted even when it can never run (``--mem=900G``, more nodes than the
        partition has): it would pend for ever on BadConstraints/PartitionNodeLimit. ``sbatch --test-only``
        asks the controller to place it without submitting; a refusal is the user's to fix (exit 2), with
        Slurm's own words. Anything else (controller unreachable) is left to the real submission to report."""
        proc = run_slurm(["sbatch", "--test-only", str(script)])
        if proc.returncode == 0:
            return
        text = " ".join((proc.stderr or proc.stdout).split())
        low = text.lower()
        if not any(k in low for k in _NEVER_RUNS):
            return
        cluster = job.cluster
        slurm_says = text.removeprefix("sbatch: error: ").removeprefix("allocation failure: ")[:160]
        hint = explain_sbatch_error(text, partition=cluster.get("partition"), gres=self._gres(job),
                                    cluster=cluster.get("name", "?"), gres_ok=True)
        raise ClusterError(f"Slurm would never run this job (sbatch --test-only: {slurm_says}); nothing was "
                           f"submitted: {hint} (nodes, memory_gb, gpus, and sbatch_extra in cluster profile "
                           f"{cluster.get('name', '?')!r})", exit_code=2)

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
        if state == jobstate.REQUEUED or (state == jobstate.PENDING and job.restarts):
            reason = node_failure(record.job_dir if record is not None else None) or reason
        if state in jobstate.ENDED_STATES:  # the same verdict as the job's summary: exit code + markers
            markers = jobstate.markers_in(record.job_dir if record is not None else None,
                                          attempt_start=start_epoch(job.fields.get("StartTime", "")))
            ending = jobstate.end_state(job.exit_code, markers, jobstate.BackendFacts(scheduler_state=state))
            state, reason = ending.state, reason or ending.reason
        if record is not None and record.backend == "slurm" and not self.registry.read_only():
            record_state(self.registry, record.job_id, state, exit_code=job.exit_code,
                         reason=reason, restarts=job.restarts, nodes=job.nodes)
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
                reason = (node_failure(rec.job_dir) if state == jobstate.REQUEUED else None) or seen.reason
                updated[rec.job_id] = record_state(self.registry, rec.job_id, state, reason=reason)
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
        record_state(self.registry, job_id, jobstate.CANCELLED, cancelled_by=getpass.getuser())
        return jobstate.CANCELLED


_NODE_FAIL = re.compile(rb"\*\*\* JOB (\d+) ON (\S+) CANCELLED AT (\S+) DUE TO NODE FAILURE")


def node_failure(job_dir: str | None) -> str | None:
    """Why a requeued job waits, when a node failed under it: Slurm's own reason then is only "BeginTime"
    and the job record forgets its nodes, but slurmstepd wrote ``*** JOB 14 ON n2 CANCELLED AT … DUE TO NODE
    FAILURE ***`` into the job's log (opened in append mode), so the newest such line names the node."""
    if not job_dir:
        return None
    found: re.Match[bytes] | None = None
    for log in sorted(Path(job_dir).glob("*.log")):
        try:
            with open(log, "rb") as fh:
                fh.seek(max(0, log.stat().st_size - 262144))
                matches = list(_NODE_FAIL.finditer(fh.read()))
            found = matches[-1] if matches else None
        except OSError:
            continue
        if found is not None:
            break
    if found is None:
        return None
    node, when = found.group(2).decode(errors="replace"), found.group(3).decode(errors="replace")
    return (f"NODE_FAIL: node {node} failed at {when} and Slurm requeued the job (it resumes from its newest "
            f"checkpoint when it starts again); `scontrol show node {node}` says why")
