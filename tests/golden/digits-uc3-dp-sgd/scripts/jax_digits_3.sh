#!/bin/bash
# jax_digits_3.sh: JAX for benchmark digits, use case 3 (per-sample gradients (a DP-SGD step) on one GPU), on CPUs: this plan asks Slurm for no GPU.
# One Slurm array job, one array task per cell of campaign <CAMPAIGN>.
# Produced by `python main.py --benchmark digits --use-case 3 --noise-multiplier 1 --clip-norm 1 --dry-run --results-dir <TMP>/r --scripts-dir <TMP>/s`
# (git <COMMIT>, <TIME>). Re-running that command rewrites this file.
#
#   index  cell
#   0      mlp batch 16 fp32  (jax-digits-uc3-mlp-bs16-fp32-0651f353)
#   1      mlp batch 32 fp32  (jax-digits-uc3-mlp-bs32-fp32-fc11d672)
#
# What each task asks Slurm for, and why:
#   --time=00:30:00: estimated from the longest cell, mlp batch 16 fp32 (2,420 steps): 5 min to start (imports, data,
#     compilation), then each step's 134 MFLOP at 20% of the 100 GFLOP/s peak taken for 2 CPUs (50 GFLOP/s each), at
#     least 10 ms (0.01 s a step); times 1.5, plus the 180 s before the limit that Slurm's warning may come, rounded up
#     to a quarter hour.
#
#SBATCH --job-name=jax_digits_3
#SBATCH --array=0-1
#SBATCH --output=<TMP>/r/<CAMPAIGN>/logs/jax_digits_3_%A_%a.out
#SBATCH --time=00:30:00
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --signal=B:TERM@120
#SBATCH --open-mode=append
#SBATCH --no-requeue
set -eo pipefail

set -u
# The JAX environment built from its lock file (its cpu build), and no other.
source <REPO>/.envs/jax/bin/activate
# The rows record which: "locked", "site: <python>" or "container: <image>" (environment_kind).
export BENCH_ENVIRONMENT_KIND=locked
export PYTHONPATH=<REPO>
# The task's CPU count (the profile's cpus_per_task where Slurm sets none). Each backend binds its process to
# that many CPUs before its framework starts (bench_contract.run.cpu_binding), so that both frameworks use the
# same cores: XLA ignores OMP_NUM_THREADS and takes a thread per CPU it may use, and more threads than cores
# would make the timings measure that. The rows record the CPUs (bound_cpus, bound_cpu_list) and threads.
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-2}"
# JAX would otherwise reserve most of the GPU's memory up front, and peak memory would mean nothing.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# CUDA then numbers GPUs as NVML does (by PCI bus id), so the GPU details and energy read through NVML are those of the GPU the framework uses.
export CUDA_DEVICE_ORDER=PCI_BUS_ID

# Cell i's job spec is line i+1 of the specs file (one JSON object per line: `sed -n 3p FILE` shows cell 2's).
specs=<TMP>/r/<CAMPAIGN>/specs/jax.jsonl
# An array larger than the cluster's MaxArraySize is submitted in parts: `sbatch --array=0-K THIS_SCRIPT OFFSET`,
# and task i of that part runs cell OFFSET+i. Submitted whole, OFFSET is 0.
index=$(( ${1:-0} + SLURM_ARRAY_TASK_ID ))
echo "jax cell $index (array task ${SLURM_ARRAY_TASK_ID}) on $(hostname): line $((index + 1)) of $specs"
exec python -m jax_backend.run "$specs" "$index"
