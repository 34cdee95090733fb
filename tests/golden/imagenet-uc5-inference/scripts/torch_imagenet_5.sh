#!/bin/bash
# torch_imagenet_5.sh: PyTorch for benchmark imagenet, use case 5 (inference (forward pass, eval mode) on one GPU), on CPUs: this plan asks Slurm for no GPU.
# One Slurm array job, one array task per cell of campaign <CAMPAIGN>.
# Produced by `python main.py --benchmark imagenet --use-case 5 --models resnet50,vit_b_16 --synthetic --dry-run --results-dir <TMP>/r --scripts-dir <TMP>/s`
# (git <COMMIT>, <TIME>). Re-running that command rewrites this file.
#
#   index  cell
#   0      resnet50 batch 1 fp32  (torch-imagenet-uc5-resnet50-bs1-fp32-dacd7610)
#   1      resnet50 batch 8 fp32  (torch-imagenet-uc5-resnet50-bs8-fp32-ce2f0ef2)
#   2      resnet50 batch 32 fp32  (torch-imagenet-uc5-resnet50-bs32-fp32-1e8e4933)
#   3      resnet50 batch 128 fp32  (torch-imagenet-uc5-resnet50-bs128-fp32-5911fab9)
#   4      vit_b_16 batch 1 fp32  (torch-imagenet-uc5-vit_b_16-bs1-fp32-4395d215)
#   5      vit_b_16 batch 8 fp32  (torch-imagenet-uc5-vit_b_16-bs8-fp32-8eb2ef47)
#   6      vit_b_16 batch 32 fp32  (torch-imagenet-uc5-vit_b_16-bs32-fp32-aa53db59)
#   7      vit_b_16 batch 128 fp32  (torch-imagenet-uc5-vit_b_16-bs128-fp32-5d644bb6)
#
# What each task asks Slurm for, and why:
#   --time=05:30:00: estimated from the longest cell, vit_b_16 batch 128 fp32 (55 steps): 5 min to start (imports, data,
#     compilation), then each step's 4.48 TFLOP at 20% of the 100 GFLOP/s peak taken for 2 CPUs (50 GFLOP/s each), at
#     least 10 ms (224 s a step); times 1.5, plus the 180 s before the limit that Slurm's warning may come, rounded up
#     to a quarter hour.
#
#SBATCH --job-name=torch_imagenet_5
#SBATCH --array=0-7
#SBATCH --output=<TMP>/r/<CAMPAIGN>/logs/torch_imagenet_5_%A_%a.out
#SBATCH --time=05:30:00
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --signal=B:TERM@120
#SBATCH --open-mode=append
#SBATCH --no-requeue
set -eo pipefail

set -u
# The PyTorch environment built from its lock file (its one build), and no other.
source <REPO>/.envs/torch/bin/activate
# The rows record which: "locked", "site: <python>" or "container: <image>" (environment_kind).
export BENCH_ENVIRONMENT_KIND=locked
export PYTHONPATH=<REPO>
# The task's CPU count (the profile's cpus_per_task where Slurm sets none). Each backend binds its process to
# that many CPUs before its framework starts (bench_contract.run.cpu_binding), so that both frameworks use the
# same cores: XLA ignores OMP_NUM_THREADS and takes a thread per CPU it may use, and more threads than cores
# would make the timings measure that. The rows record the CPUs (bound_cpus, bound_cpu_list) and threads.
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-2}"
# CUDA then numbers GPUs as NVML does (by PCI bus id), so the GPU details and energy read through NVML are those of the GPU the framework uses.
export CUDA_DEVICE_ORDER=PCI_BUS_ID

# Cell i's job spec is line i+1 of the specs file (one JSON object per line: `sed -n 3p FILE` shows cell 2's).
specs=<TMP>/r/<CAMPAIGN>/specs/torch.jsonl
# An array larger than the cluster's MaxArraySize is submitted in parts: `sbatch --array=0-K THIS_SCRIPT OFFSET`,
# and task i of that part runs cell OFFSET+i. Submitted whole, OFFSET is 0.
index=$(( ${1:-0} + SLURM_ARRAY_TASK_ID ))
echo "torch cell $index (array task ${SLURM_ARRAY_TASK_ID}) on $(hostname): line $((index + 1)) of $specs"
exec python -m torch_backend.run "$specs" "$index"
