#!/usr/bin/env bash
# DP-SGD on one real GPU (issue 36): JAX's vmap against PyTorch's torch.func and Opacus, each against its own SGD
# step, the vectorisation speed-up, epsilon, the largest batch, and no recompilation of PyTorch's compiled step.
#
#   bash scripts/gpu_dpsgd.sh                                      # on a GPU machine, full-size models
#   PREVIOUS=gpu_prev/gpu_dpsgd.tar.gz bash scripts/gpu_dpsgd.sh     # go on from an earlier call's results
#   bash scripts/gpu_dpsgd.sh --device cpu --variant tiny          # the rehearsal on a CPU machine
#
# First whether JAX's DP-SGD step of the CIFAR-10 CNN compiles within JAX_COMPILE_SECONDS (default 150): on the
# H200 it had not after 4.5 minutes (docs/what-was-run.md). Where it does not with XLA's defaults, once more
# without XLA's autotuning, which the campaigns then use if it helped; where neither compiles, the campaigns run
# PyTorch alone, and the summary says which. Then the campaigns, one at a time, in the order of what the issue
# needs most, until SECONDS_LEFT (default 330) have passed (scripts/gpu_common.sh: the steps, the set-up, going on
# from PREVIOUS). Then collect, report and `python -m bench.gpu_summary dpsgd` (summary.md). Everything is packed
# into $OUT/gpu_dpsgd.tar.gz, the summary beside it (OUT defaults to ./gpu_dpsgd_out).
# shellcheck disable=SC2086  # the lists of arguments in variables are split into words on purpose
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
. scripts/gpu_common.sh
gpu_arguments "$@" || exit 2
gpu_measuring_setup gpu_dpsgd || exit 1
gpu_profile "$work/no_autotuning.toml" "$(nproc)"
printf '[xla_flags]\ncnn = "--xla_gpu_autotune_level=0"\nresnet18_gn = "--xla_gpu_autotune_level=0"\n' \
  >> "$work/no_autotuning.toml"

batch=256
samples=8192
search_cap=8G
if [ "$device" = cpu ]; then  # the rehearsal: batches a CPU runs in seconds
  batch=16 samples=512 search_cap=4G  # JAX maps about 2 GB on a CPU before it computes
fi
# 20 timed steps: the per-example loop at the training batch takes about half a second a step on a GPU
cifar="--benchmark cifar10 --batch-sizes $batch --synthetic-samples $samples --epochs 1 --timed-steps 20"
compile_limit=${JAX_COMPILE_SECONDS:-150}

compiled() {  # compiled RESULTS: whether a JAX cell of that campaign wrote its rows (so its step compiled)
  compgen -G "$work/$1/*/rows/jax/*.parquet" > /dev/null
}

{
  # Does JAX's DP-SGD step compile? One trial, its compile time in the rows; where it does not within the limit,
  # once more without XLA's autotuning, and the campaigns use that where it helped (the rows record XLA_FLAGS).
  gpu_step jax_compile "$(gpu_campaign results_jax_compile $cifar --use-case 3 --models cnn --frameworks jax)" "$compile_limit"
  profile=$work/profile.toml
  if ! compiled results_jax_compile; then
    gpu_step jax_compile_no_autotuning \
      "$(profile=$work/no_autotuning.toml gpu_campaign results_no_autotuning $cifar --use-case 3 --models cnn --frameworks jax)" \
      "$compile_limit"
    if compiled results_no_autotuning; then
      profile=$work/no_autotuning.toml
      echo "== JAX's DP-SGD step compiled only without XLA's autotuning: the campaigns run JAX so"
    fi
  fi
  frameworks=jax,torch
  if ! compiled results_jax_compile && ! compiled results_no_autotuning; then
    frameworks=torch
    echo "== JAX's DP-SGD step did not compile within $compile_limit s: the campaigns run PyTorch alone"
  fi
  gpu_step dp_sgd "$(gpu_campaign results $cifar --use-case 3 --models cnn,resnet18_gn --dp-engine torchfunc,opacus --frameworks $frameworks --trials 3)"
  gpu_step sgd "$(gpu_campaign results $cifar --use-case 1 --models cnn,resnet18_gn --frameworks $frameworks --trials 3)"
  gpu_step dp_sgd_compiled "$(gpu_campaign results $cifar --use-case 3 --models cnn --frameworks torch --torch-compile)"
  gpu_step max_batch "$(gpu_campaign results_max_batch --benchmark cifar10 --synthetic-samples $samples --use-case 3 --models resnet18_gn --frameworks $frameworks --find-max-batch --batch-sizes $batch --max-batch-limit 16384 --memory-limit $search_cap)"
} >> "$work/logs/steps.log" 2>&1

gpu_measuring_end gpu_dpsgd dpsgd results results_jax_compile results_no_autotuning results_max_batch
