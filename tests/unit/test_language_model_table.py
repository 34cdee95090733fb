"""The language models' table in tokens/s (orchestrator.results.language_models), in collect and the report."""

import json

from helpers import result_context, task_file
from test_use_case_tables import collect, table_lines

from orchestrator.tables import TERMINAL_WIDTH

XLA = "XLA (dot_product_attention's reference implementation)"
MIB = 2**20


def write_gpt(root, framework, batch, metrics, kernel, use_case=1, campaign="c", settings=None, variant="tiny",
              version="1.0", device_kind="cpu"):
    """One gpt task's result file: `metrics` summary values (None: recorded as not available), the attention kernel
    the framework ran, the measured settings' JSON (one comparison row per distinct settings)."""
    from bench_contract.results import ResultRows

    settings = {"model_variant": variant, **(settings or {})}
    cell = f"{framework}-gpt-{variant}-uc{use_case}-{batch}-{settings.get('parallelism', 'none')}"
    ctx = result_context(framework=framework, benchmark="nlp", use_case=use_case, model="gpt", model_variant=variant,
                         batch_size=batch, precision="fp32", device_kind=device_kind, device_model="CPU X",
                         campaign=campaign, cell_id=cell,
                         attention_kernel=kernel, settings=json.dumps(settings, sort_keys=True),
                         framework_version=version)
    rows = ResultRows(ctx)
    for name, value in metrics.items():
        if value is None:
            rows.add_unavailable(name, "", "not measured in this test")
        else:
            rows.add(name, value, "")
    return rows.write(root / campaign / "rows" / framework / f"{cell}.parquet")


def write_pair(root, batch=8, campaign="c", jax=(100.0, 0.012, None, 3 * MIB), torch=(50.0, None, 5 * MIB, 2 * MIB),
               kernels=(XLA, "flash (CPU)"), host_rss=(None, None), **cell):
    """A JAX and a PyTorch run of a gpt cell: per side (samples/s, MFU, peak device memory, state memory), its
    tokens/s 64 tokens a sample, and the process's peak host memory per side (`host_rss`, None: not recorded)."""
    for framework, (speed, mfu, peak, state), kernel, rss in zip(("jax", "torch"), (jax, torch), kernels, host_rss):
        metrics = {"throughput": speed, "token_throughput": 64 * speed, "model_flops_utilisation": mfu,
                   "peak_device_memory_allocated": peak}
        if rss is not None:
            metrics["peak_host_rss"] = rss
        if state is not ...:  # ...: a row from before state_memory_per_device was recorded
            metrics["state_memory_per_device"] = state
        write_gpt(root, framework, batch, metrics, kernel, campaign=campaign, **cell)


def language_table(stdout: str) -> list[str]:
    return table_lines(stdout, "Language models in tokens/s on CPU X")


def test_collect_shows_tokens_per_second_with_the_throughputs_speedup_and_interval(tmp_path):
    """The table a language model is run for: tokens/s of each side; its speed-up is the throughput's, interval
    and all (the same comparison row, not a second computation), as the training table prints it."""
    for campaign, factor in (("a", 1.0), ("b", 1.1)):
        write_pair(tmp_path, campaign=campaign, jax=(100.0 * factor, 0.012, 7 * MIB, 3 * MIB),
                   torch=(50.0 * factor, 0.006, 5 * MIB, 2 * MIB))
    stdout = collect(tmp_path)
    table = language_table(stdout)
    assert table[0] == ("Language models in tokens/s on CPU X (gpt; variant tiny; use case 1; ddp; fp32; "
                        "runs JAX/PyTorch 2/2)")
    assert table[1].split() == ["speed-up", "JAX/PyTorch", "MFU", "state", "per", "peak", "per"]
    assert table[2].split() == ["batch", "framework", "tokens/s", "[95%", "CI]", "(6N)", "device", "MiB", "device",
                                "MiB"]
    training = table_lines(stdout, "Training on CPU X")[4].split()
    speedup = training[training.index("JAX") + 2:training.index("JAX") + 5]
    assert speedup[0] == "2.00x" and speedup[1].startswith("[")  # an interval: two runs a side
    assert table[4].split() == ["8", "JAX", "6,720", *speedup, "0.012", "3", "7"]
    assert table[5].split() == ["PyTorch", "3,360", "0.006", "2", "5"]
    assert table[6] == f"attention kernel: JAX {XLA}; PyTorch flash (CPU)"


def test_only_language_models_are_in_the_table(tmp_path):
    """An MLP's row has no tokens: it stays in the use cases' tables only."""
    write_pair(tmp_path)
    for framework, speed in (("jax", 2000.0), ("torch", 1000.0)):
        task_file(tmp_path, framework, 32, speed, campaign="c")
    stdout = collect(tmp_path)
    table = language_table(stdout)
    assert [line.split()[:2] for line in table[4:6]] == [["8", "JAX"], ["PyTorch", "3,200"]]
    assert not any("2,000" in line or "digits" in line for line in table)
    assert "mlp" in "\n".join(table_lines(stdout, "Training on CPU X"))


def test_no_language_model_table_without_a_language_model(tmp_path):
    for framework, speed in (("jax", 2000.0), ("torch", 1000.0)):
        task_file(tmp_path, framework, 32, speed, campaign="c")
    assert "Language models" not in collect(tmp_path)


def test_the_state_per_device_beside_the_device_peak_else_on_a_cpu_the_processs_peak(tmp_path):
    """Batch 8: JAX measured no device peak, so on a CPU its process's peak host memory stands for it (said below),
    PyTorch did (its device peak, not its host memory). Batch 16: rows from before state_memory_per_device, with
    no peak of either kind: n/a."""
    write_pair(tmp_path, batch=8, jax=(100.0, 0.01, None, 3 * MIB), torch=(50.0, 0.01, 5 * MIB, 2 * MIB),
               host_rss=(700 * MIB, 900 * MIB))
    write_pair(tmp_path, batch=16, jax=(100.0, 0.01, None, ...), torch=(50.0, 0.01, None, ...))
    table = language_table(collect(tmp_path))
    memory = [line.split("0.01")[-1].split() for line in table[4:8]]
    assert memory == [["3", "700"], ["2", "5"], ["n/a", "n/a"], ["n/a", "n/a"]]
    assert "peak per device: each process's peak resident memory (peak_host_rss); a process drives one CPU" in table


def test_a_processs_host_memory_is_no_gpus_peak(tmp_path):
    """On a GPU that measured no peak, the host memory of its process is not the device's: n/a, not the RSS."""
    write_pair(tmp_path, jax=(100.0, 0.01, None, 3 * MIB), torch=(50.0, 0.01, None, 2 * MIB),
               host_rss=(700 * MIB, 900 * MIB), device_kind="gpu")
    table = table_lines(collect(tmp_path), "Language models in tokens/s on CPU X")
    assert [line.split("0.01")[-1].split() for line in table[4:6]] == [["3", "n/a"], ["2", "n/a"]]
    assert not any("resident memory" in line for line in table)


def test_parallelism_comes_from_the_settings_and_rows_without_it_ran_ddp(tmp_path):
    """Use case 2 run with FSDP beside rows written before --parallelism: two comparison rows, fsdp and ddp."""
    write_pair(tmp_path, use_case=2, settings={"parallelism": "fsdp", "nodes": 2})
    write_pair(tmp_path, use_case=2, settings={"nodes": 2})
    table = language_table(collect(tmp_path))
    assert "use case 2" in table[0] and "ddp" not in table[0]
    assert table[2].split()[:2] == ["lelism", "batch"]
    assert [line.split()[:2] for line in (table[4], table[6])] == [["ddp", "8"], ["fsdp", "8"]]


def test_a_row_that_is_not_comparable_has_no_speedup_and_says_why(tmp_path):
    """The certificate applies: JAX runs of two framework versions pooled in one row."""
    for campaign, version in (("a", "1.0"), ("b", "2.0")):
        write_pair(tmp_path, campaign=campaign, version=version)
    table = language_table(collect(tmp_path))
    assert "not comparable" in table[4]
    said = [line for line in table if line.startswith("not comparable, gpt (tiny) use case 1 ddp batch 8: ")]
    assert len(said) == 1 and "versions" in said[0]


def test_a_spread_too_wide_is_marked_and_said(tmp_path):
    for campaign, factor in (("a", 1.0), ("b", 2.0)):  # JAX's two runs 100 and 200 samples/s apart
        write_pair(tmp_path, campaign=campaign, jax=(100.0 * factor, 0.01, None, MIB))
    table = language_table(collect(tmp_path))
    assert table[2].split()[-1] == "spread" and table[4].split()[-1] == "wide"
    assert "spread too wide (CV > 10%), gpt (tiny) use case 1 ddp batch 8: JAX trials 47%" in table


def test_attention_kernels_are_a_column_where_a_framework_ran_several(tmp_path):
    write_pair(tmp_path, batch=8, kernels=(XLA, "flash (CPU)"))
    write_pair(tmp_path, batch=16, kernels=("cuDNN fused attention", "flash (CPU)"))
    table = language_table(collect(tmp_path))
    assert table[2].split()[-1] == "kernel"
    assert [line.endswith(kernel) for line, kernel in zip(table[4:8], (XLA, "flash (CPU)", "cuDNN fused attention",
                                                                     "flash (CPU)"))] == [True] * 4
    assert not any(line.startswith("attention kernel:") for line in table)


def test_a_dataset_merged_before_the_attention_kernel_was_recorded(tmp_path):
    """summary_frame reads only the columns a dataset has: without attention_kernel, the kernels are n/a."""
    from orchestrator.results.collect import merge, summary_lines
    from orchestrator.results.views import summary_frame

    write_pair(tmp_path)
    merge(tmp_path, tmp_path / "merged.parquet")
    summary = summary_frame(tmp_path / "merged.parquet").drop(columns="attention_kernel")
    table = language_table("\n".join(summary_lines(summary)))
    assert table[4].split()[:3] == ["8", "JAX", "6,400"]
    assert "attention kernel: JAX n/a; PyTorch n/a" in table


def test_the_widest_table_fits_a_terminal_of_120_columns(tmp_path):
    """Every key varying (variant, use case, parallelism, batch), intervals, large numbers, a spread too wide and
    a peak from the host memory; each framework one GPU kernel, said below the table."""
    for campaign, factor in (("a", 1.0), ("b", 1.3)):
        for variant in ("tiny", "full"):
            for use_case, settings in ((1, {}), (2, {"parallelism": "fsdp", "nodes": 16})):
                for batch in (8, 1024):
                    write_pair(tmp_path, batch=batch, campaign=campaign, variant=variant, use_case=use_case,
                               settings=settings, jax=(123456.0 * factor, 0.123, None, 12345 * MIB),
                               torch=(98765.0, 0.0123, 23456 * MIB, MIB),
                               kernels=("cuDNN fused attention", "flash"), host_rss=(123456 * MIB, None))
    table = language_table(collect(tmp_path))
    assert len(table) >= 4 + 16 and "x [" in table[4] and "123,456" in table[4] and "wide" in table[4]
    assert table[2].split()[:4] == ["variant", "case", "lelism", "batch"]
    assert max(len(line) for line in table[1:]) <= TERMINAL_WIDTH, "\n".join(table)


def test_the_report_has_the_table_in_every_format(tmp_path):
    from orchestrator.results.collect import merge
    from orchestrator.results.report import write_report

    write_pair(tmp_path)
    merge(tmp_path, tmp_path / "merged.parquet")
    write_report(tmp_path / "merged.parquet", tmp_path / "report")
    title = "Language models in tokens/s on CPU X (gpt; variant tiny; use case 1; ddp; fp32; runs JAX/PyTorch 1/1)"
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"## {title}" in md and "| 8 | JAX | 6,400 | 2.00x [n/a (1 run)] | 0.012 | 3 | n/a |" in md
    assert "\\caption{Language models in tokens/s on CPU X" in (tmp_path / "report" / "report.tex").read_text()
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<h3>Language models in tokens/s on CPU X" in page and "PyTorch flash (CPU)" in page
    csv = (tmp_path / "report" / "report.csv").read_text().splitlines()[0].split(",")
    assert {"jax_token_throughput", "torch_attention_kernel", "parallelism", "jax_peak_memory_per_device",
            "torch_peak_memory_source"} <= set(csv)
