#!/usr/bin/env bash
# The README's screenshot from a reliable campaign (issue 31), in one call: digits use cases 1, 3 and 5, JAX against
# PyTorch on the CPU of a quiet machine, `--trials auto --target-interval 10%`, collected and reported in one folder.
#
#   bash scripts/screenshot_campaign.sh                # on a quiet machine: many cores, no neighbours
#   bash scripts/screenshot_campaign.sh --rehearsal    # shorter runs, to see the script work end to end
#
# Why a quiet machine: on this project's shared 2-core machines the steps within a run, or the throughputs between
# runs, varied by 10% or more (CV) in every try, with nothing else running, so no verdict there was reliable
# (docs/comparisons-and-report.md, "The README's screenshot"). A GPU machine's CPU (16 cores, no neighbours) is one.
# The three use cases run side by side, each a campaign of its own in its own results folder (a local campaign
# holds its folder's launch lock while it runs) on one CPU of its own (a one-CPU profile: one intra-op thread a
# framework, none waiting for a descheduled sibling), for at most the campaigns' --time (CAMPAIGN_TIME, a
# Slurm time, default 00:04:00; Stein's rule runs no more trials than fit in it at its first stage's pace: the profile gives no warning
# signal, so the whole limit counts). Made for a machine with no Slurm and no package index (scripts/gpu_common.sh:
# the interpreters, the carried wheels, site environments). Everything is packed into $OUT/screenshot.tar.gz (OUT
# defaults to ./screenshot_out), collect's verdicts beside it in screenshot_verdicts.txt. Collect merges the three
# folders into the first (uc1), whose report is the page. Then, here:
#
#   tar -xzf screenshot.tar.gz -C /tmp && .venv/bin/python main.py report --results-dir /tmp/screenshot/uc1
#   PYTHONPATH=tests .venv/bin/python tests/integration/test_report_browser.py \
#       /tmp/screenshot/uc1/report/report.html docs/report-screenshot.png
#
# Exit status 1 when a campaign, collect or report failed.
# shellcheck disable=SC2086  # the lists of arguments in variables are split into words on purpose
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
. scripts/gpu_common.sh
rehearsal=false
case "${1:-}" in
  "") ;;
  --rehearsal) rehearsal=true ;;
  *) echo "usage: $0 [--rehearsal]" >&2; exit 2 ;;
esac
# OUT, $work (WORK/screenshot), the interpreters, the carried wheels and the machine's description, as the GPU
# scripts set them up; then this script's own profile in place of theirs.
gpu_measuring_setup screenshot || exit 1
gpu_profile "$work/profile.toml" 1 'warning_signal = "none"'

# Each use case's cell is sized so that a run times at least a few seconds of steps of 10 ms or more (on the AMD
# host: the MLP's training step at batch 1024 about 38 ms, 200 of them; DP-SGD at batch 64 about 0.25 s a step,
# 19 in its epoch; an inference pass at batch 256, the largest power of two within digits' 360 test images, 2 to 3
# ms, timed for 3 s): shorter runs do not average a host's moments (verdict.MIN_TIMED_WINDOW_S).
uc1="--use-case 1 --batch-sizes 1024 --epochs 200"
uc3="--use-case 3 --batch-sizes 64 --epochs 1"
uc5="--use-case 5 --batch-sizes 256 --min-duration 3"
limit=${CAMPAIGN_TIME:-00:04:00}
if $rehearsal; then
  uc1="--use-case 1 --batch-sizes 1024 --epochs 20"
  uc5="--use-case 5 --batch-sizes 256 --min-duration 0.5"
  limit=${CAMPAIGN_TIME:-00:03:00}
fi
seconds=$("$orchestrator_python" -c "import sys; from orchestrator.plan.profile import slurm_seconds
print(slurm_seconds(sys.argv[1]))" "$limit") || { echo "CAMPAIGN_TIME: not a Slurm time: $limit" >&2; exit 2; }

campaign() {  # campaign NAME CPU ARGS...: one use case's campaign, bound to one CPU, its log in logs/NAME.log
  local name=$1 cpu=$2
  shift 2
  # timeout signals its whole process group (the backends write their failure rows), a minute after the limit
  # the campaign itself keeps: a last trial may end a little after it.
  taskset -c "$cpu" timeout --kill-after=15 $(( seconds + 60 )) \
    "$orchestrator_python" main.py --benchmark digits "$@" --device cpu --executor local \
      --trials auto --target-interval 10% --max-trials 10 --time "$limit" --profile "$work/profile.toml" \
      --results-dir "$work/$name" --scripts-dir "$work/scripts/$name" > "$work/logs/$name.log" 2>&1
}

# CPUs far apart, where the machine has them: on a machine of several core complexes, each its own cache.
cores=$(nproc)
apart=$(( cores >= 12 ? cores / 3 : 1 ))
echo "== $(date -u +%T) three campaigns, CPUs 0, $(( apart % cores )) and $(( 2 * apart % cores )), each up to $limit"
status=0
campaign uc1 0 $uc1 & pid1=$!
campaign uc3 $(( apart % cores )) $uc3 & pid3=$!
campaign uc5 $(( 2 * apart % cores )) $uc5 & pid5=$!
for pid in $pid1 $pid3 $pid5; do wait "$pid" || status=1; done
echo "== $(date -u +%T) campaigns over (exit status $status: 0 when all three ended well)"

"$orchestrator_python" main.py collect --results-dir "$work/uc1" --results-dir "$work/uc3" --results-dir "$work/uc5" \
  > "$work/logs/collect.log" 2>&1 || status=1
"$orchestrator_python" main.py report --results-dir "$work/uc1" > "$work/logs/report.log" 2>&1 || status=1
sed -n '/^Verdicts/,/^$/p' "$work/logs/collect.log" | tee "$OUT/screenshot_verdicts.txt"
tar -czf "$OUT/screenshot.tar.gz" -C "$(dirname "$work")" --exclude="*/init/*" screenshot
exit $status
