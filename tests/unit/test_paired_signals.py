"""A paired script runs its backends as children of the batch shell, which alone receives Slurm's warning
signal (--signal=B:...): the shell passes it on to the running backend and starts no further run."""

import json
import shlex
import signal
import subprocess

import pytest
from helpers import driver_passthrough, fake_tools, run_cli, wait_until


def stand_in_env(env_dir, framework, log):
    """`python` that sets its traps, logs its start, then waits; on TERM or USR1 it logs the signal and exits
    128 + n."""
    bin_dir = env_dir / framework / "bin"
    fake_tools(bin_dir, python=(
        f"{driver_passthrough()}"
        f"trap 'kill $!; echo \"{framework} got TERM\" >> {shlex.quote(str(log))}; exit 143' TERM\n"
        f"trap 'kill $!; echo \"{framework} got USR1\" >> {shlex.quote(str(log))}; exit 138' USR1\n"
        f'echo "{framework} started $4" >> {shlex.quote(str(log))}\n'  # once its traps are set
        "sleep 60 & wait\n"))
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_the_warning_signal_reaches_the_running_backend_of_a_pair(tmp_path, signum):
    log = tmp_path / "log.txt"
    for framework in ("jax", "torch"):
        stand_in_env(tmp_path / "envs", framework, log)
    profile = tmp_path / "p.toml"
    profile.write_text(f"env_dir = {json.dumps(str(tmp_path / 'envs'))}\n")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--paired", "--pack", "0", "--trials", "2",
                   "--dry-run", "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "s" / "paired_digits_1.sh"
    shell = subprocess.Popen(["bash", str(script)], env={"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": "0"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: log.exists() and "started" in log.read_text(), shell)  # its traps are set
    shell.send_signal(signum)
    _, err = shell.communicate(timeout=30)
    name = signal.Signals(signum).name.removeprefix("SIG")
    first = log.read_text().splitlines()[0].split()[0]
    assert log.read_text().splitlines() == [f"{first} started 0", f"{first} got {name}"]  # no further run
    assert shell.returncode == 143 and "stopped by a signal during trial 0" in err
