#!/bin/bash
# paired_digits_1.sh: JAX and PyTorch, paired, for benchmark digits, use case 1 (training on one GPU), on CPUs: this plan asks Slurm for no GPU.
# One Slurm array job, one array task per JAX/PyTorch cell pair of campaign <CAMPAIGN>. Each task runs
# 5 trial(s) of both frameworks alternately on its one node (JAX then PyTorch in even trials, the other way round in odd ones),
# each in its own environment and its own process, so that drift of the node falls on both alike.
# Produced by `python main.py --benchmark digits --use-case 1 --trials 5 --paired --dry-run --results-dir <TMP>/r --scripts-dir <TMP>/s`
# (git <COMMIT>, <TIME>). Re-running that command rewrites this file.
#
#   index  cell pair
#   0      mlp batch 16 fp32  (digits-uc1-mlp-bs16-fp32-3873175f)
#   1      mlp batch 32 fp32  (digits-uc1-mlp-bs32-fp32-834211e5)
#
# What each task asks Slurm for, and why:
#   --time=01:30:00: estimated from the longest cell, mlp batch 16 fp32 (2,420 steps): 5 min to start (imports, data,
#     compilation), then each step's 67.2 MFLOP at 20% of the 100 GFLOP/s peak taken for 2 CPUs (50 GFLOP/s each), at
#     least 10 ms (0.01 s a step), for each of the task's 10 runs; times 1.5, plus the 180 s before the limit that
#     Slurm's warning may come, rounded up to a quarter hour.
#
#SBATCH --job-name=paired_digits_1
#SBATCH --array=0-1
#SBATCH --output=<TMP>/r/<CAMPAIGN>/logs/paired_digits_1_%A_%a.out
#SBATCH --time=01:30:00
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
# An array larger than the cluster's MaxArraySize is submitted in parts: `sbatch --array=0-K THIS_SCRIPT OFFSET`,
# and task i of that part runs pair OFFSET+i. Submitted whole, OFFSET is 0.
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
exec python -m bench_contract.run.driver --pair "$index" --trials 5 \
    --run jax run_jax <TMP>/r/<CAMPAIGN>/specs/jax.jsonl \
    --run torch run_torch <TMP>/r/<CAMPAIGN>/specs/torch.jsonl \
    --environment-fd 3
