"""What a task asks Slurm for where no profile says (orchestrator.plan.discovery, orchestrator.plan.sizing): each GPU's
share of a node's CPUs and memory as `sinfo` shows them (a fake one here, at the subprocess boundary), a time limit
estimated from the cells' work and capped by the partition's, an array throttle by default, and the script's header
saying where each came from; the profile's and the command line's values win."""

import re

from helpers import fake_slurm_site, run_cli

from orchestrator.plan import matrix, sizing
from orchestrator.plan.discovery import NodeShape, gpu_partitions, node_shapes
from orchestrator.plan.profile import ClusterProfile, slurm_seconds
from orchestrator.plan.settings import RunSettings

# One 8-GPU node of partition gpu: 112 CPUs, about 1 TB, H100s, jobs of at most two days; a CPU partition beside it.
EIGHT_GPUS = "cpu*|(null)|64|256000|1-00:00:00\ngpu|gpu:h100:8(S:0-1)|112|1000000|2-00:00:00\n"


def sinfo(lines: str) -> str:
    """A fake sinfo's body: `lines` for the plan's query (its format asks for %G), the partitions alone for the
    partition check's (%P)."""
    return (f"if [[ \"$*\" == *%G* ]]; then printf '{lines}'; "
            f"else printf '{lines}' | cut -d'|' -f1; fi\n")


def plan(tmp_path, *args, lines=EIGHT_GPUS):
    """A dry run of `args` without a profile on a site whose sinfo answers `lines`; (process, {script name: text})."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    env, _, _ = fake_slurm_site(tmp_path, {"sinfo": sinfo(lines)})
    proc = run_cli(*args, "--dry-run", "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"),
                   env=env)
    scripts = {p.name: p.read_text() for p in (tmp_path / "s").glob("*.sh")} if (tmp_path / "s").exists() else {}
    return proc, scripts


def sbatch_values(script: str) -> dict[str, str]:
    return dict(line.removeprefix("#SBATCH --").partition("=")[::2] for line in script.splitlines()
                if line.startswith("#SBATCH --"))


def header(script: str) -> str:
    """The header's lines on what each task asks for, joined into one text."""
    part = script.split("# What each task asks Slurm for, and why:\n", 1)[1].split("\n#\n", 1)[0]
    return " ".join(line.removeprefix("#").strip() for line in part.splitlines())


def test_without_a_profile_a_task_asks_for_its_gpus_share_of_an_8_gpu_node_and_an_estimated_time(tmp_path):
    proc, scripts = plan(tmp_path, "--benchmark", "imagenet", "--use-case", "1", "--models", "resnet50",
                         "--synthetic", "--epochs", "100")
    assert proc.returncode == 0, proc.stderr
    assert ("14 CPUs and 115G of memory per GPU (one GPU's share of a node; sinfo: 8 GPUs (h100), 112 CPUs and "
            "1000000 MB per node)") in proc.stdout
    for script in scripts.values():
        asked = sbatch_values(script)
        # 112 CPUs / 8 GPUs; 1,000,000 MB / 8 = 125,000 MB, less 5%, in whole GB (1024 MB): 115G.
        assert (asked["partition"], asked["gres"], asked["cpus-per-task"], asked["mem-per-gpu"]) == (
            "gpu", "gpu:1", "14", "115G")
        assert "mem" not in asked
        # ResNet-50, batch 64: 3 x 8.3 GFLOP x 64 = 1.59 TFLOP a step, at 20% of the H100's 67 TFLOP/s fp32:
        # 0.119 s; 100 epochs of the 1,640 synthetic training samples (26 steps) and 50 timed steps: 2,650 steps,
        # 315 s; with 5 minutes to start, times 1.5, plus the warning's 180 s: 1,102 s, so half an hour.
        assert asked["time"] == "00:30:00"
        said = header(script)
        assert ("--cpus-per-task=14 and --mem-per-gpu=115G: each GPU's share of a node of partition gpu (sinfo: "
                "8 GPUs (h100), 112 CPUs and 1000000 MB per node" in said)
        assert ("--time=00:30:00: estimated from the longest cell, resnet50 batch 64 fp32 (2,650 steps)" in said
                and "20% of the h100's 67 TFLOP/s fp32 peak" in said and "partition gpu's limit is 2-00:00:00" in said)


def test_more_work_asks_for_more_time_and_the_partitions_limit_caps_it(tmp_path):
    proc, scripts = plan(tmp_path, "--benchmark", "imagenet", "--use-case", "1", "--models", "resnet50",
                         "--synthetic", "--epochs", "1000",
                         lines=EIGHT_GPUS.replace("2-00:00:00", "01:00:00"))
    assert proc.returncode == 0, proc.stderr
    script = scripts["jax_imagenet_1.sh"]
    # 26,050 steps of 0.119 s: 3,100 s, so 1:30:00 with the start, the margin and the warning; the partition's hour.
    assert sbatch_values(script)["time"] == "01:00:00"
    assert "cut to partition gpu's limit (01:00:00), 01:30:00 estimated" in header(script)
    assert ("warning: the estimated time limit, 01:30:00, is longer than partition gpu's 01:00:00: the jobs ask for "
            "01:00:00") in proc.stdout


def test_the_profiles_and_the_command_lines_values_win_over_sinfo_and_the_estimate(tmp_path):
    env, _, profile = fake_slurm_site(tmp_path, {"sinfo": sinfo(EIGHT_GPUS)},
                                      'partition = "gpu"\ngpus_per_task = 1\njax_recipe = "cuda12"\n'
                                      'cpus_per_task = 6\nmem_per_gpu = "40G"\ntime_limit = "03:00:00"\n'
                                      'array_parallelism = 1\n')
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile), "--dry-run",
                   "--results-dir", str(tmp_path / "r"), "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr
    script = (tmp_path / "s" / "jax_digits_1.sh").read_text()
    asked = sbatch_values(script)
    assert (asked["cpus-per-task"], asked["mem-per-gpu"], asked["time"], asked["array"]) == ("6", "40G", "03:00:00",
                                                                                             "0-1%1")
    said = header(script)
    assert "sinfo" not in said and "--time=03:00:00: the profile's time_limit, or --time." in said
    assert "at most 1 of the 2 tasks run at once (the profile's array_parallelism" in said
    proc = run_cli("--benchmark", "digits", "--use-case", "1", "--profile", str(profile), "--dry-run", "--mem", "64G",
                   "--time", "45", "--new-campaign", "--results-dir", str(tmp_path / "r"),
                   "--scripts-dir", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr
    asked = sbatch_values((tmp_path / "s" / "jax_digits_1.sh").read_text())
    assert (asked["mem"], asked["time"]) == ("64G", "45") and "mem-per-gpu" not in asked  # one memory request


def test_an_array_of_more_than_16_tasks_runs_16_at_once_unless_told(tmp_path):
    batches = ",".join(str(b) for b in range(1, 21))
    proc, scripts = plan(tmp_path, "--benchmark", "digits", "--use-case", "1", "--batch-sizes", batches)
    assert proc.returncode == 0, proc.stderr
    script = scripts["jax_digits_1.sh"]
    assert sbatch_values(script)["array"] == "0-19%16"
    assert ("--array=...%16: at most 16 of the 20 tasks run at once (by default, where an array holds more than 16 "
            "tasks and the profile's array_parallelism sets none)") in header(script)
    proc, scripts = plan(tmp_path / "two", "--benchmark", "digits", "--use-case", "1", "--batch-sizes", "16,32")
    assert sbatch_values(scripts["jax_digits_1.sh"])["array"] == "0-1"  # nothing to throttle
    assert "%" not in header(scripts["jax_digits_1.sh"]).split("--array", 1)[-1][:3]


def test_a_tiny_model_on_a_gpu_is_warned_of_with_the_fix(tmp_path):
    proc, _ = plan(tmp_path, "--benchmark", "digits", "--use-case", "1")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stdout.splitlines() if "stays mostly idle" in line]
    assert warning == ["warning: mlp at batch 16, 32: on a GPU each step takes under 1 ms of its peak, so each task "
                       "holds a whole GPU that stays mostly idle; run such cells on CPUs (--gpus-per-task 0) or at "
                       "larger batches (and pack short cells: --paired --pack N runs N pairs one after another in one "
                       "allocation, each run on a GPU of its own, so the queue and the start-up are paid once for N)"]
    proc, _ = plan(tmp_path / "cpu", "--benchmark", "digits", "--use-case", "1", "--gpus-per-task", "0")
    assert proc.returncode == 0 and "stays mostly idle" not in proc.stdout


def test_sinfo_gives_the_smallest_share_of_a_partitions_node_shapes():
    text = ("gpu*|gpu:a100:4(S:0-1)|64|512000|1-00:00:00\ngpu*|gpu:8|96|1000000|1-00:00:00\n"
            "big|gpu:2|16|64000|infinite\nold|gpu:4\n")
    shapes = node_shapes(text)
    assert sorted(shapes) == ["big", "gpu"]  # a line without CPUs and memory (an older format) gives no shape
    gpu = shapes["gpu"]
    assert (gpu.cpus_per_gpu, gpu.memory_mb_share, gpu.memory_per_gpu, gpu.gpu_type, gpu.max_time_s) == (
        12, 125000, "115G", "a100", 86400)
    assert gpu.said() == ("sinfo: 2 shapes of GPU (a100) nodes, the smallest shares of which are taken, 12 CPUs and "
                          "125000 MB per GPU")
    assert shapes["big"].max_time_s is None and shapes["big"].memory_per_gpu == "29G"
    assert gpu_partitions(text) == [("big", False, 2), ("gpu", True, 8), ("old", False, 4)]


def test_more_gpus_per_task_get_as_many_shares_of_cpus(tmp_path):
    proc, scripts = plan(tmp_path, "--benchmark", "digits", "--use-case", "1", "--gpus-per-task", "2")
    assert proc.returncode == 0, proc.stderr
    asked = sbatch_values(scripts["jax_digits_1.sh"])
    assert (asked["gres"], asked["cpus-per-task"], asked["mem-per-gpu"]) == ("gpu:2", "28", "115G")


def test_the_estimate_counts_a_paired_tasks_runs_and_a_gpu_of_unknown_type_at_the_slowest_peak():
    node = NodeShape("gpu", 8, 112, 1000000, 14, 125000)  # untyped GRES
    profile = ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12")
    cells = matrix.expand("imagenet", 1, ["jax"], ["resnet50"], [64], [], RunSettings(data_source="synthetic"))
    work = sizing.estimate(cells[0], profile, node)
    assert work.peak == sizing.SLOWEST_GPU_PEAK and "a GPU whose type sinfo does not name" in work.peak_said
    one, _, _ = sizing.time_limit(profile, cells, node)
    paired = matrix.expand("imagenet", 1, [], ["resnet50"], [64], [],
                           RunSettings(data_source="synthetic", trials=5, paired=True))
    five, said, _ = sizing.time_limit(profile, paired, node)
    assert slurm_seconds(five) > 5 * slurm_seconds(one) and "for each of the task's 10 runs" in said


def test_a_time_limit_is_written_as_slurm_reads_it():
    assert [sizing.slurm_time(s) for s in (900, 3600 * 25 + 60)] == ["00:15:00", "1-01:01:00"]
    assert re.fullmatch(r"[\d.]+ TFLOP", sizing.flops_words(1.59e12))


def test_pack_slots_beyond_a_node_of_the_partition_are_refused_at_plan_time_with_the_most_that_fit(tmp_path):
    # Each slot is a task of one GPU and its 14 CPUs (112 / 8): 8 fit the 8-GPU node, 9 do not.
    args = ("--benchmark", "digits", "--use-case", "1", "--paired", "--pack", "4")
    proc, scripts = plan(tmp_path / "nine", *args, "--pack-slots", "9")
    assert proc.returncode == 2 and not scripts
    assert proc.stderr.strip() == (
        "error: --pack-slots 9 asks one node of partition gpu for 9 slots of 14 CPUs and 1 GPU, but its nodes have "
        "112 CPUs and 8 GPUs (sinfo): ask for at most 8, or spread them over more nodes (--pack-nodes)")
    proc, scripts = plan(tmp_path / "eight", *args, "--pack-slots", "8")
    assert proc.returncode == 0, proc.stderr
    assert sbatch_values(scripts["paired_digits_1.sh"])["ntasks-per-node"] == "8"
    # Spread over two nodes, 16 slots are 8 on each: they fit; 18 over two are 9 on each, and do not.
    proc, scripts = plan(tmp_path / "sixteen", *args, "--pack-slots", "16", "--pack-nodes", "2")
    assert proc.returncode == 0, proc.stderr
    values = sbatch_values(scripts["paired_digits_1.sh"])
    assert (values["nodes"], values["ntasks-per-node"]) == ("2", "8")
    proc, scripts = plan(tmp_path / "eighteen", *args, "--pack-slots", "18", "--pack-nodes", "2")
    assert proc.returncode == 2 and not scripts
    assert "asks each of 2 nodes of partition gpu for 9 slots" in proc.stderr and "at most 16" in proc.stderr


def paired_digits(batch_sizes, **settings):
    return matrix.expand("digits", 1, [], ["mlp"], batch_sizes, [], RunSettings(paired=True, **settings))


def test_the_plan_packs_short_pairs_into_jobs_of_about_two_hours_of_the_estimate_evened_out():
    """Each digits pair is about 10 min of the estimate (two runs of 5 min start-up and seconds of work): 8 pairs
    fit one job of 2 hours; 12 pairs need two (at most 11 a job), evened out to 6 and 6, not 11 and 1."""
    profile = ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12")
    cells = paired_digits([8 + i for i in range(8)])
    pair_s = 2 * max(sizing.estimate(cell, profile, None).seconds for cell in cells)
    assert 2 * sizing.STARTUP_S <= pair_s < sizing.PACK_S / 11  # so that 11 pairs fit one pack
    pack, said = sizing.default_pack(profile, cells, None)
    assert pack == 8 and "--pack 8, chosen by the plan" in said and "about 2 hours of the estimate" in said
    pack, _ = sizing.default_pack(profile, paired_digits([8 + i for i in range(12)]), None)
    assert pack == 6


def test_the_plans_pack_fits_the_time_limit_and_is_none_where_it_would_hold_one_pair():
    """A time limit of 1 h holds (3600 s less the warning's time) / 1.5 of the estimate: 3 pairs of about 10 min;
    20 min hold one pair, so each pair keeps its own job; with no limit of its own, the partition's holds."""
    cells = paired_digits([8 + i for i in range(8)])
    hour = ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12", time_limit="01:00:00")
    pack, said = sizing.default_pack(hour, cells, None)
    assert pack == 3 and "as many as the time limit holds" in said  # 8 pairs: three jobs of 3, 3 and 2
    short = ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12", time_limit="00:20:00")
    assert sizing.default_pack(short, cells, None) == (0, "")
    partition = NodeShape("gpu", 8, 112, 1000000, 14, 125000, max_time_s=3600, max_time="01:00:00")
    assert sizing.default_pack(ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12"), cells,
                               partition)[0] == 3


def test_the_plan_does_not_pack_long_cells_single_frameworks_or_trials_auto():
    profile = ClusterProfile(partition="gpu", gpus_per_task=1, jax_recipe="cuda12")
    # ResNet-50 at batch 64 on a GPU of unknown type, 20 epochs of the synthetic split: more work than start-up,
    # though four such pairs would fit the 2 hours of a pack.
    long = matrix.expand("imagenet", 1, [], ["resnet50"], [64, 65], [],
                         RunSettings(data_source="synthetic", epochs=20, paired=True))
    work = sizing.estimate(long[0], profile, None).seconds
    assert sizing.STARTUP_S <= work - sizing.STARTUP_S and 4 * 2 * work < sizing.PACK_S
    assert sizing.default_pack(profile, long, None) == (0, "")
    unpaired = matrix.expand("digits", 1, [], ["mlp"], [8, 16, 32], [], RunSettings())
    assert sizing.default_pack(profile, unpaired, None) == (0, "")
    auto = paired_digits([8, 16, 32], trials=10, target_interval=0.02)
    assert sizing.default_pack(profile, auto, None) == (0, "")
