"""Containers: `[envs.<framework>] container = "<image>"` with runtime apptainer or pyxis. The array,
paired and validate scripts run the backend inside the image with the repository, the campaign and the data folders
mounted at their own paths; the rows say "container: <image>". No container runtime can be installed here, so a
fake `apptainer` (at the subprocess boundary) checks its arguments and runs the command; the real local cluster
runs a campaign through it in tests/integration/test_containers_on_slurm.py."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from fake_container import fake_apptainer
from helpers import REPO_ROOT, dry_run, fake_tools, run_cli

from orchestrator.errors import UsageError
from orchestrator.plan.profile import ClusterProfile, SiteEnvironment

IMAGE = "docker://nvcr.io/nvidia/jax:25.01-py3"
PYXIS_IMAGE = "nvcr.io#nvidia/jax:25.01-py3"  # what pyxis is given for IMAGE
IMAGE_BYTES = b"an image pulled once"  # the .sif's content, whose sha256 the rows record
DIGEST = "sha256:" + "5e" * 32  # what the fake skopeo says PYXIS_IMAGE's tag names
NO_REGISTRY = "echo 'pinging container registry nvcr.io: no such host' >&2\nexit 1\n"  # skopeo without a network


def test_a_container_table_needs_no_python_and_refuses_what_does_not_fit():
    found = ClusterProfile.from_dict({"envs": {"jax": {"container": IMAGE}}}).envs["jax"]
    assert (found.python, found.container, found.runtime, found.kind) == ("python3", IMAGE, "apptainer",
                                                                          f"container: {IMAGE}")
    for table, message in [({"container": IMAGE, "runtime": "docker"}, "unknown envs.jax.runtime 'docker'; choose "
                                                                       "from: apptainer, pyxis"),
                           ({"python": "/usr/bin/python3", "runtime": "pyxis"}, "envs.jax.runtime goes with container"),
                           ({"container": "two words"}, "envs.jax.container 'two words' is not an image reference"),
                           ({"container": 3}, "envs.jax.container must be a string, got 3")]:
        with pytest.raises(UsageError, match=re.escape(message)):
            ClusterProfile.from_dict({"envs": {"jax": table}})


def sif(tmp_path: Path) -> Path:
    """The image apptainer runs: a .sif pulled once on the login node (here an empty file: the fake runtime runs it)."""
    return tmp_path / "jax.sif"


def profile_with(tmp_path: Path, runtime: str, python: str = "python3") -> Path:
    image = IMAGE
    if runtime == "apptainer":
        image = sif(tmp_path)
        image.write_bytes(IMAGE_BYTES)
    profile = tmp_path / "p.toml"
    profile.write_text(f'[envs.jax]\ncontainer = "{image}"\nruntime = "{runtime}"\npython = "{python}"\n')
    return profile


def contained_dry_run(tmp_path: Path, profile: Path, *args: str, use_case: str = "1", env: dict | None = None):
    """A dry run of digits with the profile's containers, tmp_path its data folder. By default with a `skopeo` that
    finds no registry (the plan asks it for a tag's digest), so that no test reaches the network."""
    env = env or fake_tools(tmp_path / "bin", skopeo=NO_REGISTRY)
    return dry_run(tmp_path, "--benchmark", "digits", "--use-case", use_case, "--profile", str(profile),
                   "--data-dir", str(tmp_path), *args, env=env)


def test_apptainer_runs_the_backend_in_the_image_with_the_repository_campaign_and_data_mounted(tmp_path):
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "apptainer"))
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "s" / "jax_digits_1.sh").read_text()
    campaign = next((tmp_path / "r").iterdir()).resolve()
    mounts = f"{REPO_ROOT},{campaign},{tmp_path.resolve()}"
    assert (f"exec apptainer exec --nv --cleanenv --bind {mounts} {sif(tmp_path)} python3 -m jax_backend.run" in script)
    # The rows name the image file and the sha256 of its bytes: exactly what ran.
    digest = hashlib.sha256(IMAGE_BYTES).hexdigest()
    assert f"export BENCH_ENVIRONMENT_KIND='container: {sif(tmp_path)} (sha256:{digest})'" in script
    assert "source " not in script.split("set -u", 1)[1]  # no environment of this machine is entered
    torch = (tmp_path / "s" / "torch_digits_1.sh").read_text()
    assert "apptainer exec" not in torch and "source " in torch  # the framework without a container is as before
    assert subprocess.run(["shellcheck", "-S", "warning", str(tmp_path / "s" / "jax_digits_1.sh")]).returncode == 0


@pytest.mark.parametrize("use_case, extra, prefix", [
    ("1", (), "exec srun --ntasks=1 {image} --container-mounts={mounts} python3"),
    ("2", ("--nodes", "2"), "exec srun --kill-on-bad-exit=1 {image} --container-mounts={mounts} python3"),
])
def test_pyxis_puts_the_image_on_srun(tmp_path, use_case, extra, prefix):
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "pyxis"), *extra, use_case=use_case)
    assert proc.returncode == 0, proc.stderr
    script = next((tmp_path / "s").glob("jax_digits_*.sh")).read_text()
    campaign = next((tmp_path / "r").iterdir()).resolve()
    mounts = ",".join(f"{p}:{p}" for p in (REPO_ROOT, campaign, tmp_path.resolve()))
    # pyxis's form of the docker:// reference, quoted for its '#'
    assert prefix.format(image=f"'--container-image={PYXIS_IMAGE}'", mounts=mounts) in script


def skopeo(tmp_path: Path, monkeypatch, body: str) -> Path:
    """A fake `skopeo` (fake_tools) that logs its arguments, one call a line, then runs `body`, first on this
    process's PATH, for a test that plans in process. Returns the log."""
    log = tmp_path / "skopeo.log"
    env = fake_tools(tmp_path / "bin", {"PATH": "/usr/bin:/bin"}, skopeo=f'echo "$*" >> "{log}"\n{body}')
    monkeypatch.setenv("PATH", env["PATH"])
    return log


def pyxis_entry(reference: str = PYXIS_IMAGE) -> dict:
    """How a script enters JAX's environment, a pyxis image `reference`, as a plan renders it (in process)."""
    from orchestrator.plan.render import environment_entry

    profile = ClusterProfile.from_dict({"envs": {"jax": {"container": reference, "runtime": "pyxis"}}})
    return environment_entry("jax", profile, [REPO_ROOT])


def unpinned(reference: str = PYXIS_IMAGE) -> str | None:
    from orchestrator.plan.render import unpinned_image

    return unpinned_image("jax", SiteEnvironment(container=reference, runtime="pyxis"))


@pytest.mark.parametrize("reference", [PYXIS_IMAGE, IMAGE])
def test_a_tag_is_run_by_the_digest_its_registry_gives_and_the_rows_name_both(tmp_path, monkeypatch, reference):
    """Asked once per plan: every task runs the image the tag named then, whatever the registry does with it."""
    log = skopeo(tmp_path, monkeypatch, f"echo {DIGEST}\n")
    entry = pyxis_entry(reference)
    assert f"--container-image=nvcr.io#nvidia/jax@{DIGEST}" in entry["launcher"]
    assert entry["kind"] == f"container: {reference}@{DIGEST}"  # environment_kind: the tag and what it named
    assert reference in entry["pinned"][0] and entry["pinned"][1].strip() == DIGEST  # the script's header
    assert unpinned(reference) is None  # nothing to warn of
    assert log.read_text() == "inspect --format {{.Digest}} docker://nvcr.io/nvidia/jax:25.01-py3\n"


@pytest.mark.parametrize("args, name", [((), "jax_digits_1.sh"), (("--paired",), "paired_digits_1.sh")])
def test_the_pinned_script_says_the_tag_and_its_digest_and_exports_both_to_the_rows(tmp_path, args, name):
    log = tmp_path / "skopeo.log"
    env = fake_tools(tmp_path / "bin", skopeo=f'echo "$*" >> "{log}"\necho {DIGEST}\n')
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "pyxis"), *args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "named by its tag" not in proc.stdout
    script = (tmp_path / "s" / name).read_text()
    header = script.split("#SBATCH", 1)[0]
    assert f"# JAX's image {IMAGE}: its tag named this digest when this script was written" in header
    assert f"#   {DIGEST}\n" in header
    assert f"'--container-image=nvcr.io#nvidia/jax@{DIGEST}'" in script
    assert f"export BENCH_ENVIRONMENT_KIND='container: {IMAGE}@{DIGEST}'" in script
    assert len(log.read_text().splitlines()) == 1  # the warning's check and the script asked the registry once
    assert subprocess.run(["shellcheck", "-S", "warning", str(tmp_path / "s" / name)]).returncode == 0


def test_validate_runs_the_pinned_image_too(tmp_path, monkeypatch):
    from orchestrator.run.validate import ValidateRequest, render_script

    skopeo(tmp_path, monkeypatch, f"echo {DIGEST}\n")
    profile = ClusterProfile.from_dict({"envs": {"jax": {"container": PYXIS_IMAGE, "runtime": "pyxis"}}})
    request = ValidateRequest(model="mlp", batch_size=2, precision="fp32", variant="full", seed=0, device="auto",
                              profile=profile)
    text = render_script(request, tmp_path / "spec.json", tmp_path, "python main.py validate --model mlp")
    assert f"# JAX's image {PYXIS_IMAGE}: its tag named this digest" in text and f"#   {DIGEST}\n" in text
    assert f"'--container-image=nvcr.io#nvidia/jax@{DIGEST}'" in text


@pytest.mark.parametrize("body, why", [
    (NO_REGISTRY, "skopeo failed: pinging container registry nvcr.io: no such host"),
    ("exit 3\n", "skopeo failed: exit 3"),
    ("echo 'not a digest'\n", "skopeo printed 'not a digest', not a sha256 digest"),
    ("exec sleep 60\n", "skopeo had no answer from its registry within 0.2 s"),
])
def test_a_tag_whose_digest_is_not_found_runs_as_it_is_and_is_warned_of_with_why(tmp_path, monkeypatch, body, why):
    """No network, a refusal, no answer: the plan goes on with the tag, and warns naming why; a skopeo that hangs is
    given up after the timeout (here 0.2 s), so that a dry run never hangs."""
    monkeypatch.setattr("orchestrator.plan.render.DIGEST_TIMEOUT_S", 0.2)
    skopeo(tmp_path, monkeypatch, body)
    assert "--container-image=nvcr.io#nvidia/jax:25.01-py3" in pyxis_entry()["launcher"]
    assert pyxis_entry()["kind"] == f"container: {PYXIS_IMAGE}" and pyxis_entry()["pinned"] == []
    assert unpinned() == (
        f"jax's image {PYXIS_IMAGE} is named by its tag, and its digest could not be found ({why}): its registry may "
        "move the tag between this campaign's jobs, and the rows can name only the tag; pin it as "
        "IMAGE@sha256:DIGEST (`skopeo inspect --format '{{.Digest}}' docker://nvcr.io/nvidia/jax:25.01-py3` prints "
        "the digest)")


def test_without_skopeo_the_plan_warns_once_and_runs_the_tag(tmp_path):
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    if Path("/usr/bin/skopeo").exists() or Path("/bin/skopeo").exists():
        pytest.skip("a real skopeo is installed here")
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "pyxis"), "--paired", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("is named by its tag") == 1, proc.stdout
    assert (f"warning: jax's image {IMAGE} is named by its tag, and its digest could not be found (no skopeo on PATH "
            "to ask its registry)") in proc.stdout
    assert f"'--container-image={PYXIS_IMAGE}'" in (tmp_path / "s" / "paired_digits_1.sh").read_text()


@pytest.mark.parametrize("reference", [f"{PYXIS_IMAGE.split(':')[0]}@sha256:{'0' * 64}", "/shared/jax.sqsh"])
def test_an_image_already_pinned_or_a_file_is_not_asked_for(tmp_path, monkeypatch, reference):
    log = skopeo(tmp_path, monkeypatch, f"echo {DIGEST}\n")
    entry = pyxis_entry(reference)
    assert f"--container-image={reference}" in entry["launcher"] and entry["pinned"] == []
    assert unpinned(reference) is None and not log.exists()


@pytest.mark.parametrize("reference, pinned", [
    ("nvcr.io#nvidia/jax:25.04-py3", "nvcr.io#nvidia/jax@sha256:d"),
    ("registry.site:5000#team/jax:1", "registry.site:5000#team/jax@sha256:d"),  # a port is not a tag
    ("localhost#jax", "localhost#jax@sha256:d"),  # no tag: latest's digest
    ("docker://ubuntu:24.04", "docker://ubuntu@sha256:d"),
    ("docker://registry.site:5000/team/jax:1", "docker://registry.site:5000/team/jax@sha256:d"),
])
def test_a_pinned_reference_keeps_the_name_and_puts_the_digest_for_the_tag(reference, pinned):
    from orchestrator.plan.render import pinned_reference

    assert pinned_reference(reference, "sha256:d") == pinned


def test_the_paired_and_validate_scripts_run_in_the_container_too(tmp_path):
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.validate import ValidateRequest, render_script

    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "apptainer"), "--paired")
    assert proc.returncode == 0, proc.stderr
    paired = (tmp_path / "s" / "paired_digits_1.sh").read_text()
    assert paired.count(f"{sif(tmp_path)} python3 -m jax_backend.run") == 1 and "torch_backend.run" in paired
    assert f"# A container image, {sif(tmp_path)}, run by apptainer" in paired  # not "the site's interpreter"
    request = ValidateRequest(model="mlp", batch_size=2, precision="fp32", variant="full", seed=0, device="auto",
                              profile=load_profile(profile_with(tmp_path, "apptainer")))
    text = render_script(request, tmp_path / "spec.json", tmp_path, "python main.py validate --model mlp")
    assert (f"apptainer exec --nv --cleanenv --bind {REPO_ROOT},{tmp_path.resolve()} {sif(tmp_path)} python3 -m "
            "jax_backend.parity") in text


def test_the_paired_driver_runs_outside_the_containers_it_starts(tmp_path):
    """The driver starts each framework's container from the node, so it never runs inside one: in PyTorch's
    environment where only JAX's is a container, and with the planning interpreter where both are."""
    import shlex
    import sys

    driver = "-m bench_contract.run.driver"
    assert contained_dry_run(tmp_path, profile_with(tmp_path, "apptainer"), "--paired").returncode == 0
    tail = (tmp_path / "s" / "paired_digits_1.sh").read_text().split("exec 3< <(env -0)\n", 1)[1]
    assert f"source {REPO_ROOT / '.envs' / 'torch' / 'bin' / 'activate'}" in tail
    assert f"exec python {driver}" in tail and "apptainer" not in tail
    both = tmp_path / "both"
    both.mkdir()
    profile = both / "p.toml"
    sif(both).touch()
    profile.write_text(f'[envs.jax]\ncontainer = "{sif(both)}"\n[envs.torch]\ncontainer = "{sif(both)}"\n')
    assert contained_dry_run(both, profile, "--paired").returncode == 0
    script = both / "s" / "paired_digits_1.sh"
    assert f"exec {shlex.quote(sys.executable)} {driver}" in script.read_text()
    assert subprocess.run(["shellcheck", "-S", "warning", str(script)]).returncode == 0


def test_without_the_runtime_on_path_submission_is_refused_in_one_sentence(tmp_path):
    profile = profile_with(tmp_path, "apptainer")
    env = fake_tools(tmp_path / "bin", {**os.environ, "PATH": "/usr/bin:/bin"}, sbatch="exit 1\n")
    if Path("/usr/bin/apptainer").exists() or Path("/bin/apptainer").exists():
        pytest.skip("a real apptainer is installed here")
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile), "--results-dir",
                   str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: jax: the container runtime apptainer needs `apptainer`, which is not on "
                                   "PATH (profile table 'envs.jax')")
    assert not (tmp_path / "r").exists()


def test_envs_checks_the_image_through_the_runtime_and_builds_nothing(tmp_path):
    log = tmp_path / "apptainer.log"
    fake_apptainer(tmp_path / "bin", log)
    jax_python = REPO_ROOT / ".envs" / "jax" / "bin" / "python"
    profile = profile_with(tmp_path, "apptainer", python=str(jax_python))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    proc = run_cli("envs", "--framework", "jax", "--profile", str(profile), env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"jax: container {sif(tmp_path)} (apptainer) imports" in proc.stdout
    assert log.read_text().startswith(f"{sif(tmp_path)} {REPO_ROOT} {jax_python} -c")


def test_the_kind_is_what_the_rows_record():
    assert SiteEnvironment("python3", (), IMAGE, "pyxis").kind == f"container: {IMAGE}"
    assert SiteEnvironment("/usr/bin/python3").kind == "site: /usr/bin/python3"


@pytest.mark.parametrize("reference, given", [
    ("docker://nvcr.io/nvidia/jax:25.04-py3", "nvcr.io#nvidia/jax:25.04-py3"),
    ("docker://registry.site:5000/team/jax:1", "registry.site:5000#team/jax:1"),
    ("docker://localhost/jax", "localhost#jax"),
    ("docker://ubuntu:24.04", "ubuntu:24.04"),  # Docker Hub's: no registry to name
    ("docker://library/ubuntu:24.04", "library/ubuntu:24.04"),
    ("nvcr.io#nvidia/jax:25.04-py3", "nvcr.io#nvidia/jax:25.04-py3"),  # pyxis's own form, as it is
    ("/shared/jax.sqsh", "/shared/jax.sqsh"),
])
def test_pyxis_is_given_its_own_form_of_a_reference(reference, given):
    from orchestrator.plan.render import pyxis_image

    assert pyxis_image(reference) == given


@pytest.mark.parametrize("runtime, reference, message", [
    ("apptainer", IMAGE, f"jax: apptainer would pull {IMAGE} in every task, on compute nodes that may have no "
                         f"internet; pull it once on the login node (`apptainer pull /shared/path/image.sif {IMAGE}`) "
                         "and give that .sif as container (profile table 'envs.jax')"),
    ("apptainer", "library://sylabs/jax", "apptainer would pull library://sylabs/jax in every task"),
    ("apptainer", "nvcr.io#nvidia/jax:25.01-py3", "nvcr.io#nvidia/jax:25.01-py3 is pyxis's form of an image; for "
                                                  "apptainer pull it once on the login node (`apptainer pull "
                                                  f"/shared/path/image.sif {IMAGE}`)"),
    ("pyxis", "/shared/jax.sif", "/shared/jax.sif is an Apptainer image, which pyxis cannot run"),
    ("pyxis", "oras://ghcr.io/x/jax:1", "pyxis pulls registry images as REGISTRY#IMAGE:TAG"),
])
def test_an_image_the_runtime_cannot_use_as_the_jobs_would_is_refused_with_the_fix(tmp_path, runtime, reference,
                                                                                  message):
    """Apptainer pulls a registry reference in every task (nodes often have no internet); pyxis reads neither a
    .sif nor another scheme. Refused at plan time, a dry run included, nothing written."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'[envs.jax]\ncontainer = "{reference}"\nruntime = "{runtime}"\n')
    proc = contained_dry_run(tmp_path, profile)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_validate_runs_each_framework_through_its_container(tmp_path):
    """validate checked a container's interpreter as a path on this machine ("python3 does not exist") and refused
    every container profile; it checks the container as submission does, and runs each side through the runtime."""
    log = tmp_path / "apptainer.log"
    fake_apptainer(tmp_path / "bin", log)
    sif(tmp_path).touch()
    profile = tmp_path / "p.toml"
    profile.write_text("".join(f'[envs.{fw}]\ncontainer = "{sif(tmp_path)}"\n' for fw in ("torch", "jax")))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    proc = run_cli("validate", "--model", "mlp", "--variant", "tiny", "--device", "cpu", "--profile", str(profile),
                   env=env)
    assert "environment is missing" not in proc.stderr, proc.stderr
    # The fake runs the image's python3 on this machine, which has no framework: the first side's run fails there,
    # after the runtime was called with the image and the parity module.
    assert f"{sif(tmp_path)} " in log.read_text() and "python3 -m torch_backend.parity" in log.read_text()


def test_apptainer_runs_the_image_with_a_clean_environment_and_passes_what_the_run_needs(tmp_path):
    """--cleanenv: the login node's modules (LD_LIBRARY_PATH, MODULEPATH) stay outside the image; what the run reads
    goes in by name (APPTAINERENV_<NAME>, as the fake runtime takes it, tests/fake_container.py), and a variable
    that is not set is not passed as an empty one (CUDA_VISIBLE_DEVICES= would hide every GPU)."""
    seen = tmp_path / "seen.env"
    python = tmp_path / "image-python"  # the image's interpreter: it writes the environment it was started with
    python.write_text(f'#!/bin/bash\nenv > "{seen}"\n')
    python.chmod(0o755)
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "apptainer", python=str(python)), "--paired")
    assert proc.returncode == 0, proc.stderr
    proc = contained_dry_run(tmp_path, profile_with(tmp_path, "apptainer", python=str(python)), "--new-campaign")
    assert proc.returncode == 0, proc.stderr
    fake_apptainer(tmp_path / "bin", tmp_path / "apptainer.log")
    script = tmp_path / "s" / "jax_digits_1.sh"
    assert "exec apptainer exec --nv --cleanenv --bind " in script.read_text()
    for name in ("jax_digits_1.sh", "paired_digits_1.sh"):
        assert subprocess.run(["shellcheck", "-S", "warning", str(tmp_path / "s" / name)]).returncode == 0
    job = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_ID": "77", "SLURM_CPUS_PER_TASK": "3", "CUDA_VISIBLE_DEVICES": "2",
           "NCCL_SOCKET_IFNAME": "ib0", "NVIDIA_TF32_OVERRIDE": "1",
           "LD_LIBRARY_PATH": "/login/modules/lib", "MODULEPATH": "/login/modules"}
    run = subprocess.run(["bash", str(script)], env=job, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    inside = dict(line.split("=", 1) for line in seen.read_text().splitlines())
    assert {name: inside.get(name) for name in ("SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES",
                                                "OMP_NUM_THREADS", "PYTHONPATH", "XLA_PYTHON_CLIENT_PREALLOCATE",
                                                "CUDA_DEVICE_ORDER", "NCCL_SOCKET_IFNAME", "NVIDIA_TF32_OVERRIDE")} == {
        "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_ID": "77", "CUDA_VISIBLE_DEVICES": "2", "OMP_NUM_THREADS": "3",
        "PYTHONPATH": str(REPO_ROOT), "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NCCL_SOCKET_IFNAME": "ib0", "NVIDIA_TF32_OVERRIDE": "1"}
    assert inside["BENCH_ENVIRONMENT_KIND"].startswith(f"container: {sif(tmp_path)}")
    assert not {"LD_LIBRARY_PATH", "MODULEPATH", "MASTER_ADDR", "XLA_FLAGS"} & set(inside)
