"""Building an environment (#19) shows pip's progress as it goes: a bar over the pinned requirements collected,
the dependencies found besides, then the install; a failed pip still ends in one error with its last lines."""

import pytest

from orchestrator.errors import OrchestratorError
from orchestrator.plan.profile import ClusterProfile
from orchestrator.run import envs

# pip 23.2's own output for part of our requirements, from a local mirror ("Processing <wheel>") and an index
# ("Collecting <requirement>"); "(from ...)" follows a dependency and a line of the requirements file alike.
PIP_OUTPUT = """\
Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple
Processing /opt/pypi/files/numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
Collecting pillow==13.0.0 (from -r requirements.txt (line 3))
  Downloading pillow-13.0.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl (7.1 MB)
Processing /opt/pypi/files/scikit_learn-1.9.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
Processing /opt/pypi/files/scipy-1.17.1-cp311-cp311-manylinux_2_27_x86_64.whl (from scikit-learn==1.9.1)
Collecting threadpoolctl>=3.5.0 (from scikit-learn==1.9.1)
  Downloading threadpoolctl-3.8.0-py3-none-any.whl (32 kB)
Installing collected packages: threadpoolctl, scipy, pillow, numpy, scikit-learn
Successfully installed numpy-2.4.6 pillow-13.0.0 scikit-learn-1.9.1 scipy-1.17.1 threadpoolctl-3.8.0
"""


def fake_python(tmp_path, pip_output: str, pip_exit: int = 0):
    """An interpreter that makes a venv by copying itself into it, and whose pip prints `pip_output`."""
    (tmp_path / "pip_output.txt").write_text(pip_output)
    script = tmp_path / "python"
    script.write_text(f"""#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0; fi
if [ "$1 $2 $3" = "-m pip install" ]; then cat {tmp_path / "pip_output.txt"}; exit {pip_exit}; fi
exit 9
""")
    script.chmod(0o755)
    return script


def build(tmp_path, monkeypatch, pip_output, pip_exit=0):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pins\nnumpy==2.4.6\npillow==13.0.0  # images\nscikit_learn==1.9.1\n--prefer-binary\n")
    monkeypatch.setattr(envs, "requirements_file", lambda framework, profile: requirements)
    profile = ClusterProfile(env_dir=str(tmp_path / "envs"), python=str(fake_python(tmp_path, pip_output, pip_exit)))
    said = []
    env = envs.ensure_env("torch", profile, report=said.append)
    return env, said


def test_each_package_pip_collects_is_a_step_of_the_bar_then_the_install_is_announced(tmp_path, monkeypatch):
    env, said = build(tmp_path, monkeypatch, PIP_OUTPUT)
    pip_lines = [line for line in said if line.startswith("torch: pip")]
    assert [line.split(": ")[-1] for line in pip_lines[:5]] == [
        "numpy", "pillow", "scikit-learn", "scipy", "threadpoolctl"]
    assert pip_lines[0].startswith(f"torch: pip [{'#' * 10}{'.' * 20}] 1/3 requirements, dependencies found: 0, ")
    assert pip_lines[2].startswith(f"torch: pip [{'#' * 30}] 3/3 requirements, dependencies found: 0, ")
    assert pip_lines[4].startswith(f"torch: pip [{'#' * 30}] 3/3 requirements, dependencies found: 2, ")
    assert pip_lines[5].startswith("torch: pip: installing 5 packages (unpacking the wheels")
    assert len(pip_lines) == 6 and said[-1] == f"torch: environment ready at {env}"
    assert envs.is_current(env, tmp_path / "requirements.txt")


def test_a_failed_install_shows_how_far_it_got_then_one_error_with_pips_last_lines(tmp_path):
    output = ("Collecting numpy==2.4.6\n" + "".join(f"detail {i}\n" for i in range(20))
              + "ERROR: No matching distribution\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy==2.4.6\npillow==13.0.0\n")
    said = []
    with pytest.raises(OrchestratorError) as caught:
        envs.pip_install(fake_python(tmp_path, output, pip_exit=1), requirements, said.append)
    assert len(said) == 1 and said[0].startswith(f"pip [{'#' * 15}{'.' * 15}] 1/2 requirements")
    message = str(caught.value)
    assert "pip install" in message and "failed (exit 1)" in message
    assert message.endswith("detail 19\nERROR: No matching distribution") and "detail 10" not in message
