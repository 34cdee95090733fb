"""`main.py envs`: an environment is built from its requirements and reused while they are unchanged."""

from orchestrator.plan.profile import ClusterProfile
from orchestrator.run import envs


def test_built_once_then_reused_then_rebuilt_when_requirements_change(tmp_path, monkeypatch):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# nothing to install: the venv itself is what is tested\n")
    monkeypatch.setattr(envs, "requirements_file", lambda framework, profile: requirements)
    profile = ClusterProfile(env_dir=str(tmp_path / "envs"))
    said = []

    env = envs.ensure_env("jax", profile, report=said.append)
    assert (env / "bin" / "python").exists() and env == tmp_path / "envs" / "jax"
    marker = env / "marker"
    marker.write_text("")
    envs.ensure_env("jax", profile, report=said.append)
    assert marker.exists() and "up to date" in said[-1]

    requirements.write_text("# changed\n")
    envs.ensure_env("jax", profile, report=said.append)
    assert not marker.exists() and envs.is_current(env, requirements)


def test_an_interrupted_build_is_not_current(tmp_path):
    requirements = tmp_path / "r.txt"
    requirements.write_text("numpy\n")
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)  # a venv without the stamp: its install never finished
    assert not envs.is_current(env, requirements)


def test_the_profile_chooses_the_jax_recipe():
    assert envs.requirements_file("jax", ClusterProfile(jax_recipe="cuda12")).name == "requirements-cuda12.txt"
    assert envs.requirements_file("jax", ClusterProfile()).name == "requirements-cpu.txt"
    for recipe in ("cpu", "cuda12", "cuda13"):
        assert envs.requirements_file("jax", ClusterProfile(jax_recipe=recipe)).is_file()
    assert envs.requirements_file("torch", ClusterProfile()).is_file()
