"""Driving one pod run to its end: follow, reconnect, salvage, keep the container log, terminate, record.

``runpod up`` (after creating the pod and starting the training) and ``runpod attach`` (after a laptop was
closed) both end here. What the user keeps is decided in one place:

- the training's exit code comes from the pod's exit file; ssh's 255 means the connection dropped, and then
  the run reconnects with backoff while the API says the pod is RUNNING, up to ``reconnect_s``;
- a run that ends normally downloads its whole job folder; one that is interrupted (Ctrl-C, SIGTERM), lost
  (no connection past the deadline, the pod gone) or fails after the training started is *salvaged* first
  (:mod:`gputrain.backends.runpod.salvage`), within ``salvage_s``; a second Ctrl-C skips the salvage;
- the container log is kept in the job folder before the pod is terminated;
- the registry, ``runpod.json`` and ``summary.json`` get the same state: the training's code, or LOST with
  the reason, and the cost from the pod's billed rate × its uptime;
- a pod that the host took away (EXITED: stopped, its volume kept) is started again when the run's folder is on
  its volume, so that salvage can reach it; what was *not* salvaged is never claimed;
- a pod that could not be terminated may still bill: the run's outcome says so (``pod_live``) and the CLI
  exits 1 with that as its last line, whatever the training did; a registry or summary write that fails (a
  full disk) is reported and does not replace the run's own error or its exit code.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from gputrain.backends.runpod.billing import billed_cost
from gputrain.backends.runpod.pods import Pod
from gputrain.backends.runpod.remote import RemoteRun
from gputrain.backends.runpod.salvage import SalvageSkipped, keep_container_log, salvage
from gputrain.backends.runpod.ssh import PodShell, SshConnectionLost, forget_key
from gputrain.contract import jobstate
from gputrain.errors import GputrainError, RunPodError

if TYPE_CHECKING:
    from gputrain.backends.runpod.api import RunPodClient
    from gputrain.registry.store import JobRegistry


def tell(msg: str) -> None:
    """A progress line on stderr. It quotes pod ids, states and names from the RunPod API: shown with their
    control characters made visible, never acted on by the terminal."""
    from gputrain.logs.display import terminal_safe

    print(f"gputrain: {terminal_safe(msg)}", file=sys.stderr, flush=True)


def echo_lines(data: bytes, out: TextIO) -> bytes:
    """Write the complete lines of ``data`` (the pod's output) to ``out`` through the one terminal filter
    (:func:`gputrain.logs.follow.display_line`: a pod's escape sequences are shown, never acted on);
    returns the incomplete last line, to be completed by the next chunk."""
    from gputrain.logs.follow import display_line

    *lines, pending = data.split(b"\n")
    for line in lines:
        out.write(display_line(line) + "\n")
    out.flush()
    return pending

class Interrupted(GputrainError):
    exit_code = 130


class TrainingLost(RunPodError):
    """The run cannot learn how the training ended (connection gone past the deadline, pod gone)."""


@dataclass
class RunSettings:
    keep: bool = False
    reconnect_s: float = 600.0
    salvage_s: float = 300.0
    stop_grace_s: float = 30.0
    log_idle_s: float = 3.0
    keepalive_s: int = 15


@dataclass
class Outcome:
    state: str
    exit_code: int | None
    reason: str
    salvaged: list[str] = field(default_factory=list)
    pod_live: bool = False
    """The pod could not be terminated (and ``--keep`` was not asked): it may still bill."""
    pod_id: str | None = None
    job_dir: str | None = None
    billing: str = ""
    """When ``pod_live``: the line that says so and how to finish the pod."""


def billing_line(name: str, pod_id: str | None) -> str:
    """The line a run ends with when its pod could not be terminated."""
    return (f"pod {pod_id} could not be terminated and may still be billing: finish it with "
            f"`gputrain runpod down {name}` (or terminate pod {pod_id} in RunPod's console)")


class PodStartFailed(RunPodError):
    """The pod went to ERROR/EXITED/TERMINATED while starting; the hint to its container log is added only
    once that log was kept (a hint must work when followed)."""


class PodRun:
    """The pod, its shell and its detached training, from the moment the pod exists to its termination."""

    def __init__(self, client: RunPodClient, registry: JobRegistry, name: str, job_dir: Path, remote: str,
                 settings: RunSettings, say: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.registry = registry
        self.name = name
        self.job_dir = job_dir
        self.remote = remote
        self.settings = settings
        self.say = say or tell
        self.pod: Pod | None = None
        self.shell: PodShell | None = None
        self.training: RemoteRun | None = None
        self.training_started = False
        self.create_attempted = False
        self.cost_per_hour = 0.0
        self.created_wall = time.time()
        self.phase = "run"
        self.salvaged: list[str] = []
        self.log_lines_kept = 0
        self.evicted = False
        self.attempts: list[dict[str, Any]] = []
        """Earlier attempts of this run (``up --retry``); this one is appended when it finishes."""
        self.resumed_from: str | None = None

    # -- signals ------------------------------------------------------------------------------------------
    @contextmanager
    def signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM: while running, raise :class:`Interrupted` (salvage, then terminate); while
        salvaging, skip the salvage; while terminating, note it and go on (the pod must not be abandoned)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.phase == "run":
                raise Interrupted(f"interrupted by {signal.Signals(signum).name}")
            if self.phase == "salvage":
                self.phase = "terminate"
                raise SalvageSkipped()
            self.say("still terminating the pod; please wait")

        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # -- the run --------------------------------------------------------------------------------------------
    def execute(self, body: Callable[[], int]) -> Outcome:
        """Run ``body`` (it returns the training's exit code) and then always finish: salvage when the run
        did not end normally, keep the container log, terminate, record. Re-raises what ``body`` raised."""
        outcome = Outcome(jobstate.FAILED, None, "the run stopped before the training started")
        with self.signals():
            try:
                try:
                    rc = body()
                    self.say(f"training exited with {rc}; downloading results")
                    self._with_reconnect(lambda: self._shell().download(f"{self.remote}/job", self.job_dir))
                    ending = jobstate.end_state(rc, jobstate.markers_in(self.job_dir))
                    outcome = Outcome(ending.state, rc, ending.reason)
                except Interrupted as exc:
                    outcome = Outcome(jobstate.CANCELLED, None, f"{exc} (cancelled by the user)")
                    self.say(f"{exc}; stopping the training and salvaging (Ctrl-C again skips the salvage)")
                    self._salvage(stop_first=True)
                    raise
                except TrainingLost as exc:
                    facts = jobstate.BackendFacts(connection_lost=True)
                    outcome = Outcome(jobstate.end_state(None, (), facts).state, None, exc.message)
                    self.say(f"LOST: {exc.message}; salvaging what can be reached")
                    self._salvage(stop_first=False)
                except GputrainError as exc:
                    outcome = Outcome(jobstate.FAILED, None, exc.message)
                    if self.training_started:
                        self.say(f"error: {exc.message}; salvaging before terminating the pod")
                        self._salvage(stop_first=True)
                    raise
            except GputrainError as exc:
                self.phase = "terminate"
                self._finish(outcome)
                self._amend(exc, outcome)
                raise
            except BaseException:
                self.phase = "terminate"
                self._finish(outcome)
                raise
            self.phase = "terminate"
            self._finish(outcome)
        return outcome

    def _amend(self, exc: GputrainError, outcome: Outcome) -> None:
        """The error that ends the run says what the finish learnt: where the container log is (only when it
        was kept) and, last, that a pod may still bill."""
        if isinstance(exc, PodStartFailed):
            exc.message += (f"; its container log is kept: `gputrain runpod logs {self.name} --pod`"
                            if self.log_lines_kept else "; RunPod gave no container log for it")
        if outcome.pod_live:
            exc.message += f"; {outcome.billing}"

    def launch(self, exports: str) -> None:
        from gputrain.registry.transitions import record_state

        self.training = RemoteRun(self._shell(), self.remote)
        self._with_reconnect(lambda: self._remote().launch(exports))
        self.training_started = True
        record_state(self.registry, self.name, jobstate.RUNNING, training_started=True)

    def follow_to_end(self) -> int:
        """Stream ``run.out`` into ``training_output.log`` until the exit file appears; reconnect on drops."""
        remote = self._remote()
        with open(self.job_dir / "training_output.log", "ab") as log:
            pending = b""
            last_cost = time.monotonic() - 60  # the first output says the cost so far, then once a minute

            def on_chunk(chunk: bytes) -> None:
                nonlocal pending, last_cost
                if time.monotonic() - last_cost >= 60:
                    last_cost = time.monotonic()
                    so_far, _ = billed_cost(self.cost_per_hour, self.pod.created_at if self.pod else None,
                                            self.created_wall, time.time())
                    self.say(f"cost so far ${so_far:.2f} (billed ${self.cost_per_hour:.2f}/h)")
                log.write(chunk)
                log.flush()
                pending = echo_lines(pending + chunk, sys.stdout)

            while True:
                try:
                    if remote.follow(on_chunk) == 255:
                        raise SshConnectionLost("the ssh connection dropped while following the training")
                    code, alive = remote.status()
                except SshConnectionLost as exc:
                    self.say(f"{exc.message}; reconnecting while the pod is RUNNING "
                             f"(for up to {self.settings.reconnect_s:.0f} s)")
                    self.reconnect()
                    continue
                if code is not None:
                    return code
                if alive != "alive":
                    raise TrainingLost("the training on the pod ended without writing its exit code"
                                       if alive == "gone" else "the training never started on the pod")

    def reconnect(self) -> None:
        """Back off and retry ssh while the API says RUNNING; :class:`TrainingLost` past the deadline or when
        the pod is no longer RUNNING."""
        from gputrain.backends.runpod.api import RunPodNotFound

        assert self.pod is not None
        deadline = time.monotonic() + self.settings.reconnect_s
        delay = 1.0
        while True:
            try:
                pod = self.client.get_pod(self.pod.id)
            except RunPodNotFound:
                self.pod, self.evicted = replace(self.pod, status="TERMINATED"), True  # nothing left to salvage
                raise TrainingLost(f"pod {self.pod.id} is gone (terminated outside this run)") from None
            except RunPodError as exc:
                self.say(f"RunPod API not reachable ({exc.message}); still trying")
                pod = None
            if pod is not None:
                self.pod = pod
                self.cost_per_hour = max(self.cost_per_hour, pod.cost_per_hour)
                if pod.status != "RUNNING":
                    self.evicted = pod.status in ("EXITED", "TERMINATED")
                    raise TrainingLost(f"pod {pod.id} went to {pod.status} while the connection was down"
                                       + (" (taken away by its host)" if self.evicted else ""))
                if pod.ssh_direct is not None:
                    self._shell().endpoint = pod.ssh_direct
            shell = self._shell()
            if shell.check("true", timeout_s=shell.connect_timeout_s + 5):
                self.say("reconnected to the pod")
                return
            if time.monotonic() + delay > deadline:
                raise TrainingLost(f"no ssh connection to pod {self.pod.id} for {self.settings.reconnect_s:.0f} s "
                                   "while the API said RUNNING")
            time.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _with_reconnect(self, action: Callable[[], Any]) -> Any:
        while True:
            try:
                return action()
            except SshConnectionLost as exc:
                self.say(f"{exc.message}; reconnecting")
                self.reconnect()

    # -- salvage and teardown ---------------------------------------------------------------------------------
    def _salvage(self, stop_first: bool) -> None:
        if self.shell is None or not self.training_started:
            return
        self.phase = "salvage"
        try:
            if self.pod is not None and self.pod.status in ("EXITED", "TERMINATED") and not self._restart_for_salvage():
                return
            if stop_first and self.training is not None:
                code = self.training.stop(self.settings.stop_grace_s)
                self.say(f"training stopped (exit {code})" if code is not None else
                         f"training did not stop within {self.settings.stop_grace_s:.0f} s; salvaging anyway")
            self.salvaged = salvage(self.shell, f"{self.remote}/job", self.job_dir, self.settings.salvage_s,
                                    self.say)
            self.say(f"salvaged: {', '.join(self.salvaged) or 'nothing (the job folder was empty)'}")
        except SalvageSkipped:
            self.say("salvage skipped (second interrupt); terminating the pod")
        except GputrainError as exc:
            self.say(f"salvage failed: {exc.message}; kept: {', '.join(self.salvaged) or 'nothing'}")
        finally:
            self.phase = "terminate"

    def _restart_for_salvage(self) -> bool:
        """An EXITED pod keeps its volume: start it again (within the salvage budget) when the run's folder is
        on that volume. False (and why, said once) when nothing can be reached."""
        from gputrain.backends.runpod.api import RunPodNotFound

        pod = self.pod
        assert pod is not None
        volume = pod.volume_path
        on_volume = volume is not None and (self.remote + "/").startswith(volume.rstrip("/") + "/")
        if pod.status != "EXITED" or not on_volume:
            why = ("it was terminated" if pod.status == "TERMINATED" else
                   "it has no volume, so its disk went with it" if volume is None else
                   f"the run's folder {self.remote} is not on its volume {volume}")
            self.say(f"nothing salvaged from pod {pod.id}: {why}")
            return False
        self.say(f"pod {pod.id} is EXITED with its volume {volume}: starting it again to salvage the run")
        deadline = time.monotonic() + self.settings.salvage_s
        try:
            self.client.start_pod(pod.id)
            while time.monotonic() < deadline:
                pod = self.pod = self.client.get_pod(pod.id)
                self.cost_per_hour = max(self.cost_per_hour, pod.cost_per_hour)
                if pod.ready_for_ssh and pod.ssh_direct is not None:
                    shell = self._shell()
                    shell.endpoint = pod.ssh_direct
                    if shell.check("true", timeout_s=shell.connect_timeout_s + 5):
                        return True
                time.sleep(1.0)
        except RunPodNotFound:
            self.say(f"nothing salvaged: pod {pod.id} is gone")
            return False
        except RunPodError as exc:
            self.say(f"nothing salvaged: could not start pod {pod.id} again ({exc.message})")
            return False
        self.say(f"nothing salvaged: pod {pod.id} did not come back within {self.settings.salvage_s:.0f} s")
        return False

    def _finish(self, outcome: Outcome) -> None:
        from gputrain.registry.transitions import record_state

        pods = [self.pod] if self.pod is not None else []
        if not pods and self.create_attempted:
            try:  # a create whose answer was lost may still have made a pod
                pods = self.client.find_pods(self.name)
            except RunPodError as exc:
                self.say(f"could not check for a pod named {self.name}: {exc}")
        for pod in pods[:1]:
            try:
                kept = self.log_lines_kept = keep_container_log(self.client, pod.id, self.job_dir,
                                                                idle_s=self.settings.log_idle_s)
                self.say(f"kept {kept} line(s) of the container log in {self.job_dir / 'container.log'}")
            except (RunPodError, OSError) as exc:
                self.say(f"could not keep the container log: {exc}")
        ended = time.time()
        terminated = True
        if not self.settings.keep:
            for pod in pods:
                try:
                    gone_now = self.client.delete_pod(pod.id)
                    self.say(f"pod {pod.id} {'terminated' if gone_now else 'was already gone'}")
                except RunPodError as exc:
                    terminated = False
                    self.say(f"error: could not terminate pod {pod.id}: {exc}")
                    self.say(f"the pod is still billing; finish it with: gputrain runpod down {self.name}   "
                             f"(or in RunPod's console: terminate pod {pod.id})")
            if terminated:
                forget_key(self.name)
        elif pods:
            self.say(f"--keep: pod {pods[0].id} left running; finish it with: gputrain runpod down {self.name}")
        created = self.pod.created_at if self.pod is not None else None
        cost, uptime = billed_cost(self.cost_per_hour, created, self.created_wall, ended)
        outcome.salvaged = list(self.salvaged)
        outcome.pod_id = pods[0].id if pods else None
        outcome.job_dir = str(self.job_dir)
        outcome.pod_live = bool(pods) and not terminated and not self.settings.keep
        if outcome.pod_live:
            outcome.billing = billing_line(self.name, outcome.pod_id)
            outcome.reason += f"; {outcome.billing}"
        record: dict[str, Any] = {"pod_name": self.name, "pod_id": outcome.pod_id, "state": outcome.state,
                  "exit_code": outcome.exit_code, "reason": outcome.reason, "cost_per_hour_usd": self.cost_per_hour,
                  "uptime_s": round(uptime, 1), "cost_usd": round(cost, 4), "salvaged": self.salvaged,
                  "terminated": bool(pods) and terminated and not self.settings.keep,
                  "live": bool(pods) and not (terminated and not self.settings.keep)}
        self.attempts.append({"attempt": len(self.attempts) + 1, "pod_id": outcome.pod_id, "state": outcome.state,
                              "reason": outcome.reason, "resumed_from": self.resumed_from,
                              "salvaged": list(self.salvaged), "cost_usd": round(cost, 4)})
        if len(self.attempts) > 1:
            record["attempts"] = self.attempts
            record["cost_usd"] = round(sum(float(a["cost_usd"]) for a in self.attempts), 4)
            for a in self.attempts:
                self.say(f"attempt {a['attempt']}: pod {a['pod_id']} {a['state']}"
                         f"{' from ' + a['resumed_from'] if a['resumed_from'] else ''} (${a['cost_usd']:.2f})")
        self.say(f"{outcome.state}: {outcome.reason}; cost ${cost:.2f} (${self.cost_per_hour:.2f}/h × "
                 f"{uptime / 60:.1f} min)")
        self._write_summaries(record)
        try:
            record_state(self.registry, self.name, outcome.state, exit_code=outcome.exit_code,
                         **{k: v for k, v in record.items() if k not in ("state", "exit_code")})
        except (sqlite3.Error, OSError, GputrainError) as exc:
            self.say(f"could not record the end state in the job registry ({exc}); `gputrain runpod list` "
                     f"records it from {self.job_dir / 'runpod.json'} once the registry can be written")

    def _write_summaries(self, record: dict[str, Any]) -> None:
        from gputrain.atomic import write_atomic

        try:
            write_atomic(self.job_dir / "runpod.json", json.dumps(record, indent=2) + "\n")
        except OSError as exc:
            self.say(f"could not write {self.job_dir / 'runpod.json'}: {exc.strerror or exc}")
            return
        try:
            from gputrain.backends.runpod.billing import write_job_summary

            write_job_summary(self.job_dir, record, self.pod.gpu_count if self.pod else 0)
        except (GputrainError, OSError, ValueError) as exc:
            self.say(f"could not write the job summary: {exc}")

    # -- helpers ---------------------------------------------------------------------------------------------
    def _shell(self) -> PodShell:
        if self.shell is None:
            raise RunPodError("no ssh connection to the pod yet")
        return self.shell

    def _remote(self) -> RemoteRun:
        if self.training is None:
            self.training = RemoteRun(self._shell(), self.remote)
        return self.training
