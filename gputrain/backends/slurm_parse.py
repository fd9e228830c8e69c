"""Pure parsers for Slurm command output, and the one state vocabulary gputrain shows.

Kept free of subprocess calls so the unit tests can feed them outputs recorded on the testbed
(``tests/unit/data/slurm/``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from gputrain.contract.jobstate import ENDED_STATES
from gputrain.errors import ClusterError

_STATE_MAP = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "SUSPENDED": "PENDING", "STOPPED": "PENDING",
    "REQUEUE_HOLD": "REQUEUED", "REQUEUE_FED": "REQUEUED", "REQUEUED": "REQUEUED",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED", "NODE_FAIL": "FAILED", "BOOT_FAIL": "FAILED", "OUT_OF_MEMORY": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "CANCELLED": "CANCELLED", "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT", "DEADLINE": "TIMEOUT",
    "PREEMPTED": "PREEMPTED",
}


#: A job id as Slurm prints it: ``4242``, an array task ``4242_7``, a het component ``4242+1``.
_JOB_ID_RE = re.compile(r"\A[0-9]{1,12}(?:_[0-9]{1,8})?(?:\+[0-9]{1,4})?\Z")


def slurm_job_id(text: str) -> str:
    """``text`` if it is a Slurm job id, else a one-line error (exit 2): never an option or a user name.

    Call before any ``scancel``/``squeue``/``scontrol``/``sacct``: ``gputrain cancel -- --user=root`` must
    not become ``scancel --user=root``.
    """
    if not _JOB_ID_RE.match(text):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ClusterError(f"{shown!r} is not a Slurm job id (digits, e.g. 4242 or 4242_7)", exit_code=2)
    return text


_ENDED = ENDED_STATES


def map_state(raw: str, *, restarts: int = 0) -> str:
    """Slurm state (``CANCELLED by 0``, ``PENDING``...) → gputrain vocabulary.

    A pending job that has already run once (restarts > 0) is shown as REQUEUED: it is waiting to resume.
    """
    word = raw.strip().split(" ")[0].rstrip("+").upper() if raw.strip() else ""
    state = _STATE_MAP.get(word, "UNKNOWN")
    if state == "PENDING" and restarts > 0:
        return "REQUEUED"
    return state


def start_epoch(text: str) -> float | None:
    """Slurm's ``StartTime=2026-11-27T03:38:58`` (the client's local time, whole seconds) as epoch seconds;
    None for ``Unknown``/``None`` or anything else."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """``"3:0"`` → (3, None); ``"0:15"`` → (None, 15): Slurm's ``exit:signal`` pair."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    if not m:
        return None, None
    code, sig = int(m.group(1)), int(m.group(2))
    return (code if sig == 0 else None), (sig or None)


@dataclass
class SlurmJob:
    """What ``gputrain status`` shows about one job."""

    job_id: str
    state: str
    raw_state: str = ""
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    elapsed: str = ""
    nodes: str = ""
    num_nodes: int | None = None
    restarts: int = 0
    gres: str = ""
    source: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def parse_scontrol_job(text: str) -> SlurmJob | None:
    """One-line ``scontrol show job -o <id>`` output (None for 'Invalid job id')."""
    line = next((ln for ln in text.splitlines() if ln.startswith("JobId=")), None)
    if line is None:
        return None
    fields: dict[str, str] = {}
    for m in re.finditer(r"(\S+?)=(.*?)(?=\s+\S+?=|\s*$)", line):
        fields.setdefault(m.group(1), m.group(2).strip())
    restarts = int(fields.get("Restarts", "0") or 0)
    raw = fields.get("JobState", "")
    state = map_state(raw, restarts=restarts)
    code, sig = parse_exit_code(fields.get("ExitCode", "")) if state in _ENDED else (None, None)
    return SlurmJob(
        job_id=fields.get("JobId", ""),
        state=state,
        raw_state=raw,
        reason=fields.get("Reason", ""),
        exit_code=code,
        signal=sig,
        elapsed=fields.get("RunTime", ""),
        nodes=fields.get("NodeList", "") if fields.get("NodeList") not in (None, "(null)") else "",
        num_nodes=int(fields["NumNodes"]) if fields.get("NumNodes", "").isdigit() else None,
        restarts=restarts,
        gres=fields.get("TresPerNode", ""),
        source="scontrol",
        fields=fields,
    )


SQUEUE_FORMAT = "%i|%T|%r|%M|%D|%N"


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """``squeue -h -o '%i|%T|%r|%M|%D|%N'`` lines → jobs by id (no exit codes: squeue has none)."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 6:
            continue
        job_id, raw, reason, elapsed, num, nodes = parts[:6]
        jobs[job_id] = SlurmJob(
            job_id=job_id, state=map_state(raw), raw_state=raw, reason=reason, elapsed=elapsed,
            nodes=nodes, num_nodes=int(num) if num.isdigit() else None, source="squeue",
        )
    return jobs


SACCT_FIELDS = "JobID,State,ExitCode,Reason,Elapsed,NNodes,NodeList"


def parse_sacct(text: str, job_id: str) -> SlurmJob | None:
    """``sacct -X -n -P -o JobID,State,ExitCode,Reason,Elapsed,NNodes,NodeList -j <id>`` → the job."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7 or parts[0] != job_id:
            continue
        code, sig = parse_exit_code(parts[2])
        return SlurmJob(
            job_id=job_id, state=map_state(parts[1]), raw_state=parts[1], reason=parts[3], exit_code=code,
            signal=sig, elapsed=parts[4], num_nodes=int(parts[5]) if parts[5].isdigit() else None,
            nodes=parts[6], source="sacct",
        )
    return None


def parse_sbatch_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``<id>`` or ``<id>;<cluster>``."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise ClusterError(f"sbatch printed no job id (got {stdout.strip()[:80]!r})")
    return job_id


def gres_offered(sinfo_gres: str, gres_type: str | None, count: int) -> bool:
    """Does any line of ``sinfo -h -o %G`` (``gpu:volta:2(S:0-1)``, ``gpu:4``) offer ``count`` such GPUs?"""
    for line in sinfo_gres.splitlines():
        for item in line.split(","):
            parts = re.sub(r"\(.*?\)", "", item.strip()).split(":")
            if not parts or parts[0] != "gpu" or not parts[-1].isdigit():
                continue
            kind = parts[1] if len(parts) == 3 else None
            if int(parts[-1]) >= count and (gres_type is None or kind == gres_type):
                return True
    return False


def explain_sbatch_error(
    stderr: str, *, partition: str | None, gres: str | None, cluster: str, gres_ok: bool | None = None
) -> str:
    """Turn sbatch's stderr into one line that says what is wrong and what to do.

    ``gres_ok`` (from :func:`gres_offered`) tells a missing GRES apart from too many CPUs/nodes, which
    sbatch reports with the same words.
    """
    text = " ".join(stderr.split())
    low = text.lower()
    if "unable to contact slurm controller" in low or "connection refused" in low:
        return (f"Slurm controller unreachable ({_last_error(text)}); check `scontrol ping` "
                "(for the local testbed: scripts/slurm-testbed up)")
    if "invalid partition" in low:
        return (f"partition {partition!r} (cluster profile {cluster!r}) does not exist on this Slurm; "
                "see `sinfo -s` and fix `partition:` in the profile")
    if "invalid generic resource" in low or "invalid gres" in low or (
        gres and gres_ok is not True and "requested node configuration is not available" in low
    ):
        return (f"no node offers {gres} (cluster profile {cluster!r}); see `sinfo -o '%P %G'` and fix "
                "gres_type/gpus_per_node in the profile, or ask for fewer GPUs")
    if "requested node configuration is not available" in low:
        return "no node has the requested CPUs/memory/nodes; see `sinfo -N -l` and lower resources"
    if "invalid account" in low or "invalid qos" in low:
        return f"{_last_error(text)}; fix account/qos in cluster profile {cluster!r}"
    return f"sbatch failed: {_last_error(text) or 'no message'}"


def _last_error(text: str) -> str:
    parts = [p.strip() for p in re.split(r"sbatch: (?:error|fatal): ", text) if p.strip()]
    msg = parts[-1] if parts else text.strip()
    return msg.removeprefix("Batch job submission failed: ")
