"""A table per use case (orchestrator.results.views): what each use case is for, in 120 columns."""

from helpers import result_context, task_file

from orchestrator.tables import TERMINAL_WIDTH, format_table

ONE_RUN = "[n/a (1 run)]".split()  # the interval of a speed-up from one run a side, as a table's words


def write_cell(root, framework, use_case, batch, metrics, benchmark="digits", model="mlp", curves=None,
               campaign="c"):
    """One task's result file with the given summary metrics and, per epoch, (val_accuracy, epoch_time)."""
    from bench_contract.results import ResultRows

    ctx = result_context(framework=framework, benchmark=benchmark, use_case=use_case, model=model,
                         batch_size=batch, precision="fp32", device_model="CPU X", campaign=campaign,
                         cell_id=f"{framework}-{benchmark}-{model}-uc{use_case}-{batch}")
    rows = ResultRows(ctx)
    for name, value in metrics.items():
        rows.add(name, value, "")
    for epoch, (accuracy, seconds) in enumerate(curves or []):
        rows.add("val_accuracy", accuracy, "fraction", epoch=epoch)
        rows.add("epoch_time", seconds, "s", epoch=epoch)
    return rows.write(root / campaign / "rows" / framework / f"{ctx['cell_id']}.parquet")


def collect(root) -> str:
    """What `collect` prints for the results under root."""
    from orchestrator.results.collect import collect_and_report

    printed = []
    collect_and_report(root, report=printed.append, warn=printed.append)
    return "\n".join(printed)


def table_lines(stdout: str, title: str) -> list[str]:
    """The lines of the table whose caption starts with `title`, up to the next empty line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_collect_shows_the_per_sample_numbers_of_use_case_3(tmp_path):
    """Use case 3 is run for the vectorisation speed-up: collect showed only throughput and accuracy."""
    for framework, (vmap, loop) in {"jax": (2.0, 75.0), "torch": (4.0, 60.0)}.items():
        write_cell(tmp_path, framework, 3, 32, {
            "throughput": 900.0 if framework == "jax" else 600.0, "test_accuracy": 0.9,
            "per_sample_grads_vectorized_time_p50": vmap, "per_sample_grads_loop_time_p50": loop,
            "vectorization_speedup": loop / vmap})
    table = table_lines(collect(tmp_path), "Per-sample gradients (DP-SGD) on CPU X")
    assert "fp32" in table[0] and "runs JAX/PyTorch 1/1" in table[0]
    assert table[1].split()[-4:] == ["vmap", "loop", "vmap", "cost"]
    assert table[2].split()[-6:] == ["pad", "ms", "ms", "speed-up", "vs", "SGD"]
    jax, torch = table[4].split(), table[5].split()
    # No use case 1 of the cell was collected: no cost over SGD. Neither side padded its batches: 0%.
    assert jax == ["digits", "3", "mlp", "32", "JAX", "900", "1.50x", *ONE_RUN, "0%", "2", "75", "37.5x", "n/a"]
    assert torch == ["PyTorch", "600", "0%", "4", "60", "15.0x", "n/a"]


def dp_sgd_cell(root, framework, batch, throughput, padding=None, loop_compiled=None):
    """A use case 3 run with its padding fraction (None: it padded nothing) and whether its vectorisation timing
    ran compiled (None: rows from before it was recorded)."""
    metrics = {"throughput": throughput, "per_sample_grads_vectorized_time_p50": 2.0,
               "per_sample_grads_loop_time_p50": 60.0, "vectorization_speedup": 30.0}
    if padding is not None:
        metrics["padding_fraction"] = padding
    if loop_compiled is not None:
        metrics |= {f"per_sample_grads_{version}_compiled": loop_compiled for version in ("vectorized", "loop")}
    write_cell(root, framework, 3, batch, metrics)


def test_the_dp_sgd_table_shows_each_sides_padding_and_the_certificate_judges_it(tmp_path):
    """JAX padded digits' Poisson batches of 16 to 45 examples (padding 0.65), PyTorch ran them as drawn,
    and the row was certified comparable with no word of it. At batch 16 JAX computes 1/(1 - 0.65) = 2.86 times the
    examples per drawn one: not comparable. At batch 4096 a padding of 8% is 1.09 times, within the 10% a quoted
    speed-up may be off by (certificate.MAX_INTERVAL): comparable, and the padding is said below the table."""
    dp_sgd_cell(tmp_path, "jax", 16, 900.0, padding=0.65)
    dp_sgd_cell(tmp_path, "torch", 16, 600.0)
    dp_sgd_cell(tmp_path, "jax", 4096, 900.0, padding=0.08)
    dp_sgd_cell(tmp_path, "torch", 4096, 600.0)
    stdout = collect(tmp_path)
    table = table_lines(stdout, "Per-sample gradients (DP-SGD) on CPU X")
    assert table[2].split()[-6] == "pad"
    small_jax, small_torch, large_jax, large_torch = (line.split() for line in table[4:8])
    assert small_jax[5:8] == ["900", "not", "comparable"] and small_jax[8] == "65%" and small_torch[2] == "0%"
    assert large_jax[5:7] == ["900", "1.50x"] and large_jax[-5] == "8%" and large_torch[2] == "0%"
    assert ("not comparable, digits mlp batch 16: JAX computed 2.86 times the examples per drawn one that PyTorch did "
            "(padding JAX 65%, PyTorch none), more than the 10% a quoted speed-up may be off by: compiled PyTorch pads "
            "alike (--torch-modes compiled)") in stdout
    assert ("padding, digits mlp batch 4096: padding of the computed examples JAX 8%, PyTorch none; throughput and "
            "MFU count the drawn examples alone") in stdout
    assert "padding, digits mlp batch 16:" not in stdout  # the certificate's reason says it already


def test_both_sides_padded_alike_are_comparable_and_the_padding_is_said(tmp_path):
    """JAX against compiled PyTorch: both pad the same draws to one shape, so they compute alike per drawn example."""
    dp_sgd_cell(tmp_path, "jax", 16, 900.0, padding=0.65)
    dp_sgd_cell(tmp_path, "torch", 16, 600.0, padding=0.65)
    stdout = collect(tmp_path)
    assert "not comparable" not in stdout
    assert "padding, digits mlp batch 16: padding of the computed examples JAX 65%, PyTorch 65%;" in stdout


def test_the_dp_sgd_table_says_which_loop_each_sides_vmap_speedup_divides(tmp_path):
    """A jitted per-example loop (JAX) beside an eager one (PyTorch) was called "vmap speed-up" alike: the table
    says each side's from its rows, and nothing for rows that did not record it."""
    dp_sgd_cell(tmp_path, "jax", 32, 900.0, loop_compiled=1.0)
    dp_sgd_cell(tmp_path, "torch", 32, 600.0, loop_compiled=0.0)
    stdout = collect(tmp_path)
    assert ("vmap speed-up: the per-example loop's time over the vectorised one's (JAX: jitted loop, jitted "
            "vectorised; PyTorch: eager loop, eager vectorised)") in stdout
    dp_sgd_cell(tmp_path / "old", "jax", 32, 900.0)
    dp_sgd_cell(tmp_path / "old", "torch", 32, 600.0)
    assert "vmap speed-up:" not in collect(tmp_path / "old")


def test_the_dp_sgd_table_says_what_dp_sgd_costs_over_the_same_cells_sgd(tmp_path):
    """Each framework's DP-SGD throughput against its plain SGD step's, on the same cell."""
    for framework, (sgd, dp_sgd) in {"jax": (3000.0, 1000.0), "torch": (2400.0, 300.0)}.items():
        write_cell(tmp_path, framework, 1, 32, {"throughput": sgd})
        write_cell(tmp_path, framework, 3, 32, {"throughput": dp_sgd})
        write_cell(tmp_path, framework, 3, 64, {"throughput": dp_sgd})  # no SGD cell at batch 64
    table = table_lines(collect(tmp_path), "Per-sample gradients (DP-SGD) on CPU X")
    assert [line.split()[-1] for line in table[4:]] == ["3.0x", "8.0x", "n/a", "n/a"]


def test_training_shows_the_time_each_side_took_to_the_accuracy_both_reached(tmp_path):
    # JAX ends at 0.9, PyTorch at 0.85: both reached 0.85. JAX first did at epoch 2 (3 s), PyTorch at epoch 3 (8 s).
    write_cell(tmp_path, "jax", 1, 32, {"throughput": 2000.0, "step_time_p50": 16.0, "test_accuracy": 0.91},
               curves=[(0.5, 1.0), (0.86, 2.0), (0.9, 1.0)])
    write_cell(tmp_path, "torch", 1, 32, {"throughput": 1000.0, "step_time_p50": 32.0, "test_accuracy": 0.84},
               curves=[(0.4, 2.0), (0.7, 2.0), (0.85, 4.0)])
    table = table_lines(collect(tmp_path), "Training on CPU X")
    assert table[1].split() == ["speed-up", "JAX/PyTorch", "step", "p50", "val", "acc", "s", "to", "test"]
    assert table[4].split() == ["digits", "mlp", "32", "JAX", "2,000", "2.00x", *ONE_RUN, "16", "0.850", "3", "0.910"]
    assert table[5].split() == ["PyTorch", "1,000", "32", "8", "0.840"]


def test_data_parallel_shows_throughput_per_device_and_scaling_efficiency(tmp_path):
    for framework, single, pair in (("jax", 1000.0, 1500.0), ("torch", 800.0, 1600.0)):
        task_file(tmp_path, framework, 32, single, use_case=1, world_size=1)
        task_file(tmp_path, framework, 32, pair, use_case=2, world_size=2,
                  metrics={"throughput_per_device": pair / 2})
    table = table_lines(collect(tmp_path), "Data parallel on CPU X")
    assert table[4].split() == ["digits", "2", "mlp", "32", "JAX", "2", "0.94x", *ONE_RUN, "750", "75%"]
    assert table[5].split() == ["PyTorch", "800", "100%"]


def test_every_use_case_table_fits_a_terminal_of_120_columns(tmp_path):
    """With the longest names the catalog has, large numbers, intervals and two trials: each line of collect's
    tables fits 120 columns (the comparison table was 32 columns wide in the report, and wider than a terminal
    in collect)."""
    for campaign in ("a", "b"):  # two runs per side: the speed-up has its interval, the widest cell
        for framework, speed in (("jax", 123456.0), ("torch", 98765.0)):
            speed *= 1.1 if campaign == "b" else 1.0
            common = {"throughput": speed, "step_time_p50": 1234.5, "step_time_p95": 2345.6,
                      "step_time_p99": 3456.7, "test_accuracy": 0.987654}
            for use_case, model in ((1, "mobilenet_v3_small"), (5, "mobilenet_v3_small"), (3, "transformer"),
                                    (4, "transformer"), (2, "transformer"), (1, "transformer")):
                write_cell(tmp_path, framework, use_case, 1024, {
                    **common, "world_size": 16 if use_case in (2, 4) else 1,
                    "throughput_per_device": speed / 16, "per_sample_grads_vectorized_time_p50": 123.4,
                    "per_sample_grads_loop_time_p50": 12345.6, "vectorization_speedup": 100.04},
                    benchmark="imagenet" if model.startswith("mobilenet") else "nlp", model=model,
                    curves=[(0.5, 1234.5), (0.987, 2345.6)], campaign=campaign)
    stdout = collect(tmp_path)
    for title in ("Training", "Data parallel", "Per-sample gradients (DP-SGD)", "Inference"):
        table = table_lines(stdout, f"{title} on CPU X")
        assert len(table) >= 6 and "x [" in table[4]  # caption, 2 header lines, dashes, a cell: JAX, PyTorch
        assert max(len(line) for line in table) <= TERMINAL_WIDTH, "\n".join(table)


def test_a_header_with_a_line_break_is_printed_on_two_lines():
    text = format_table(["model", "step p50\nms"], [["mlp", "16.0"]])
    assert text.splitlines() == ["       step p50", "model  ms", "-----  --------", "mlp    16.0"]
