"""`main.py envs`: an environment is built with uv from its lock file and reused while the lock is unchanged; a lock
that no longer matches its requirements is refused with the command that regenerates it."""

import hashlib

import pytest
from helpers import fake_tools

from orchestrator.errors import OrchestratorError
from orchestrator.plan.profile import ClusterProfile
from orchestrator.run import envs, locks

# uv 0.13's output of a sync on a pipe: summary lines, then one line per package.
UV_SYNC_OUTPUT = """\
Using Python 3.11.7 environment at: ENV
Resolved 3 packages in 150ms
Prepared 1 package in 2.10s
Installed 3 packages in 109ms
 + numpy==2.4.6
 + pillow==13.0.0
 + scikit-learn==1.9.1
"""


def fake_uv(tmp_path, sync_output: str = UV_SYNC_OUTPUT, sync_exit: int = 0):
    """A uv whose `venv` makes an environment with a python in it and whose `pip sync` prints `sync_output`; every
    call is recorded."""
    (tmp_path / "sync_output.txt").write_text(sync_output)
    fake_tools(tmp_path, uv=f"""\
echo "$@" >> {tmp_path / "uv_calls.txt"}
if [ "$1" = venv ]; then env="${{@: -1}}"; mkdir -p "$env/bin" && touch "$env/bin/python" && exit 0; fi
if [ "$1 $2" = "pip sync" ]; then cat {tmp_path / "sync_output.txt"}; exit {sync_exit}; fi
exit 9
""")
    return tmp_path / "uv"


def a_lock(tmp_path, pins: str = "numpy==2.4.6\n") -> locks.Lock:
    """A requirements file and a lock generated from it (its fingerprint line, then a pin)."""
    lock = locks.Lock(tmp_path / "requirements.txt", tmp_path / "requirements.lock")
    lock.requirements.write_text(pins)
    lock.lock.write_text(f"{locks.FINGERPRINT_PREFIX}{lock.fingerprint()}\nnumpy==2.4.6 \\\n    --hash=sha256:00\n")
    return lock


@pytest.fixture
def built(tmp_path, monkeypatch):
    lock = a_lock(tmp_path)
    monkeypatch.setattr(envs, "lock_for", lambda framework, profile: lock)
    monkeypatch.setattr(envs, "uv_binary", lambda: str(fake_uv(tmp_path)))
    return lock, ClusterProfile(env_dir=str(tmp_path / "envs"))


def test_built_with_uv_from_the_lock_once_then_reused_then_rebuilt_when_the_lock_changes(tmp_path, built):
    lock, profile = built
    said = []
    env = envs.ensure_env("jax", profile, report=said.append)
    assert env == tmp_path / "envs" / "jax" and (env / "bin" / "python").exists()
    calls = (tmp_path / "uv_calls.txt").read_text().splitlines()
    assert calls[0].startswith("venv --quiet --python ") and calls[0].endswith(str(env))
    assert calls[1] == f"pip sync --require-hashes --compile-bytecode --python {env / 'bin' / 'python'} {lock.lock}"
    marker = env / "marker"
    marker.write_text("")
    envs.ensure_env("jax", profile, report=said.append)
    assert marker.exists() and "up to date" in said[-1]
    assert len((tmp_path / "uv_calls.txt").read_text().splitlines()) == 2  # nothing built the second time

    lock.lock.write_text(lock.lock.read_text() + "# regenerated\n")
    envs.ensure_env("jax", profile, report=said.append)
    assert not marker.exists() and envs.is_current(env, lock.lock)


def test_uvs_summary_lines_are_the_progress_and_its_package_lines_are_not(tmp_path, built):
    _, profile = built
    said = []
    env = envs.ensure_env("torch", profile, report=said.append)
    assert [line for line in said if line.startswith("torch: uv: ")] == [
        "torch: uv: Using Python 3.11.7 environment at: ENV", "torch: uv: Resolved 3 packages in 150ms",
        "torch: uv: Prepared 1 package in 2.10s", "torch: uv: Installed 3 packages in 109ms"]
    assert said[-1] == f"torch: environment ready at {env}"


def test_a_failed_uv_is_one_error_with_its_last_lines_and_leaves_no_current_environment(tmp_path, monkeypatch, built):
    _, profile = built
    output = "".join(f"detail {i}\n" for i in range(20)) + "error: Hash mismatch for numpy==2.4.6\n"
    monkeypatch.setattr(envs, "uv_binary", lambda: str(fake_uv(tmp_path, output, sync_exit=2)))
    with pytest.raises(OrchestratorError) as caught:
        envs.ensure_env("jax", profile, report=lambda line: None)
    message = str(caught.value)
    assert message.startswith(f"{fake_uv(tmp_path)} pip sync ... failed (exit 2):")
    assert message.endswith("detail 19\nerror: Hash mismatch for numpy==2.4.6") and "detail 10" not in message
    assert not (tmp_path / "envs" / "jax" / envs.STAMP).exists()


def test_a_lock_that_no_longer_matches_its_requirements_is_refused_before_anything_is_built(tmp_path, built):
    lock, profile = built
    lock.requirements.write_text("numpy==2.4.7\n")
    with pytest.raises(OrchestratorError, match="no longer matches .*txt: regenerate it with `make locks`"):
        envs.ensure_env("jax", profile, report=lambda line: None)
    assert not (tmp_path / "envs").exists() and not (tmp_path / "uv_calls.txt").exists()


def test_comments_do_not_make_a_lock_stale_but_a_changed_pin_or_option_does(tmp_path):
    lock = a_lock(tmp_path, "numpy==2.4.6\n")
    lock.requirements.write_text("# the contract's numpy\nnumpy==2.4.6  # pinned\n\n")
    lock.check()
    for changed in ("numpy==2.4.7\n", "numpy==2.4.6\n--index-url https://example.org/simple\n"):
        lock.requirements.write_text(changed)
        with pytest.raises(OrchestratorError, match="make locks"):
            lock.check()


def test_an_interrupted_build_is_not_current(tmp_path):
    lock = a_lock(tmp_path)
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)  # a venv without the stamp: its sync never finished
    assert not envs.is_current(env, lock.lock)


def test_an_environment_built_by_an_earlier_recipe_is_not_current(tmp_path):
    """Environments built before bytecode was compiled at build time (their stamp, the lock's hash alone) are
    built again, so that no process compiles torch from source."""
    lock = a_lock(tmp_path)
    env = tmp_path / "env"
    env.mkdir()
    (env / envs.STAMP).write_text(hashlib.sha256(lock.lock.read_bytes()).hexdigest() + "\n")
    assert not envs.is_current(env, lock.lock)
    (env / envs.STAMP).write_text(envs.fingerprint(lock.lock) + "\n")
    assert envs.is_current(env, lock.lock)


def test_the_profile_chooses_the_jax_lock():
    assert envs.lock_for("jax", ClusterProfile(jax_recipe="cuda12")).lock.name == "requirements-cuda12.lock"
    assert envs.lock_for("jax", ClusterProfile()).lock.name == "requirements-cpu.lock"
    assert envs.lock_for("torch", ClusterProfile()).lock.name == "requirements.lock"


def test_an_environment_built_for_another_plan_is_refused_with_the_command_that_builds_the_right_one(tmp_path):
    """.envs/jax built from the CPU lock, a profile of GPU nodes whose plan needs the CUDA build: submission said
    "(its cuda12 build)" in the script and went through, and the jobs failed on the node. Submission, validate and
    doctor now say which lock the environment was built from and which the plan needs."""
    from helpers import fake_slurm_site, run_cli

    env, calls, profile = fake_slurm_site(tmp_path, {}, 'gpus_per_task = 1\njax_recipe = "cuda12"\n')
    (tmp_path / "envs" / "jax" / envs.STAMP).write_text(envs.fingerprint(locks.JAX["cpu"].lock) + "\n")
    (tmp_path / "envs" / "torch" / envs.STAMP).write_text(envs.fingerprint(locks.TORCH.lock) + "\n")
    expected = (f"the jax environment {tmp_path / 'envs' / 'jax'} was built from requirements-cpu.lock, not from "
                "requirements-cuda12.lock, which this plan's jobs need (the profile's jax_recipe is cuda12); build "
                f"it with: python main.py envs --framework jax --profile {profile}")
    launch = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile),
                     "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert (launch.returncode, launch.stderr.strip()) == (2, f"error: {expected}")
    assert not calls.exists() and not (tmp_path / "r").exists()
    validate = run_cli("validate", "--model", "mlp", "--profile", str(profile), env=env)
    assert (validate.returncode, validate.stderr.strip()) == (2, f"error: {expected}")
    doctor = run_cli("doctor", "--profile", str(profile), env=env)
    assert doctor.returncode == 1 and expected.removeprefix("the jax environment ") in doctor.stdout, doctor.stdout
    # Built again from the lock the plan needs, it is taken.
    (tmp_path / "envs" / "jax" / envs.STAMP).write_text(envs.fingerprint(locks.JAX["cuda12"].lock) + "\n")
    assert envs.build_mismatch("jax", ClusterProfile(env_dir=str(tmp_path / "envs"), gpus_per_task=1,
                                                     jax_recipe="cuda12")) is None


@pytest.mark.parametrize("lock", locks.EVERY_LOCK, ids=lambda lock: lock.lock.name)
def test_every_checked_in_lock_matches_its_requirements_and_pins_each_of_them_with_hashes(lock):
    lock.check()
    text = lock.lock.read_text()
    for line in lock.requirement_lines():
        name, version = line.split("[")[0].split("==")[0], line.split("==")[1]
        assert f"\n{name}=={version} \\\n    --hash=sha256:" in text.replace("_", "-"), line


def test_the_lock_command_says_a_stale_lock_and_exits_1(tmp_path, monkeypatch, capsys):
    lock = a_lock(tmp_path)
    monkeypatch.setattr(locks, "EVERY_LOCK", (lock,))
    assert locks.main(["check", str(lock.lock)]) == 0
    lock.requirements.write_text("numpy==9\n")
    assert locks.main(["check", str(lock.lock)]) == 1
    assert "regenerate it with `make locks`" in capsys.readouterr().err


def test_the_packages_hash_reads_names_as_locks_write_them_and_leaves_out_the_installers():
    from bench_contract.measure.device import packages_sha256

    assert packages_sha256([("ml_dtypes", "0.5.4"), ("NumPy", "2.4.6")]) == \
        packages_sha256([("ml-dtypes", "0.5.4"), ("numpy", "2.4.6"), ("pip", "25.0"), ("jaxtorch-bench", "0.1.0")])
    assert packages_sha256([("numpy", "2.4.6")]) != packages_sha256([("numpy", "2.4.5")])


def test_a_lock_names_every_package_it_pins(tmp_path):
    from orchestrator.run.locks import Lock

    lock = tmp_path / "x.lock"
    lock.write_text("# requirements sha256: 0\ncloudpickle==3.1.2 \\\n    --hash=sha256:7f\nml-dtypes==0.5.4 ; python_version >= '3.9' \\\n"
                    "    --hash=sha256:aa\n    # via jax\n")
    assert Lock(tmp_path / "r.txt", lock).pins() == [("cloudpickle", "3.1.2"), ("ml-dtypes", "0.5.4")]


def test_the_lock_check_runs_before_the_orchestrators_packages_are_installed():
    """`make setup` checks the orchestrator's lock in a bare venv: the check may need nothing but the standard
    library (pyarrow, numpy and pandas are what the lock is about to install)."""
    import subprocess
    import sys

    from helpers import REPO_ROOT

    bare = ("import sys, runpy\n"
            "for name in ('pyarrow', 'numpy', 'pandas', 'typer', 'jinja2'): sys.modules[name] = None\n"
            "sys.argv = ['locks', 'check', 'requirements-orchestrator.lock']\n"
            "runpy.run_module('orchestrator.run.locks', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", bare], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def a_terminal(monkeypatch):
    """A pseudo-terminal as this process's sys.stderr; returns the master end, where the terminal's text arrives."""
    import os
    import pty

    master, replica = pty.openpty()
    monkeypatch.setattr("sys.stderr", os.fdopen(replica, "w", buffering=1))
    return master


def terminal_text(master: int) -> str:
    """What has arrived on the terminal so far (nothing, rather than waiting, when nothing has)."""
    import os
    import select

    text = b""
    while select.select([master], [], [], 0.1)[0]:
        text += os.read(master, 4096)
    return text.decode(errors="replace")


def test_on_a_terminal_uv_draws_its_own_progress_there(tmp_path, built, monkeypatch):
    _, profile = built
    # uv draws its bars only when its stderr is a terminal: the fake says which it got, on its stderr.
    bars = "Downloading torch ━━━━━━━━━━ 512.0 MiB/900.0 MiB\n"
    uv = fake_uv(tmp_path, sync_output="")
    uv.write_text(uv.read_text().replace(
        "cat ", f"if [ -t 2 ]; then printf '{bars}' >&2; else echo 'no terminal' >&2; fi; cat "))
    monkeypatch.setattr(envs, "uv_binary", lambda: str(uv))
    master = a_terminal(monkeypatch)
    said = []
    envs.ensure_env("torch", profile, report=said.append)
    assert "Downloading torch" in terminal_text(master)
    assert not [line for line in said if "uv:" in line]  # the terminal shows uv's own lines, not a copy


def test_on_a_terminal_a_failed_uv_is_still_one_error(tmp_path, built, monkeypatch):
    _, profile = built
    monkeypatch.setattr(envs, "uv_binary", lambda: str(fake_uv(tmp_path, "error: no network\n", sync_exit=2)))
    a_terminal(monkeypatch)
    with pytest.raises(OrchestratorError, match=r"pip sync \.\.\. failed \(exit 2\): uv's output above says why"):
        envs.ensure_env("jax", profile, report=lambda line: None)
    assert not (tmp_path / "envs" / "jax" / envs.STAMP).exists()
