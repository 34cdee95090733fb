#!/usr/bin/env bash
# The measuring path on one real GPU, in one call (issue 34): every GPU field a row carries, checked.
#
#   bash scripts/gpu_check.sh                          # on a GPU machine, full-size models
#   bash scripts/gpu_check.sh --device cpu --variant tiny   # the rehearsal on a CPU machine
#
# Made for a GPU machine with no Slurm and no package index (scripts/gpu_common.sh: the interpreters, the
# carried wheels in .whl/, the profile of site environments). Four lanes run side by side, each on its
# own CPUs: MNIST training (use case 1), inference and validate (5), CIFAR-10 training, DP-SGD, traces and TF32
# (1 and 3), and the batch search. Then scripts/gpu_check.py checks the rows and writes the summary; everything is packed into
# $OUT/gpu_check.tar.gz, traces apart (OUT defaults to ./gpu_check_out; the work folder is $WORK/gpu_check, WORK
# defaulting to /tmp/gpu_check_work). Exit status: the checker's.
# shellcheck disable=SC2086  # the lists of arguments in variables are split into words on purpose
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
. scripts/gpu_common.sh
gpu_arguments "$@" || exit 2
OUT=${OUT:-$root/gpu_check_out}
# The rows, logs and scripts live outside $OUT, which holds only the packed files to copy back, not folders.
work=${WORK:-/tmp/gpu_check_work}/gpu_check
rm -rf "$work" && mkdir -p "$work/logs" "$OUT"
lane_seconds=${LANE_SECONDS:-330}  # every lane stops this long after the start, so that the checks and packing run
deadline=$(( $(date +%s) + lane_seconds ))
gpu_interpreters || exit 1
gpu_install_wheels "$work/logs/wheels.log" || exit 1
gpu_describe_machine "$work/machine.txt"

# One profile per lane: its cpus_per_task is the lane's share of the cores, which each backend binds to.
cores=$(nproc)
share=$(( cores >= 8 ? cores / 4 : 1 ))
# lane NAME FIRST_CPU COMMAND...: the commands of one lane run one after another, on the lane's CPUs.
lane() {
  local name=$1 first=$2; shift 2
  local cpus=$(( first % cores ))-$(( (first + share - 1) % cores ))
  [ "$share" -ge "$cores" ] && cpus=0-$((cores - 1))
  gpu_profile "$work/$name.toml" "$share"
  ( for step in "$@"; do
      left=$(( deadline - $(date +%s) ))
      if [ "$left" -lt 10 ]; then echo "== not run (the lanes' time is up): $step"; continue; fi
      echo "== $(date -u +%T) $step"
      # timeout signals its whole process group: the backend processes too, which write their failure rows.
      eval "taskset -c $cpus timeout --kill-after=15 $left $step" || echo "== exit $? from: $step"
    done ) > "$work/logs/$name.log" 2>&1 &
}

bench() {  # bench LANE ARGS...: one campaign of the lane, run here with the lane's profile
  profile=$work/$1.toml gpu_campaign "results/$1" "${@:2}"
}

tf32=tf32
[ "$device" = cpu ] && tf32=""  # refused on a CPU (no TF32 arithmetic)
mlp_batches=64,128
samples=4096
search_start=128  # resnet50 in float32 under a 4 GiB cap: about 400 images fit, so about 8 tries
[ "$variant" = tiny ] && samples=1024 && search_start=32

# Four lanes of about the same length (on an H200 each took 3.5 to 4.5 minutes). JAX beside PyTorch eager, then
# PyTorch compiled alone: with --torch-modes eager,compiled the JAX cells would run once for each mode. Use case 3
# runs PyTorch alone: JAX's DP-SGD step of the CIFAR-10 CNN did not finish compiling in 4.5 minutes on the H200
# (XLA: "Very slow compile" of a reduce fusion), which is issue 36's to solve.
training="--use-case 1 --precision fp32,bf16 --epochs 1 --synthetic-samples $samples"
lane mnist 0 \
  "$(bench mnist --benchmark mnist --models mlp --batch-sizes $mlp_batches $training)" \
  "$(bench mnist --benchmark mnist --models mlp --batch-sizes $mlp_batches $training --frameworks torch --torch-compile)"

lane inference $share \
  "$(bench inference --benchmark imagenet --models resnet50,vit_b_16 --use-case 5 --batch-sizes 128 --precision fp32,bf16 --synthetic-samples 256)" \
  "$(bench inference --benchmark mnist --models mlp --use-case 5 --batch-sizes 128 --precision fp32 --synthetic-samples 256)" \
  "$orchestrator_python main.py validate --model resnet50 --device $device --variant $variant --profile $work/inference.toml"

lane cifar $(( 2 * share )) \
  "$(bench cifar --benchmark cifar10 --models cnn --batch-sizes 128 $training)" \
  "$(bench cifar --benchmark cifar10 --models cnn --batch-sizes 128 $training --frameworks torch --torch-compile)" \
  "$(bench cifar --benchmark cifar10 --models cnn --use-case 3 --batch-sizes 128 --dp-engine torchfunc,opacus --frameworks torch --epochs 1 --synthetic-samples $samples --min-iterations 10)" \
  "$(bench cifar --benchmark mnist --models mlp --use-case 1 --batch-sizes 128 --precision fp32${tf32:+,$tf32} --epochs 1 --synthetic-samples $samples --trace-steps 3)" \
  "$orchestrator_python main.py validate --model vit_b_16 --device $device --variant $variant --profile $work/cifar.toml"

lane search $(( 3 * share )) \
  "$(bench search --benchmark imagenet --models resnet50 --use-case 5 --precision fp32 --find-max-batch --batch-sizes $search_start --max-batch-limit 4096 --memory-limit ${SEARCH_CAP:-4G})"

wait
echo "lanes done at $(date -u +%T)"
for name in mnist inference cifar search; do
  "$orchestrator_python" main.py collect --results-dir "$work/results/$name" > "$work/logs/collect_$name.log" 2>&1 \
    || echo "collect of $name failed (see logs/collect_$name.log)"
done
[ "$device" = gpu ] && "$torch_python" scripts/gpu_check.py --work "$work" --nvml-probe > "$work/logs/nvml_probe.log" 2>&1
"$orchestrator_python" scripts/gpu_check.py --device "$device" --work "$work" --memory-limit "${SEARCH_CAP:-4G}"
status=$?
# Traces apart (they may be large); everything else in one file to bring back.
find "$work/results" -path "*trace*" -type f > "$work/trace_files.txt"
tar -czf "$OUT/gpu_check_traces.tar.gz" -T "$work/trace_files.txt" 2>/dev/null
tar -czf "$OUT/gpu_check.tar.gz" -C "$(dirname "$work")" --exclude="*trace*" --exclude="*/init/*" gpu_check
cp "$work/summary.md" "$OUT/summary.md" 2>/dev/null
exit $status
