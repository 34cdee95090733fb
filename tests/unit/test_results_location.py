"""Where campaigns go: a site's profile may put them, their results and their task logs, on scratch (results_dir),
rather than in the checkout under the home directory; --results-dir replaces it for one campaign."""

import os

from helpers import run_cli


def plan_with_profile(tmp_path, profile_text: str, *args: str, env: dict | None = None):
    profile = tmp_path / "site.toml"
    profile.write_text(profile_text)
    return run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile), "--dry-run",
                   "--scripts-dir", str(tmp_path / "s"), *args, env=env)


def test_a_profiles_results_dir_holds_the_campaign_and_its_logs(tmp_path):
    scratch = tmp_path / "scratch" / "me"
    proc = plan_with_profile(tmp_path, f'results_dir = "{scratch}"\n')
    assert proc.returncode == 0, proc.stderr
    campaign = next(scratch.iterdir())
    assert (campaign / "manifest.json").is_file()
    assert f"#SBATCH --output={campaign}/logs/jax_digits_1_%A_%a.out" in (tmp_path / "s" / "jax_digits_1.sh").read_text()
    assert f"manifest {campaign / 'manifest.json'}" in proc.stdout


def test_results_dir_expands_home_and_the_option_replaces_it(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    proc = plan_with_profile(tmp_path, 'results_dir = "~/scratch"\n', env=env)
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "home" / "scratch").iterdir())
    proc = plan_with_profile(tmp_path, 'results_dir = "~/scratch"\n', "--results-dir", str(tmp_path / "mine"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "mine").iterdir()) and len(list((tmp_path / "home" / "scratch").iterdir())) == 1
