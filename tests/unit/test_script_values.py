"""Every profile value that reaches a script is checked or quoted (setup_lines alone is raw shell),
and a % of the results folder stays a % in Slurm's --output."""

from __future__ import annotations

import pytest
from helpers import run_cli
from helpers import dry_run, profile_file, settings
from test_request_bounds import DIGITS, refused_before_writing

from orchestrator.errors import UsageError
from orchestrator.plan import matrix
from orchestrator.plan.profile import ClusterProfile, load_profile
from orchestrator.plan.render import render_collect, render_scripts, sbatch_directives


@pytest.mark.parametrize("name", ["x\necho owned", "x\recho owned", "a\x1bb", "", "n" * 101])
def test_a_profile_name_that_is_not_one_printable_line_is_refused_at_load(tmp_path, name):
    escaped = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") \
        .replace("\x1b", "\\u001b")
    with pytest.raises(UsageError, match="site.toml: name '.* is not a profile name, which is one line"):
        load_profile(profile_file(tmp_path, f'name = "{escaped}"\n'))


def test_a_profile_name_with_a_line_break_stops_the_campaign_before_anything_is_written(tmp_path):
    path = profile_file(tmp_path, 'name = "site\\necho owned"\nsetup_lines = ["true"]\n')
    refused_before_writing(tmp_path, dry_run(tmp_path, *DIGITS, "--profile", str(path)), "name 'site", "echo owned")


def test_an_ordinary_profile_name_still_loads_and_lands_in_its_comment(tmp_path):
    profile = load_profile(profile_file(tmp_path, 'name = "Site A100 (Zürich), v2"\nsetup_lines = ["true"]\n'))
    cells = matrix.expand("digits", 1, ["jax"], [], [32], [], settings())
    text = render_scripts(cells, profile, campaign="c", campaign_dir=tmp_path / "c", command="x", git_commit="g",
                          created_at="t")[0].text
    assert '# Site setup from cluster profile "Site A100 (Zürich), v2"' in text


@pytest.mark.parametrize("paired", [False, True])
def test_the_profile_name_stays_inside_its_comment_line_in_every_template(tmp_path, paired):
    # Defence in depth: even a profile that slipped past the check (here forced) cannot add a line to the script.
    profile = ClusterProfile(setup_lines=("true",))
    object.__setattr__(profile, "name", "x\necho owned\r\x0bz")
    cells = matrix.expand("digits", 1, [], [], [32], [], settings(paired=paired))
    scripts = render_scripts(cells, profile, campaign="c", campaign_dir=tmp_path / "c", command="x", git_commit="g",
                             created_at="t")
    for script in scripts:
        assert "\necho owned" not in script.text
        assert '# Site setup from cluster profile "x\\necho owned\\r\\x0bz"' in script.text
    from orchestrator.plan.render import _environment

    validate = _environment().get_template("validate.sh.j2").render(
        script_name="v.sh", model="mlp", variant="full", batch_size=8, precision="fp32", work_dir=tmp_path,
        command="x", git_commit="g", created_at="t", directives=[], setup_lines=["true"], profile_name=profile.name,
        project_root=tmp_path, cpus_per_task=1, environments=[], spec_path=tmp_path / "spec.json")
    assert "\necho owned" not in validate


@pytest.mark.parametrize("text, key", [
    ('partition = "gpu\\n"', "partition"),
    ('account = "proj\\n"', "account"),
    ('gpu_type = "a100\\n"', "gpu_type"),
    ('time_limit = "00:30:00\\n"', "time_limit"),
    ('mem = "16G\\n"', "mem"),
    ('extra_sbatch = ["--qos=normal\\n"]', "extra_sbatch"),
    ('xla_flags = {mlp = "--xla_a=1\\n"}', "xla_flags"),
    ('[systems.a100]\nconstraint = "a100\\n"', "systems.a100"),
])
def test_a_value_ending_in_a_line_break_is_refused_by_its_key(tmp_path, text, key):
    # `$` in a regular expression also matches before a final line break: such values passed the profile's checks.
    with pytest.raises(UsageError, match=key):
        load_profile(profile_file(tmp_path, text + "\n"))


def test_a_percent_in_the_results_folder_stays_a_percent_in_slurms_output_path(tmp_path):
    proc = dry_run(tmp_path / "x", *DIGITS, "--results-dir", str(tmp_path / "100%A done"))
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "x" / "s" / "jax_digits_1.sh").read_text()
    output = next(line for line in script.splitlines() if line.startswith("#SBATCH --output="))
    campaign = next((tmp_path / "100%A done").iterdir()).name
    # Slurm reads %% as one literal % (sbatch's filename patterns); its own %A and %a stay for the file name.
    assert output == f'#SBATCH --output="{tmp_path}/100%%A done/{campaign}/logs/jax_digits_1_%A_%a.out"'


def test_the_collect_job_and_every_array_escape_a_percent_of_their_log_folder(tmp_path):
    folder = tmp_path / "50%j"
    directives = sbatch_directives(ClusterProfile(), "jax_digits_1", 4, folder / "logs")
    assert f"--output={tmp_path}/50%%j/logs/jax_digits_1_%A_%a.out" in directives
    text = render_collect(ClusterProfile(), campaign="c", campaign_dir=folder, results_dir=tmp_path, python="python",
                          command="x", git_commit="g", created_at="t")
    assert f"#SBATCH --output={tmp_path}/50%%j/logs/collect_%j.out" in text


def test_submitit_refuses_a_percent_in_the_results_folder_it_cannot_escape(tmp_path):
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--synthetic", "--dry-run", "--executor", "submitit",
                   "--results-dir", str(tmp_path / "r%j"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2, proc.stderr
    assert "holds a %" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r%j").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("folder, written", [
    ("o'brien", '"{base}/o\'brien/{campaign}/logs/jax_digits_1_%A_%a.out"'),
    ("r#1", '"{base}/r#1/{campaign}/logs/jax_digits_1_%A_%a.out"'),
    ('say "hi" there', '"{base}/say \\"hi\\" there/{campaign}/logs/jax_digits_1_%A_%a.out"'),
    ("plain-1.2", "{base}/plain-1.2/{campaign}/logs/jax_digits_1_%A_%a.out"),
])
def test_every_sbatch_value_is_quoted_as_slurms_parser_reads_it(tmp_path, folder, written):
    """Values were once quoted only when they held a space. Slurm's #SBATCH parser reads ' and " as quotes
    (an unmatched one is sbatch's fatal error) and an unquoted # as a comment (`--output=.../r#1/...` was cut to
    `.../r`, one log for every task, outside the campaign). tests/integration/test_sbatch_values_on_slurm.py has
    the real sbatch read these lines."""
    proc = dry_run(tmp_path / "x", *DIGITS, "--results-dir", str(tmp_path / folder))
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "x" / "s" / "jax_digits_1.sh").read_text()
    output = next(line for line in script.splitlines() if line.startswith("#SBATCH --output="))
    campaign = next((tmp_path / folder).iterdir()).name
    assert output == "#SBATCH --output=" + written.format(base=tmp_path, campaign=campaign)


def test_a_backslash_in_the_log_folder_is_refused_at_plan_time(tmp_path):
    """sbatch reads an escaped backslash, but in a log path it means "replace no %A or %a": on the local cluster
    such tasks failed to open their logs. No quoting helps, so the folder is refused in one sentence."""
    proc = dry_run(tmp_path, *DIGITS, "--results-dir", str(tmp_path / "a\\b"))
    assert proc.returncode == 2 and "holds a backslash" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "a\\b").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
@pytest.mark.parametrize("folder", ["r,1", "r:1"])
def test_a_folder_a_containers_mount_list_would_split_is_refused(tmp_path, runtime, folder):
    """The campaign folder goes into Apptainer's --bind list (and pyxis's --container-mounts), which
    split at ',' (two mounts) and ':' (a path and where it goes); neither can be escaped there."""
    image = tmp_path / "jax.sif"  # each runtime's own form: apptainer runs a pulled .sif, pyxis a registry reference
    image.touch()
    reference = image if runtime == "apptainer" else "docker://nvcr.io/nvidia/jax:25.01-py3"
    profile = profile_file(tmp_path, f'[envs.jax]\ncontainer = "{reference}"\nruntime = "{runtime}"\n')
    proc = dry_run(tmp_path, *DIGITS, "--profile", str(profile), "--frameworks", "jax",
                   "--results-dir", str(tmp_path / folder))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "holds a ',' or ':'" in line and ("--bind" if runtime == "apptainer" else "--container-mounts") in line
    assert not (tmp_path / folder).exists() and not (tmp_path / "s").exists()
