#!/bin/bash
# paired_digits_1.sh: JAX and PyTorch, paired, for benchmark digits, use case 1 (training on one GPU), on CPUs: this plan asks Slurm for no GPU.
# One Slurm array job of packs: each array task runs up to 2 JAX/PyTorch cell pairs of campaign <CAMPAIGN> in one
# allocation, 1 side by side (one Slurm task, a slot, each). Each pair runs 5 trial(s) of both frameworks
# alternately in its slot (JAX then PyTorch in even trials, the other way round in odd ones), each run a job step of its own
# (srun --exact: its own CPUs), so that its measurement is as isolated as in a job of its own.
# Produced by `python main.py --benchmark digits --use-case 1 --trials 5 --paired --dry-run --results-dir <TMP>/r --scripts-dir <TMP>/s`
# (git <COMMIT>, <TIME>). Re-running that command rewrites this file.
#
#   pack   cell pair
#   0      mlp batch 16 fp32  (digits-uc1-mlp-bs16-fp32-3873175f)
#   0      mlp batch 32 fp32  (digits-uc1-mlp-bs32-fp32-834211e5)
#
# What each task asks Slurm for, and why:
#   --time=03:00:00: estimated from the longest cell, mlp batch 16 fp32 (2,420 steps): 5 min to start (imports, data,
#     compilation), then each step's 67.2 MFLOP at 20% of the 100 GFLOP/s peak taken for 2 CPUs (50 GFLOP/s each), at
#     least 10 ms (0.01 s a step), for each of the task's 20 runs; times 1.5, plus the 180 s before the limit that
#     Slurm's warning may come, rounded up to a quarter hour.
#   --pack 2, chosen by the plan: each cell's estimated work is shorter than its start-up (5 min estimated), so its
#     pairs share jobs, about 2 hours of the estimate (54 min a pair); --pack 0 gives a job per pair.
#   --pack 2: 2 pairs in 1 job of up to 2 pairs (--pack N), instead of a job each; --ntasks=1: one slot, the pairs one
#     after another; each run a job step of its own, srun --exact.
#
#SBATCH --job-name=paired_digits_1
#SBATCH --array=0-0
#SBATCH --output=<TMP>/r/<CAMPAIGN>/logs/paired_digits_1_%A_%a.out
#SBATCH --time=03:00:00
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --signal=B:TERM@120
#SBATCH --open-mode=append
#SBATCH --no-requeue
set -eo pipefail

set -u
export PYTHONPATH=<REPO>
# The task's CPU count (the profile's cpus_per_task where Slurm sets none). Each backend binds its process to
# that many CPUs before its framework starts (bench_contract.run.cpu_binding), so that both frameworks use the
# same cores: XLA ignores OMP_NUM_THREADS and takes a thread per CPU it may use, and more threads than cores
# would make the timings measure that. The rows record the CPUs (bound_cpus, bound_cpu_list) and threads.
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-2}"

# JAX's runs: `run_jax SPECS_FILE LINE` enters its own environment and execs its backend. The driver
# below starts each run as a process of its own, so nothing of one run's environment is left for the next.
run_jax() {
    source <REPO>/.envs/jax/bin/activate
    # The rows record which environment: "locked", "site: <python>" or "container: <image>" (environment_kind).
    export BENCH_ENVIRONMENT_KIND=locked
    # JAX would otherwise reserve most of the GPU's memory up front, and peak memory would mean nothing.
    export XLA_PYTHON_CLIENT_PREALLOCATE=false
    # CUDA then numbers GPUs as NVML does (by PCI bus id), so the GPU details and energy read through NVML are those of the GPU the framework uses.
    export CUDA_DEVICE_ORDER=PCI_BUS_ID
    exec python -m jax_backend.run "$@"
}

# PyTorch's runs: `run_torch SPECS_FILE LINE` enters its own environment and execs its backend. The driver
# below starts each run as a process of its own, so nothing of one run's environment is left for the next.
run_torch() {
    source <REPO>/.envs/torch/bin/activate
    # The rows record which environment: "locked", "site: <python>" or "container: <image>" (environment_kind).
    export BENCH_ENVIRONMENT_KIND=locked
    # CUDA then numbers GPUs as NVML does (by PCI bus id), so the GPU details and energy read through NVML are those of the GPU the framework uses.
    export CUDA_DEVICE_ORDER=PCI_BUS_ID
    exec python -m torch_backend.run "$@"
}

# Pair i's trial t is line i*5+t+1 of each framework's specs file (`sed -n 3p FILE` shows line 3).
# Pack p holds pairs p*2 to p*2+1 (of 2).
# An array larger than the cluster's MaxArraySize is submitted in parts: `sbatch --array=0-K THIS_SCRIPT OFFSET`,
# and task i of that part runs pack OFFSET+i. Submitted whole, OFFSET is 0.
index=$(( ${1:-0} + SLURM_ARRAY_TASK_ID ))

# The driver (bench_contract.run.driver) runs the pair's trials, JAX then PyTorch in even trials and the other way round
# in odd ones; a failed run does not stop the others, and the task then ends failed. It becomes this job's process
# (exec), so Slurm's warning signal reaches it: it passes the signal on to the running backend, which writes its
# failure row and exits, and starts no further run (exit 143). It starts each run with this shell's environment as
# it is here (the launch functions exported, the whole saved on file descriptor 3), not with the one it runs in.
export -f run_jax run_torch
exec 3< <(env -0)
# The driver needs Python and the contract only: it runs in JAX's environment, outside any container.
source <REPO>/.envs/jax/bin/activate
# Each run is `srun --exact --ntasks=1 --nodes=1 --job-name=FRAMEWORK:CELL:tTRIAL --cpus-per-task=2`, a job step
# of its own: `sacct -j JOB` lists one step per run. Where the job's memory is per node, each step also asks for its
# slot's share (SLURM_MEM_PER_NODE over the slots on the node), so that no step waits for another's memory. The
# driver records each run's slot, start and end in <TMP>/r/<CAMPAIGN>/packs/ (which cells ran beside which), and does
# not run again a run whose result is there, so that `resubmit` of a pack stopped midway runs only the runs it had not
# finished.
exec python -m bench_contract.run.driver --pair "$index" --trials 5 \
    --pack-size 2 --pair-count 2 --slots 1 \
    --step-option=--cpus-per-task=2 \
    --pack-log <TMP>/r/<CAMPAIGN>/packs/"pack${index}_${SLURM_JOB_ID}.jsonl" \
    --run jax run_jax <TMP>/r/<CAMPAIGN>/specs/jax.jsonl \
    --run torch run_torch <TMP>/r/<CAMPAIGN>/specs/torch.jsonl \
    --environment-fd 3
