"""The soak's faulty Slurm (bench/soak.py): stand-ins for sbatch, squeue and sacct, first on the PATH of the commands
it runs, each wrapping the real command and choosing at random, per call, how to misbehave; and a look at the
processes a command's sbatch left behind, found by the tag every command of the soak carries in its environment.

sbatch, per call (SBATCH_WAYS gives the chances):
- plain: the real sbatch, which answers in milliseconds;
- slow: waits 2 to 6 s, submits, waits up to 2 s more, then answers (a busy controller, retrying);
- wrapper: a site's sbatch script whose child process does the real submission 2 to 6 s later, while the script
  waits for it: a command that kills only the process it started leaves the child to submit;
- lost: submits, then prints nothing, "Submitted batch job" without an id, or "Socket timed out" with exit 1 (the
  answer lost on its way back);
- hung: submits (or, one call in two, never sends anything), then never answers until it is killed.
squeue and sacct fail one call in QUEUE_FAILS_ONE_IN ("Socket timed out"), half of them after a wait.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
from collections import Counter
from pathlib import Path

SBATCH_WAYS = {"plain": 35, "slow": 25, "wrapper": 15, "lost": 15, "hung": 10}  # chances in 100
QUEUE_FAILS_ONE_IN = 5
# Environment variables of the soak's commands, inherited by whatever they start: the command's tag, and, set by the
# sbatch stand-in, a mark on sbatch and everything it starts. A Slurm job inherits them too (sbatch exports its
# environment), and has SLURM_JOB_ID, which tells its processes from an sbatch's.
COMMAND_TAG = "SOAK_COMMAND"
IN_SBATCH = "SOAK_SBATCH"
SOAK_WORK = "SOAK_WORK"

SBATCH = """#!/bin/bash
# The soak's sbatch (bench/soak_faults.py): the real one at {real}, misbehaving in one of several ways per call.
export {in_sbatch}=1
r=$((RANDOM % 100))
{choose}
# The way, and the job name (sbatch's SBATCH_JOB_NAME, or submitit's #SBATCH line in the file it submits).
echo "$way ${{SBATCH_JOB_NAME:-$(sed -n 's/^#SBATCH --job-name=//p' "${{@: -1}}" 2>/dev/null)}}" >> {calls}/"${{{tag}:-untagged}}"
pause() {{ sleep "$((RANDOM % ($2 - $1) + $1)).$((RANDOM % 10))"; }}  # $1 to $2 s, tenths at random
case $way in
  plain) exec {real} "$@" ;;
  slow) pause 2 6; out=$({real} "$@"); rc=$?; pause 0 2; [ -n "$out" ] && printf '%s\\n' "$out"; exit $rc ;;
  wrapper) ( pause 2 6; exec {real} "$@" ) & wait $!; exit $? ;;
  lost)
    {real} "$@" > /dev/null || exit $?
    case $((RANDOM % 3)) in
      0) exit 0 ;;
      1) echo "Submitted batch job"; exit 0 ;;
      2) echo "sbatch: error: slurm_receive_msg: Socket timed out on send/recv operation" >&2; exit 1 ;;
    esac ;;
  hung)
    [ $((RANDOM % 2)) -eq 0 ] && {real} "$@" > /dev/null
    while :; do sleep 1; done ;;
esac
"""

QUEUE = """#!/bin/bash
# The soak's {name} (bench/soak_faults.py): the real one, failing one call in {one_in}, half of those after a wait.
if [ $((RANDOM % {one_in})) -eq 0 ]; then
  [ $((RANDOM % 2)) -eq 0 ] && sleep 2
  echo '{name}: error: Socket timed out on send/recv operation' >&2; exit 1
fi
exec {real} "$@"
"""


def faulty_slurm(folder: Path, calls: Path) -> Path:
    """Write the stand-ins into `folder` (to go first on PATH); each sbatch call adds its way to calls/<tag>."""
    folder.mkdir(parents=True)
    calls.mkdir(parents=True)
    branches, total = [], 0
    for way, chance in SBATCH_WAYS.items():  # the way of the first bound that r (0 to 99) is under
        total += chance
        branches.append(f"[ $r -lt {total} ]; then way={way}")
    choose = "if " + "\nelif ".join(branches) + "\nelse way=plain\nfi"
    stand_ins = {"sbatch": SBATCH.format(real=real("sbatch"), in_sbatch=IN_SBATCH, choose=choose, tag=COMMAND_TAG,
                                         calls=shlex.quote(str(calls)))}
    for name in ("squeue", "sacct"):
        stand_ins[name] = QUEUE.format(name=name, one_in=QUEUE_FAILS_ONE_IN, real=real(name))
    for name, text in stand_ins.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def real(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on PATH")
    return shlex.quote(path)


def sbatch_calls(calls: Path) -> Counter:
    """How many sbatch calls went each way, over all commands."""
    return Counter(line.split()[0] for file in calls.iterdir() for line in file.read_text().splitlines())


def campaign_called(calls: Path, tag: str) -> str | None:
    """The campaign the first sbatch call of the command tagged `tag` submitted for (from its job name,
    `<script>:<campaign>:<offset>`), if it called sbatch."""
    try:
        first = (calls / tag).read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    parts = first[1].split(":") if len(first) > 1 else []
    return parts[1] if len(parts) > 2 else None


def sbatch_called(calls: Path, tag: str) -> bool:
    """Whether the command tagged `tag` has called sbatch yet."""
    return (calls / tag).exists()


def sbatch_processes(work: Path, tag: str | None = None) -> dict[int, str]:
    """pid -> command line of every live process of an sbatch call of the soak in `work` (of the command tagged
    `tag`, or of any): the stand-in, the real sbatch and whatever they started; never a Slurm job's process."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if (f"{SOAK_WORK}={work}".encode() in environ and f"{IN_SBATCH}=1".encode() in environ
                and not any(var.startswith(b"SLURM_JOB_ID=") for var in environ)
                and (tag is None or f"{COMMAND_TAG}={tag}".encode() in environ)):
            found[int(proc.name)] = cmdline
    return found


def catches_signals(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGTERM (a command once orchestrator.signals has set its
    handlers; Python's startup sets none for SIGTERM)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def end_processes(pids: dict[int, str]) -> None:
    """SIGKILL each process (the soak's own sbatch stand-ins, left hung or outliving their command)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
