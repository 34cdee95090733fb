"""bench/gpu_summary.py, the summaries of scripts/gpu_speed.sh and gpu_dpsgd.sh: their tables
from made-up frames, the steps' outcomes from a log as the scripts write it, the overhead against the GPU's 3%, and
the DP-SGD checks."""

import json
import math

import pandas as pd

from bench.gpu_summary import (beside_published, dp_sgd_checks, dp_sgd_table, overhead_lines, read_probes, rows_table,
                               speed_summary, step_lines)
from bench.overhead_probe import MARKER


EAGER = json.dumps({"torch_compile": False, "torch_compile_mode": "default", "channels_last": False})


def settings_json(**changes) -> str:
    """A row's `settings` column: the eager settings as JSON, with `changes`."""
    return json.dumps(json.loads(EAGER) | changes)


def frame(**changes) -> pd.DataFrame:
    row = {"use_case": 5, "model": "resnet50", "batch_size": 128, "precision": "fp32", "settings": EAGER,
           "jax_throughput": 12000.0, "torch_throughput": 6000.0, "speedup": 2.0, "speedup_ci_low": 1.9,
           "speedup_ci_high": 2.1, "runs_jax_torch": "3/3 paired", "jax_compile_time": 21.04,
           "torch_compile_time": math.nan, "comparable": "yes", "device_model": "NVIDIA H200"}
    rows = [row | changes] if not isinstance(changes.get("rows"), list) else [row | r for r in changes["rows"]]
    return pd.DataFrame(rows)


def test_a_row_shows_both_throughputs_the_interval_and_the_compile_times():
    (line,) = rows_table(frame())[2:]
    assert line == ("| inference | resnet50 | 128 | fp32 | eager | 12,000 | 6,000 | 2.00x [1.90, 2.10] | 3/3 paired | "
                    "21.0 / n/a | yes |")


def test_a_row_without_an_interval_says_so_and_names_its_pytorch_mode():
    (line,) = rows_table(frame(speedup_ci_low=math.nan, speedup_ci_high=math.nan,
                               settings=settings_json(torch_compile=True, torch_compile_mode="reduce-overhead")))[2:]
    assert "| compiled (reduce-overhead) |" in line and "| 2.00x [n/a (runs 3/3)] |" in line
    (line,) = rows_table(frame(settings=settings_json(torch_compile=True, channels_last=True)))[2:]
    assert "| compiled, channels_last |" in line


def test_only_eager_inference_at_batch_128_stands_beside_the_seed():
    rows = frame(rows=[{}, {"settings": settings_json(torch_compile=True)},
                       {"settings": settings_json(channels_last=True)}, {"batch_size": 64}, {"use_case": 1},
                       {"model": "vit_b_16", "jax_throughput": 600.0, "torch_throughput": 1200.0, "speedup": 0.5}])
    lines = [line for line in beside_published(rows) if line.startswith("| resnet50") or line.startswith("| vit")]
    assert lines == ["| resnet50 | fp32 | 12,000 | 11,739 | 6,000 | 5,915 | 2.00x [1.90, 2.10] | 1.98x |",
                     "| vit_b_16 | fp32 | 600 | 530 | 1,200 | 946 | 0.50x [1.90, 2.10] | 0.56x |"]


def test_a_row_that_is_not_comparable_shows_no_speed_up_in_either_table():
    """The certificate's rule, as in the product's tables: a speed-up of unlike sides is never printed."""
    unlike = frame(comparable="no: bf16 on one side only")
    (line,) = rows_table(unlike)[2:]
    assert "2.00x" not in line and "| not comparable |" in line
    assert any("| not comparable |" in line for line in beside_published(unlike))


def test_no_eager_row_is_said_not_left_as_an_empty_table():
    compiled = frame(settings=settings_json(torch_compile=True))
    assert any("no inference row" in line for line in beside_published(compiled))


def probe_output(harness_ms, bare_ms) -> str:
    data = {"framework": "torch", "mode": "eager", "path": "run_inference", "model": "resnet50", "variant": "full",
            "batch_size": 128, "timed_steps": 50, "device": "gpu", "version": "2.11.0", "harness_ms": harness_ms,
            "bare_ms": bare_ms}
    return "chatter\n" + MARKER + json.dumps(data) + "\n"


def test_the_overhead_is_held_to_three_percent_either_way(tmp_path):
    (tmp_path / "torch_inference.out").write_text(probe_output([10.25, 10.3, 10.2], [10.0, 10.0, 10.0]))
    (tmp_path / "torch_training.out").write_text(probe_output([10.35, 10.4, 10.3], [10.0, 10.0, 10.0]))
    (tmp_path / "jax_inference.out").write_text("Traceback: CUDA error\n")
    probes, problems = read_probes(tmp_path)
    inference, training = overhead_lines(probes)[2:]
    assert inference.endswith("| +2.50% | met |") and training.endswith("| +3.50% | missed by 0.50% |")
    assert problems == ["jax_inference.out: the overhead probe printed no result line"]


def test_the_steps_outcomes_are_read_from_the_log_and_the_commands_left_out(tmp_path):
    log = tmp_path / "steps.log"
    log.write_text("== a call began at 2026-11-28T10:00:00 on gpu1\n== 10:00:00 inference_bf16: python main.py ...\n"
                   "progress: training\n"
                   "== inference_bf16: finished in 120 s\n== overhead: stopped (exit 124) after 200 s; the next call "
                   "goes on with it\n== training_nlp: not run (the time is up)\n== cuda_graphs: finished in an "
                   "earlier call\n")
    assert step_lines(log) == ["- a call began at 2026-11-28T10:00:00 on gpu1", "- inference_bf16: finished in 120 s",
                               "- overhead: stopped (exit 124) after 200 s; the next call goes on with it",
                               "- training_nlp: not run (the time is up)", "- cuda_graphs: finished in an earlier call"]


def test_a_work_folder_without_rows_says_so(tmp_path):
    text, rows = speed_summary(tmp_path)
    assert rows == 0 and "No comparison row was measured." in text and "(no steps' log)" in text


def test_a_dp_sgd_row_shows_each_sides_cost_over_sgd_its_vectorisation_and_epsilon():
    dp = frame(use_case=3, batch_size=256, model="cnn", settings=settings_json(dp_engine="opacus"), jax_sgd_cost=3.0,
               torch_sgd_cost=8.0,
               jax_vectorization_speedup=40.0, torch_vectorization_speedup=12.5, privacy_epsilon=7.114)
    (line,) = dp_sgd_table(pd.concat([frame(), dp]))[2:]  # the inference row is not a DP-SGD row
    assert line == ("| cnn | 256 | eager, opacus | 12,000 | 6,000 | 2.00x [1.90, 2.10] | 3.0x / 8.0x | 40.0x / 12.5x "
                    "| 7.11 |")


def test_the_dp_sgd_checks_name_a_cell_without_epsilon_and_one_that_recompiled():
    def rows(cell, metric, value):
        return {"use_case": 3, "cell_id": cell, "metric": metric, "value": value}

    merged = pd.DataFrame([rows("a", "privacy_epsilon", 7.1), rows("a", "recompilations_timed", 0.0),
                           rows("b", "privacy_epsilon", math.nan), rows("c", "recompilations_timed", 2.0),
                           rows("c", "privacy_epsilon", 7.1), {**rows("d", "throughput", 1.0), "use_case": 1}])
    epsilon, recompiled = dp_sgd_checks(merged)
    assert epsilon == "- epsilon on every DP-SGD cell: no, missing on b"
    assert recompiled == "- recompilations in timed steps: c"
    assert dp_sgd_checks(merged[merged["cell_id"] == "a"]) == ["- epsilon on every DP-SGD cell: yes",
                                                              "- recompilations in timed steps: none"]


def test_what_the_script_concluded_is_kept_beside_the_steps(tmp_path):
    log = tmp_path / "steps.log"
    log.write_text("== jax_compile: stopped at its limit of 150 s\n== JAX's DP-SGD step did not compile within "
                   "150 s: the campaigns run PyTorch alone\n== 10:00:00 dp_sgd: python main.py\n")
    assert step_lines(log) == ["- jax_compile: stopped at its limit of 150 s",
                               "- JAX's DP-SGD step did not compile within 150 s: the campaigns run PyTorch alone"]
