"""One sbatch call, as every Slurm submission makes it: in a session of its own under a watchdog, killed with its
children when the command stops or stops waiting; its answer read in sbatch's own words (a job id, a refusal, or
an unknown outcome); its wait said while it lasts; its intent and outcome recorded in the campaign's manifest."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.plan.manifest import CALLING_SBATCH, SUBMITTED, UNKNOWN, ArrayRecord, utc
from orchestrator.run.waiting_times import sbatch_slow_s, sbatch_timeout_s
from orchestrator.signals import Stopped


def require_command(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UsageError(
            f"'{name}' is not on PATH, so jobs cannot go to Slurm here; use --executor local to run on this "
            "machine, or --dry-run to only write the scripts"
        )
    return path


# sbatch's words for a full controller or a spent submit limit, and what each means.
LIMITS = {
    "MaxJobCount": "the controller already holds as many jobs as its MaxJobCount allows",
    "QOSMaxSubmitJobPerUserLimit": "your QOS's MaxSubmitJobsPerUser is reached",
    "AssocMaxSubmitJobLimit": "your association's MaxSubmitJobs is reached",
    "AssocGrpSubmitJobsLimit": "your account's GrpSubmitJobs is reached",
    "QOSGrpSubmitJobsLimit": "your QOS's GrpSubmitJobs is reached",
    "MaxSubmitJobs": "a MaxSubmitJobs limit is reached",
    "Slurm temporarily unable to accept job": "the controller is too busy to accept jobs now",
    "job submit limit": "a limit on how many jobs you may submit is reached",
}


# sbatch's words when its request or the controller's answer was lost on the way: it exits non-zero, yet the
# controller may have accepted the job. Only an `error:` line without any of these is a refusal.
LOST_ON_THE_WAY = ("Socket timed out", "Unable to contact slurm controller", "Zero Bytes were transmitted or received",
                   "Connection refused", "Connection reset", "Connection timed out", "Communication connection failure",
                   "Transport endpoint is not connected", "backup controller in standby mode", "Unexpected message")


# sbatch's own words for a refusal: Slurm's `error:` (a limit, an invalid account, a bad value) and `fatal:` (an
# #SBATCH line it cannot parse: "line 12: Unmatched `'`"; no configuration), and the line Slurm adds to getopt's
# complaint about an option ("unrecognized option '--nosuch'", which getopt words in the user's language).
REFUSED = ("error:", "fatal:", 'Try "sbatch --help" for more information')


def is_refusal(said: str) -> bool:
    """Whether the words of an sbatch that exited non-zero say that nothing was submitted: sbatch's own refusal
    (REFUSED), not a lost connection, and not silence."""
    return any(words in said for words in REFUSED) and not any(words in said for words in LOST_ON_THE_WAY)


class SubmissionUnknown(OrchestratorError):
    """sbatch gave no answer in time (or an answer that names no job): the array may or may not exist."""


class SbatchRefused(OrchestratorError):
    """sbatch said no: nothing was submitted by this call."""

    def __init__(self, script: Path, said: str, where: str = ""):
        super().__init__(sbatch_refusal(script, said, where))
        self.script, self.said = script, said


def unknown_outcome(script: Path, said: str, how: str) -> SubmissionUnknown:
    """An sbatch call whose outcome is unknown, in one sentence: `how` it ended, and what it said."""
    return SubmissionUnknown(
        f"{how} for {script}" + (f" (it said: {said})" if said else "") + ", so whether Slurm accepted it is "
        "unknown; run the same command again: it first looks the array up in Slurm by its job name and submits only "
        "what is missing")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def slow_sbatch(seconds: float, then: str, said: str = "") -> str:
    """The line that tells a user that sbatch is waiting and why (in its own words `said`, where it printed any,
    with what they mean), and `then` what happens."""
    waited = f"sbatch has not answered for {seconds:.0f} s: "
    if not said:
        return f"{waited}the controller is busy or full (`sdiag` and `squeue | wc -l` say which); {then}"
    meaning = next((why for word, why in LIMITS.items() if word in said), None)
    return (f'{waited}it says "{said}"' + (f": {meaning}" if meaning else "")
            + f" (`sdiag` and `squeue | wc -l` say whether the controller is busy or full); {then}")


def array_job_name(campaign: str, key: str, offset: int) -> str:
    """The job name of one array job: its script key, campaign and first cell (the offset of its part). It finds
    the array again in Slurm (sacct --name, or squeue --name) when sbatch's answer was lost."""
    return f"{key}:{campaign}:{offset}"


def sbatch_refusal(script: Path, said: str, where: str = "") -> str:
    """sbatch's refusal as one sentence (`where`: which part, and the parts already submitted), with what to do
    when it is a limit."""
    meaning = next((why for word, why in LIMITS.items() if word in said), None)
    where = f" ({where})" if where else ""
    if meaning is None:
        return f"sbatch refused {script}: {said}{where}"
    return (f"sbatch refused {script}: {said}{where}: {meaning}; run the same command again once jobs have left "
            "the queue (squeue --me), it submits only what is missing, or plan fewer cells")


# After sbatch and its children are killed, a request they sent may still reach the controller and be accepted: a
# message on its way takes up to Slurm's MessageTimeout (10 s by default), after which sbatch itself would have
# said "Socket timed out". Until then, a lookup by job name that finds nothing is no answer yet.
ACCEPT_GRACE_S = 10.0


def intent(entry: ArrayRecord) -> tuple[ArrayRecord, float]:
    """What is recorded before an sbatch call (unknown, CALLING_SBATCH), and when (time.time()) that call's sbatch
    is killed at the latest, whoever ends first: the record's `answer_by` is that time and ACCEPT_GRACE_S, before
    which Slurm may still accept the array though no lookup finds it (reconcile leaves it unknown until then)."""
    until = time.time() + sbatch_timeout_s()
    return replace(entry, state=UNKNOWN, reason=CALLING_SBATCH, answer_by=utc(until + ACCEPT_GRACE_S)), until


def sbatch(script: Path, *args: str, options: tuple[str, ...] = (), job_name: str | None = None,
           warn: Callable[[str], None] = say, until: float | None = None) -> str:
    """One sbatch call; returns the job id. A refusal becomes one sentence with sbatch's own words; no answer
    by `until` (time.time(); default sbatch_timeout_s() from now) raises SubmissionUnknown. After sbatch_slow_s()
    without an answer, `warn` says why, in sbatch's words so far where it printed any ("Slurm temporarily unable to
    accept job, sleeping and retrying"). `job_name` replaces the script's --job-name (through SBATCH_JOB_NAME,
    which outranks #SBATCH lines). sbatch runs as in_own_session says."""
    command = [require_command("sbatch"), "--parsable", *options, str(script), *args]
    env = {**os.environ, "SBATCH_JOB_NAME": job_name} if job_name else None
    code, out, err = in_own_session(command, script, until, warn, env)
    if code != 0:
        said = "; ".join(line.strip() for line in (err or out).splitlines() if line.strip())
        if not is_refusal(said):  # "Socket timed out on send/recv operation": the job may exist
            raise unknown_outcome(script, said, f"sbatch exited with status {code}")
        raise SbatchRefused(script, said)
    job_id = out.strip().split(";")[0]  # --parsable prints "jobid" or "jobid;cluster"
    if not job_id.isdigit():
        raise SubmissionUnknown(f"sbatch printed {out.strip()!r} for {script}, not a job id, so whether Slurm "
                                "accepted it is unknown; run the same command again: it looks the array up first")
    return job_id


def in_own_session(command: list[str], script: Path, until: float | None = None, warn: Callable[[str], None] = say,
                   env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run an sbatch command line (sbatch's, or the one submitit makes) to its end: (exit status, stdout, stderr).
    SubmissionUnknown where it has not answered by `until` (time.time(); default sbatch_timeout_s() from now);
    after sbatch_slow_s(), `warn` says that it waits, and why in its own words so far.

    It runs in a session of its own under a watchdog (coreutils `timeout`), and everything it starts (a site's
    sbatch may be a script whose child submits) is killed as one group: when this command stops (Ctrl-C, SIGTERM,
    an error) or stops waiting, and, should this command be killed outright (SIGKILL), by the watchdog at `until`.
    No sbatch of this call accepts an array later than that (and ACCEPT_GRACE_S for a request on its way)."""
    waits = (sbatch_slow_s(), sbatch_timeout_s())  # read, and a bad value refused, before sbatch starts
    until = time.time() + waits[1] if until is None else until
    watchdog = require_watchdog()
    left = until - time.time()
    if left <= 0:  # `timeout 0` would wait forever
        raise OrchestratorError(f"sbatch was not started for {script}: its {waits[1]:g} s "
                                "(ORCHESTRATOR_SBATCH_TIMEOUT_S) were spent before it could start")
    # stderr goes to a file, not a pipe, so that what sbatch says while it retries can be read before it ends.
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen([watchdog, "-s", "KILL", f"{left:.3f}", *command], stdout=subprocess.PIPE,
                                    stderr=stderr, text=True, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:
            raise OrchestratorError(f"sbatch could not be started for {script}: {exc}") from None
        try:
            out = sbatch_answer(proc, script, stderr, warn, waits[0], left, waits[1])
        finally:
            kill_group(proc)  # whatever ended the wait: nothing of this sbatch lives on to submit later
        err = written(stderr)
    if proc.returncode < 0:  # the watchdog killed it (this command was held up past `until`)
        raise sbatch_silent(script, waits[1], last_line(err))
    return proc.returncode, out, err


def require_watchdog() -> str:
    """coreutils `timeout`, which bounds sbatch's life should this command be killed outright."""
    path = shutil.which("timeout")
    if path is None:
        raise UsageError("'timeout' (GNU coreutils) is not on PATH: it stops sbatch should this command be killed "
                         "while sbatch works, so that no array is accepted after the next run looked for it")
    return path


def kill_group(proc: subprocess.Popen) -> None:
    """Kill sbatch's process group (the watchdog, sbatch and whatever they started), and reap the watchdog."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # every process of the group has ended
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # unkillable (a process in uninterruptible sleep): the watchdog's exit is not awaited


def sbatch_answer(proc: subprocess.Popen, script: Path, stderr, warn: Callable[[str], None], slow_s: float,
                  left_s: float, timeout_s: float) -> str:
    """sbatch's stdout once it has ended; after `slow_s`, `warn` says that it waits and what it said so far;
    after `left_s` SubmissionUnknown is raised (the caller kills it)."""
    start = time.monotonic()
    try:
        return proc.communicate(timeout=min(slow_s, left_s))[0]
    except subprocess.TimeoutExpired:
        if slow_s < left_s:
            warn(slow_sbatch(slow_s, f"waiting up to {timeout_s:.0f} s", last_line(written(stderr))))
    try:
        return proc.communicate(timeout=max(0.0, left_s - (time.monotonic() - start)))[0]
    except subprocess.TimeoutExpired:
        pass
    raise sbatch_silent(script, timeout_s, last_line(written(stderr)))


def sbatch_silent(script: Path, timeout_s: float, said: str) -> SubmissionUnknown:
    return SubmissionUnknown(
        f"sbatch did not answer within {timeout_s:.0f} s for {script}" + (f" (it said: {said})" if said else "")
        + ", so whether Slurm accepted it is unknown: the controller is busy; run the same command again later, it "
        "first looks the array up in Slurm by its job name and submits only what is missing")


def written(stderr) -> str:
    """What a process has written to the file `stderr` so far (read without moving the offset it writes at)."""
    return os.pread(stderr.fileno(), 1 << 20, 0).decode(errors="replace")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def recorded_sbatch(script: Path, args: tuple[str, ...], options: tuple[str, ...], entry: ArrayRecord,
                    record: Callable[[ArrayRecord], None] | None) -> str:
    """sbatch (above) named entry.job_name, recorded as recorded_call says."""
    return recorded_call(entry, record, lambda until: sbatch(script, *args, options=options,
                                                             job_name=entry.job_name or None, until=until))


def recorded_call(entry: ArrayRecord, record: Callable[[ArrayRecord], None] | None,
                  call: Callable[[float], str]) -> str:
    """One submission, `call(until)` (an sbatch call, or submitit's, run in_own_session with that limit), which
    returns the job id; its intent recorded before the call and its outcome after (`record`; None: nothing is
    recorded): submitted with the job id, refused, or unknown. A command stopped while sbatch works (Ctrl-C, SIGTERM,
    SIGHUP) kills sbatch's group on its way out, and the record says from when no lookup of the array's name can
    miss it; a command killed outright (SIGKILL) leaves the intent, whose `answer_by` says the same of the
    watchdog's kill."""
    planned, until = intent(entry)
    if record:  # the intent first: a kill while sbatch works leaves "unknown", not nothing
        record(planned)
    try:
        job_id = call(until)
    except OrchestratorError as exc:
        if record:
            record(replace(entry, state=UNKNOWN if isinstance(exc, SubmissionUnknown) else "refused", reason=str(exc)))
        raise
    except Stopped:
        if record:
            try:
                record(replace(entry, state=UNKNOWN, reason=f"{CALLING_SBATCH}; sbatch, and what it started, were "
                               "killed with it", answer_by=utc(time.time() + ACCEPT_GRACE_S)))
            except OrchestratorError:
                pass  # the intent stays, with the watchdog's later answer_by
        raise
    if record:
        record(replace(entry, state=SUBMITTED, job_id=job_id))
    return job_id
