"""The test run's shared state (tests/cluster_run.py): one JAX compilation cache per run, kept unless the caller
chose one, and removed by the run's last step with nothing else touched."""

import os

import cluster_run


def test_a_run_shares_one_compilation_cache_and_its_end_removes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_run, "STATE_DIR", tmp_path)
    monkeypatch.setenv(cluster_run.RUN_VARIABLE, "run-a")
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        monkeypatch.delenv(name, raising=False)
    cluster_run.share_compilations()
    cache = tmp_path / "run-a.jax-compilation-cache"
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(cache)
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"  # every program, whatever the load
    (cache / "entry").parent.mkdir()
    (cache / "entry").write_bytes(b"x")
    other = tmp_path / "run-b.jax-compilation-cache"
    other.mkdir()
    assert cluster_run.end() is None  # this run started no cluster: nothing to take down
    assert not cache.exists() and other.exists()


def test_a_cache_the_caller_chose_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_run, "STATE_DIR", tmp_path)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    cluster_run.share_compilations()
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "mine")
