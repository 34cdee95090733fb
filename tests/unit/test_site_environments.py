"""Site environments: a profile points a framework at an interpreter the site already has. envs and doctor check
it (nothing is built), the scripts run it by its path after its setup lines, the rows say "site: <python>" and the
report marks them as not locked. The backends are stood in for by fake interpreters here; the real run is in
tests/backends/test_site_environment_demo.py."""

import json
import os
import re
import shlex
import subprocess

import pandas as pd
import pytest
from helpers import fake_tools, run_cli
from test_scripts import shellcheck_problems

from bench_contract.results import ENVIRONMENT_KIND_VARIABLE
from bench_contract.run.runner import base_context
from bench_contract.spec import JobSpec
from orchestrator.errors import OrchestratorError
from orchestrator.plan.profile import ClusterProfile, SiteEnvironment
from orchestrator.results.report_html import provenance_sections
from orchestrator.run import doctor, envs


def fake_python(path, record, probe_output: str = "", exit_code: int = 0):
    """An interpreter that records its arguments and the kind of environment it was told, and prints `probe_output`
    (the import probe's answer: nothing when every module imports; the doctor's JSON for its probe)."""
    fake_tools(path.parent, **{path.name: f"""\
printf "%s\\n" "$@" > {shlex.quote(str(record))}
echo "kind=${{{ENVIRONMENT_KIND_VARIABLE}:-unset}} site_setup=${{SITE_SETUP:-unset}}" >> {shlex.quote(str(record))}
case "$2" in
  *"import json, jax"*) echo '{{"version": "0.10.2", "devices": ["cpu:cpu"], "nvml": []}}' ;;
  *) printf "%s" {shlex.quote(probe_output)} ;;
esac
exit {exit_code}
"""})
    return path


def site_profile(tmp_path, python, setup_lines=("export SITE_SETUP=ready",)):
    text = (f"env_dir = {json.dumps(str(tmp_path / 'envs'))}\n[envs.jax]\npython = {json.dumps(str(python))}\n"
            f"setup_lines = {json.dumps(list(setup_lines))}\n")
    (tmp_path / "site.toml").write_text(text)
    return tmp_path / "site.toml"


def render(tmp_path, profile, *options):
    proc = run_cli("--benchmark", "digits", "--use-case", "1", *options, "--dry-run", "--profile", str(profile),
                   "--results-dir", str(tmp_path / "results"), "--scripts-dir", str(tmp_path / "scripts"))
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "scripts"


def test_the_array_script_runs_the_site_python_after_its_setup_lines_and_says_site(tmp_path):
    record = tmp_path / "record.txt"
    python = fake_python(tmp_path / "conda env" / "bin" / "python", record)
    scripts = render(tmp_path, site_profile(tmp_path, python), "--frameworks", "jax")
    script = scripts / "jax_digits_1.sh"
    assert "source " not in script.read_text()  # no activate script: the interpreter is run by its path
    run = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True,
                         env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"})
    assert run.returncode == 0, run.stderr
    args = record.read_text().splitlines()
    assert args[:2] == ["-m", "jax_backend.run"]
    assert args[-1] == f"kind=site: {python} site_setup=ready"


def test_a_framework_without_a_site_environment_still_sources_its_built_environment_and_says_locked(tmp_path):
    scripts = render(tmp_path, site_profile(tmp_path, "/opt/site/bin/python"), "--frameworks", "torch")
    text = (scripts / "torch_digits_1.sh").read_text()
    assert f"source {tmp_path / 'envs' / 'torch' / 'bin' / 'activate'}" in text
    assert f"export {ENVIRONMENT_KIND_VARIABLE}=locked" in text and "torch_backend.run" in text


def test_the_paired_script_runs_the_site_python_for_its_framework_only(tmp_path):
    scripts = render(tmp_path, site_profile(tmp_path, "/opt/site env/bin/python"), "--paired")
    text = (scripts / "paired_digits_1.sh").read_text()
    assert "exec '/opt/site env/bin/python' -m jax_backend.run" in text
    assert f"export {ENVIRONMENT_KIND_VARIABLE}='site: /opt/site env/bin/python'" in text
    assert f"source {tmp_path / 'envs' / 'torch' / 'bin' / 'activate'}" in text
    assert "export SITE_SETUP=ready" in text


@pytest.mark.parametrize("options", [["--frameworks", "jax"], ["--paired"]], ids=["array", "paired"])
def test_site_environment_scripts_pass_shellcheck(tmp_path, options):
    scripts = render(tmp_path, site_profile(tmp_path, "/opt/site env/bin/python"), *options)
    assert shellcheck_problems(*sorted(scripts.glob("*.sh"))) == ""


def test_envs_checks_a_site_environment_and_builds_nothing(tmp_path):
    record = tmp_path / "record.txt"
    python = fake_python(tmp_path / "site" / "bin" / "python", record)
    site = SiteEnvironment(str(python), ("export SITE_SETUP=ready",))
    profile = ClusterProfile(env_dir=str(tmp_path / "envs"), envs={"jax": site})
    said = []
    assert envs.ensure_env("jax", profile, report=said.append) == tmp_path / "site"
    imports = "jax, flax, optax, numpy, pyarrow, pynvml, sklearn, PIL"
    assert said == [f"jax: site environment {python} imports {imports} (not built, not locked)"]
    assert not (tmp_path / "envs").exists()
    assert "site_setup=ready" in record.read_text()  # the probe ran after the site's setup lines


def test_a_site_environment_without_its_framework_is_one_sentence(tmp_path):
    python = fake_python(tmp_path / "bin" / "python", tmp_path / "r.txt",
                         probe_output="torch (ModuleNotFoundError: No module named 'torch')")
    profile = ClusterProfile(envs={"torch": SiteEnvironment(str(python))})
    with pytest.raises(OrchestratorError) as caught:
        envs.ensure_env("torch", profile)
    assert str(caught.value) == (f"torch: the site environment's python {python} cannot import torch "
                                 "(ModuleNotFoundError: No module named 'torch'): install it there or point "
                                 "[envs.torch] python at another interpreter")


def test_a_missing_site_interpreter_is_one_sentence(tmp_path):
    profile = ClusterProfile(envs={"jax": SiteEnvironment(str(tmp_path / "nowhere" / "python"))})
    with pytest.raises(OrchestratorError, match=r"the jax environment is missing \(.*nowhere/python does not exist\); "
                                                r"correct \[envs.jax\] python in the profile$"):
        envs.ensure_env("jax", profile)


def test_a_site_interpreter_is_looked_for_after_its_setup_lines_by_every_check(tmp_path):
    """A module load may be what puts the interpreter at its path: submission, validate and doctor (envs' checks,
    one definition) run the setup lines before they call it missing, and then say they did."""
    real = fake_python(tmp_path / "real" / "bin" / "python", tmp_path / "r.txt")
    python = tmp_path / "module" / "bin" / "python"
    appears = f"mkdir -p {python.parent} && ln -sf {real} {python}"  # what the module's load does here
    for setup, found in ((appears, True), ("export SITE_SETUP=ready", False)):
        python.unlink(missing_ok=True)
        profile = ClusterProfile(envs={"jax": SiteEnvironment(str(python), setup_lines=(setup,))})
        if found:
            envs.check_runnable("jax", profile)
            python.unlink()
            assert doctor.check_environment("jax", profile)[0].ok
        else:
            message = f"the jax environment is missing ({python} does not exist, even after its setup lines)"
            with pytest.raises(OrchestratorError, match=re.escape(message)):
                envs.check_runnable("jax", profile)
            assert doctor.check_environment("jax", profile)[0].detail.startswith(message)


def test_doctor_checks_the_site_interpreter_and_says_it_is_not_locked(tmp_path):
    python = fake_python(tmp_path / "site" / "bin" / "python", tmp_path / "r.txt")
    profile = ClusterProfile(envs={"jax": SiteEnvironment(str(python))})
    checks = doctor.check_environment("jax", profile)
    assert checks[0].ok and checks[0].detail == f"jax 0.10.2 in site environment {python}, not locked"
    broken = fake_python(tmp_path / "broken" / "bin" / "python", tmp_path / "r.txt",
                         probe_output="flax (ModuleNotFoundError: No module named 'flax')")
    checks = doctor.check_environment("jax", ClusterProfile(envs={"jax": SiteEnvironment(str(broken))}))
    assert checks[0].ok is False and "cannot import flax (ModuleNotFoundError" in checks[0].detail


def test_the_row_says_the_environment_kind_the_script_exported(tmp_path, monkeypatch):
    spec = JobSpec(campaign="c", cell_id="jax-1", pair_key="x", framework="jax", benchmark="digits", use_case=1,
                   model="mlp", batch_size=8, precision="fp32", results_path=str(tmp_path / "cell.parquet"),
                   init_weights_path=str(tmp_path / "init.npz"))
    monkeypatch.setenv(ENVIRONMENT_KIND_VARIABLE, "site: /opt/conda/bin/python")
    assert base_context(spec)["environment_kind"] == "site: /opt/conda/bin/python"
    monkeypatch.delenv(ENVIRONMENT_KIND_VARIABLE)
    assert base_context(spec)["environment_kind"].startswith("not available: ")


def test_the_reports_provenance_marks_site_rows_as_not_locked():
    row = {"device_model": "cpu", "slurm_array_job_id": "", "hostname": "h", "campaign": "c",
           **{column: "x" for column in ("framework_version", "library_versions", "packages_sha256", "python_version",
                                         "precision_policy", "data_source", "xla_flags", "environment_variables",
                                         "device_details", "git_commit")}}
    frame = pd.DataFrame([{**row, "framework": "jax", "environment_kind": "site: /opt/conda/bin/python"},
                          {**row, "framework": "torch", "environment_kind": "locked"}])
    fields = {section["title"]: dict(section["fields"]) for section in provenance_sections(frame)}
    assert fields["JAX on cpu"]["environment"] == "site environment, not locked: /opt/conda/bin/python"
    assert fields["PyTorch on cpu"]["environment"] == "built from the lock file"


def test_submission_needs_the_site_interpreter_not_an_activate_script(tmp_path):
    """A conda env or /usr/bin/python3 has no bin/activate beside it; the site's interpreter is what must exist."""
    from types import SimpleNamespace

    from orchestrator.errors import UsageError
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.executors import executor
    from orchestrator.run.launch import check_can_run

    python = fake_python(tmp_path / "conda" / "bin" / "python", tmp_path / "record")
    req = SimpleNamespace(run_by=executor("local"), profile=load_profile(site_profile(tmp_path, python)))
    check_can_run(req, ["jax"])  # no activate script anywhere: accepted
    python.unlink()
    with pytest.raises(UsageError, match=r"the jax environment is missing \(.*conda/bin/python does not exist, even "
                                         r"after its setup lines\); "
                                         r"correct \[envs.jax\] python in the profile"):
        check_can_run(req, ["jax"])


def test_validate_runs_a_site_environment_as_the_campaigns_do(tmp_path):
    """validate's job script and its local run enter a site environment like the array scripts: its setup lines,
    then its interpreter by path; the other framework still sources the activate script of its built one."""
    from orchestrator.plan.profile import load_profile
    from orchestrator.run.validate import ValidateRequest, render_script, run_backend

    record = tmp_path / "record"
    python = fake_python(tmp_path / "conda" / "bin" / "python", record)
    profile = load_profile(site_profile(tmp_path, python))
    req = ValidateRequest(model="mlp", batch_size=2, precision="fp32", variant="full", seed=0, device="auto",
                          profile=profile)
    script = tmp_path / "validate_mlp.sh"
    script.write_text(render_script(req, tmp_path / "spec.json", tmp_path, "python main.py validate --model mlp"))
    text = script.read_text()
    assert f"  export SITE_SETUP=ready\n  set -u\n  {python} -m jax_backend.parity" in text
    assert f"source {tmp_path / 'envs' / 'torch' / 'bin' / 'activate'}\n  python -m torch_backend.parity" in text
    assert shellcheck_problems(script) == ""
    run_backend("jax", tmp_path / "spec.json", profile)
    assert record.read_text().splitlines() == ["-m", "jax_backend.parity", str(tmp_path / "spec.json"),
                                               "kind=unset site_setup=ready"]
