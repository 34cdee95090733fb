#!/usr/bin/env bash
# How fast, on one real GPU (issue 35): JAX against PyTorch eager, compiled and with CUDA graphs, in the product's
# own rows, and the harness against a bare loop.
#
#   bash scripts/gpu_speed.sh                                      # on a GPU machine, full-size models
#   PREVIOUS=gpu_prev/gpu_speed.tar.gz bash scripts/gpu_speed.sh   # go on from an earlier call's results
#   bash scripts/gpu_speed.sh --device cpu --variant tiny          # the rehearsal on a CPU machine
#
# The steps run one at a time, in the order of what the issue needs most, until SECONDS_LEFT (default 330) have
# passed (scripts/gpu_common.sh: the steps, the set-up, going on from PREVIOUS). Every campaign runs 3 paired
# trials a cell (JAX, PyTorch, JAX, ... each in a fresh process), so each row gets its interval. Then collect,
# report and `python -m bench.gpu_summary speed` (summary.md: the numbers beside the published ones, the harness's
# overhead). Everything is packed into $OUT/gpu_speed.tar.gz, the summary beside it (OUT defaults to
# ./gpu_speed_out).
# shellcheck disable=SC2086  # the lists of arguments in variables are split into words on purpose
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
. scripts/gpu_common.sh
gpu_arguments "$@" || exit 2
gpu_measuring_setup gpu_speed || exit 1
mkdir -p "$work/overhead"

campaign() {  # campaign ARGS...: a campaign of paired trials, its results in $work/results
  gpu_campaign results --trials 3 --paired "$@"
}

probe() {  # probe FRAMEWORK MODULE ARGS...: a harness-against-bare-loop probe (bench/overhead_probe.py)
  local python=$jax_python path=inference
  [ "$1" = torch ] && python=$torch_python
  [ "$2" = training_overhead_probe ] && path=training
  echo "env PYTHONPATH=$root $python -m bench.$2 ${*:3} $device > $work/overhead/$1_$path.out"
}

batch=128
precisions=fp32,tf32
samples=4096
if [ "$device" = cpu ]; then  # the rehearsal: no TF32 on a CPU, and batches a CPU runs in seconds
  batch=8 precisions=fp32 samples=256
fi
inference="--benchmark imagenet --use-case 5 --batch-sizes $batch --synthetic-samples $(( 2 * batch ))"
training="--use-case 1 --epochs 1 --precision bf16 --synthetic-samples $samples"
repeats=5

{
  gpu_step inference_bf16 "$(campaign $inference --models resnet50,vit_b_16 --precision bf16 --torch-modes eager,compiled)"
  gpu_step overhead "$(probe jax overhead_probe jax resnet50 $variant imagenet $batch 50 5 $repeats) \
    && $(probe torch overhead_probe torch resnet50 $variant imagenet $batch 50 5 $repeats) \
    && $(probe jax training_overhead_probe jax jit resnet50 $variant imagenet $batch 10 3 $repeats) \
    && $(probe torch training_overhead_probe torch eager resnet50 $variant imagenet $batch 10 3 $repeats)"
  gpu_step cuda_graphs_bf16 "$(campaign $inference --models resnet50,vit_b_16 --precision bf16 --torch-compile --torch-compile-mode reduce-overhead)"
  gpu_step channels_last_bf16 "$(campaign $inference --models resnet50 --precision bf16 --channels-last)"
  gpu_step inference_fp32_tf32 "$(campaign $inference --models resnet50,vit_b_16 --precision $precisions)"
  gpu_step training_resnet50 "$(campaign --benchmark imagenet --models resnet50 --batch-sizes $batch $training --torch-modes eager,compiled)"
  gpu_step training_nlp "$(campaign --benchmark nlp --models transformer $training --torch-modes eager,compiled)"
  gpu_step inference_fp32_tf32_compiled "$(campaign $inference --models resnet50,vit_b_16 --precision $precisions --torch-compile)"
} >> "$work/logs/steps.log" 2>&1

gpu_measuring_end gpu_speed speed results
