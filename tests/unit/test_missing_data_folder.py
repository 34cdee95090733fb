"""A --data-dir that does not exist names `data fetch`, as an empty one does, with the command as it
would work: the user's folder, quoted for the shell."""

import shlex

import pytest
from helpers import doctor_rows, run_cli


def fetch_command(benchmark, folder) -> str:
    return f"fetch it with: python main.py data fetch {benchmark} --data-dir {shlex.quote(str(folder))}"


@pytest.mark.parametrize("benchmark", ["mnist", "cifar10"])
def test_a_missing_data_folder_is_refused_with_the_fetch_command(tmp_path, benchmark):
    missing = tmp_path / "no such" / benchmark  # a space: the hint must still be a command that works as printed
    proc = run_cli("--benchmark", benchmark, "--use-case", "1", "--data-dir", str(missing),
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: data directory {missing} does not exist; {fetch_command(benchmark, missing)}"
    assert not (tmp_path / "r").exists()


def test_doctor_and_data_check_name_the_fetch_command_for_a_missing_folder(tmp_path):
    missing = tmp_path / "nope"
    doctor = run_cli("doctor", "--benchmark", "mnist", "--data-dir", str(missing))
    assert fetch_command("mnist", missing) in doctor_rows(doctor.stdout)["mnist data"][1]
    checked = run_cli("data", "check", "cifar10", "--data-dir", str(missing))
    assert checked.returncode == 1
    assert f"problem: data directory {missing} does not exist; {fetch_command('cifar10', missing)}" in checked.stdout
