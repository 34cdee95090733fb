"""The methods paragraph (orchestrator.results.methods): written from the rows, in report.md and on the
HTML page, every figure in it read from what the runs recorded."""

import json

import pandas as pd
from helpers import result_context, run_cli


def write_node_run(root, campaign, framework, node, throughput, settings, version, timed_steps=3, metrics=None,
              **context):
    from bench_contract.results import ResultRows

    ctx = result_context(framework=framework, benchmark="digits", use_case=3, model="mlp", batch_size=64,
                         precision="bf16", device_kind="cpu", device_model="CPU X", bound_cpus=4, campaign=campaign,
                         cell_id=f"{framework}-cell", slurm_nodelist=node, framework_version=version,
                         python_version="3.11.7", settings=json.dumps(settings, sort_keys=True),
                         git_commit="6feb0d7", **context)
    rows = ResultRows(ctx)
    rows.add("throughput", throughput, "samples/s")
    rows.add("warmup_steps", 7, "steps")
    rows.add("timed_steps", timed_steps, "steps")  # what the run timed, not the settings' minimum
    for metric, value in (metrics or {}).items():
        rows.add(metric, value, "")
    rows.write(root / campaign / "rows" / framework / f"{framework}-cell.parquet")


def test_the_report_has_a_methods_paragraph_written_from_the_rows(tmp_path):
    settings = {"warmup_steps": 7, "timed_steps": 50, "torch_compile": True, "torch_compile_mode": "max-autotune"}
    for k, node in enumerate(("n1", "n2", "n3")):
        write_node_run(tmp_path, f"c{k}", "jax", node, 2000.0 + k, settings, "0.4.31", timed_steps=3 + k)
        write_node_run(tmp_path, f"c{k}", "torch", node, 1000.0 + k, settings, "2.5.1")
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    methods = markdown.split("## Methods\n\n")[1].split("\n")[0]
    for said in ("All runs used CPU X CPUs (4 bound to each process), on 3 nodes.",
                 "Software: JAX 0.4.31 and PyTorch 2.5.1, Python 3.11.7; measured with jaxtorch-bench at commit "
                 "6feb0d7.",
                 "Workloads: digits mlp; use case 3; batch size 64; precision bf16,",
                 "PyTorch torch.compile (max-autotune)", "warmed up for 7 steps then timed from 3 to 5 steps,",
                 "Each cell ran 3 times per framework", "at least 3 runs a side, an interval within 10%",
                 "Of 1 comparison, 1 was reliable, and it was comparable."):
        assert said in methods, (said, methods)
    assert "50" not in methods  # the settings' minimum of timed steps is not what ran
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Methods</h2>" in page and "Software: JAX 0.4.31 and PyTorch 2.5.1" in page



def test_the_methods_say_what_poisson_sampled_runs_count_and_each_sides_padding(tmp_path):
    """JAX padded its Poisson batches (65% of the examples it computed), and no methods text said so."""
    settings = {"warmup_steps": 7, "timed_steps": 50}
    for k, padding in enumerate((0.6, 0.65)):
        write_node_run(tmp_path, f"c{k}", "jax", "n1", 2000.0, settings, "0.4.31",
                  metrics={"timed_batch_size_mean": 15.64, "padding_fraction": padding})
        write_node_run(tmp_path, f"c{k}", "torch", "n1", 1000.0, settings, "2.5.1",
                       metrics={"timed_batch_size_mean": 15.64})
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    methods = (tmp_path / "report" / "report.md").read_text().split("## Methods\n\n")[1].split("\n")[0]
    assert ("Under Poisson sampling, throughput and FLOPs count the examples the timed steps drew, not the nominal "
            "batch size; batches padded to one compiled shape also computed padding (JAX's from 60% to 65% of the "
            "examples computed), counted as no work.") in methods, methods


def test_the_methods_say_nothing_of_sampling_where_no_run_drew_poisson_batches(tmp_path):
    from orchestrator.results.methods import sampled

    rows = pd.DataFrame({"metric": ["throughput", "padding_fraction"], "framework": ["jax", "jax"], "value": [1.0, 0.5]})
    assert sampled(rows) == ""


def test_the_methods_name_cuda_cudnn_and_the_container_image_each_side_ran(tmp_path):
    """What a reader needs to rebuild the software: each side's CUDA and cuDNN as the framework loaded them, and
    the image it ran in, as the rows recorded them; a CPU run's "not available" is left out."""
    images = {"jax": "nvcr.io/nvidia/jax:25.04-py3", "torch": "/shared/pytorch-25.04.sif"}
    libraries = {"jax": {"cuda": "12.8", "cudnn": "9.7.1"}, "torch": {"cuda": "12.8", "cudnn": "90701", "nccl": "2.25"}}
    for framework, version in (("jax", "0.5.3"), ("torch", "2.7.0")):
        write_node_run(tmp_path, "c", framework, "n1", 100.0, {}, version,
                       environment_kind=f"container: {images[framework]}",
                       library_versions=json.dumps(libraries[framework]))
    write_node_run(tmp_path, "d", "torch", "n1", 100.0, {}, "2.7.0",
              library_versions=json.dumps({"cuda": "not available: CPU-only build of torch"}))
    assert run_cli("collect", "--results-dir", str(tmp_path)).returncode == 0
    assert run_cli("report", "--results-dir", str(tmp_path)).returncode == 0
    methods = (tmp_path / "report" / "report.md").read_text().split("## Methods\n\n")[1].split("\n")[0]
    assert ("Software: JAX 0.5.3 (CUDA 12.8, cuDNN 9.7.1; container nvcr.io/nvidia/jax:25.04-py3) and PyTorch 2.7.0 "
            "(CUDA 12.8, cuDNN 90701; container /shared/pytorch-25.04.sif), Python 3.11.7; measured with "
            "jaxtorch-bench at commit 6feb0d7.") in methods, methods
