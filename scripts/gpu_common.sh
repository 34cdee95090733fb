# shellcheck shell=bash
# The set-up the GPU scripts share (scripts/gpu_check.sh, gpu_speed.sh, gpu_dpsgd.sh), sourced from the project's root.
#
# Made for a GPU machine with no Slurm and no package index: the local executor runs every cell, and a
# profile of site environments points both frameworks at one interpreter (PYTHON, default python3; JAX_PYTHON,
# TORCH_PYTHON and ORCHESTRATOR_PYTHON override it, for a rehearsal with this project's own environments).

# gpu_arguments "$@": device (gpu, or cpu for a rehearsal) and variant (full, or tiny) from the command line.
gpu_arguments() {
  device=gpu
  variant=full
  while [ $# -gt 0 ]; do
    case "$1" in
      --device) device=$2; shift 2 ;;
      --variant) variant=$2; shift 2 ;;
      *) echo "usage: $0 [--device gpu|cpu] [--variant full|tiny]" >&2; return 2 ;;
    esac
  done
}

# gpu_interpreters: sets python, jax_python, torch_python and orchestrator_python, or fails.
gpu_interpreters() {
  python=$(absolute "${PYTHON:-python3}") || return 1
  jax_python=$(absolute "${JAX_PYTHON:-$python}") || return 1
  torch_python=$(absolute "${TORCH_PYTHON:-$python}") || return 1
  orchestrator_python=$(absolute "${ORCHESTRATOR_PYTHON:-$python}") || return 1
}

# absolute COMMAND: its absolute path (a profile's site environments take no other), its links kept: a virtual
# environment's interpreter is a link to the base one, and only by its own path does it find its packages.
absolute() {
  local found
  found=$(command -v "$1") || { echo "no $1 here" >&2; return 1; }
  echo "$(cd "$(dirname "$found")" && pwd)/$(basename "$found")"
}

# gpu_install_wheels LOG: the wheels carried in .whl/ (opacus, dp-accounting, submitit), where they are missing.
gpu_install_wheels() {
  if { "$orchestrator_python" -c "import dp_accounting, submitit" && "$torch_python" -c "import opacus"; } 2>/dev/null
  then return 0
  fi
  # Into the interpreter's own site-packages: the rendered scripts set PYTHONPATH to the project alone. Where that
  # is read-only, into the project's root, which is on that PYTHONPATH (the device machine's copy is thrown away).
  local wheels=(--no-index --no-deps --no-compile --no-cache-dir .whl/*.whl)
  { "$torch_python" -m pip install -q "${wheels[@]}" || "$torch_python" -m pip install -q --target "$PWD" "${wheels[@]}"; } \
    > "$1" 2>&1 || { echo "installing the carried wheels failed:"; cat "$1"; return 1; }
}

# gpu_describe_machine FILE: the GPU, cores, memory and the versions that ran, for the notes.
gpu_describe_machine() {
  { date -u; nvidia-smi 2>&1 || echo "no nvidia-smi"; nproc; free -g; "$python" --version
    "$torch_python" -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda|flax|optax|torch|torchvision|opacus|numpy|nvidia-ml-py|dp-accounting|pandas|pyarrow) "
  } > "$1" 2>&1
}

# gpu_profile FILE CPUS [KEY_LINE...]: a profile whose cpus_per_task each backend binds to, and whose site
# environments are the interpreters above; each KEY_LINE (`warning_signal = "none"`) is a plain key of it, written
# before the tables, where TOML wants them.
gpu_profile() {
  local file=$1 cpus=$2
  shift 2
  echo "cpus_per_task = $cpus" > "$file"
  [ $# -gt 0 ] && printf '%s\n' "$@" >> "$file"
  cat >> "$file" <<EOF
[envs.jax]
python = "$jax_python"
[envs.torch]
python = "$torch_python"
EOF
}

# The steps of a script that measures speed (scripts/gpu_speed.sh, scripts/gpu_dpsgd.sh) run one at a time, so
# that nothing else uses the GPU while one measures, until $deadline; a step cut off there is left to the next
# call, whose PREVIOUS (the file this call packs) brings back the results: a campaign's command run again runs
# only its cells without a result, and a finished step ($work/done/NAME) is not run again.

# gpu_start_work NAME: $work ($WORK/NAME, WORK defaulting to /tmp/NAME_work), emptied or unpacked from PREVIOUS;
# $deadline, SECONDS_LEFT (default 330) from now.
gpu_start_work() {
  local previous=${PREVIOUS:+$(realpath "$PREVIOUS")}
  work=${WORK:-/tmp/$1_work}/$1
  rm -rf "$work" && mkdir -p "$(dirname "$work")"
  if [ -n "$previous" ]; then
    tar -xzf "$previous" -C "$(dirname "$work")" || { echo "cannot unpack $PREVIOUS" >&2; return 1; }
  fi
  mkdir -p "$work/logs" "$work/done"
  deadline=$(( $(date +%s) + ${SECONDS_LEFT:-330} ))
  echo "== a call began at $(date -u +%FT%T) on $(hostname)" >> "$work/logs/steps.log"  # the steps' log spans calls
}

# gpu_measuring_setup NAME: a speed script's set-up: $OUT (default ./NAME_out), $work and $deadline
# (gpu_start_work), the interpreters, the carried wheels, the machine's description, and $work/profile.toml, whose
# CPUs are every core (one process at a time measures).
gpu_measuring_setup() {
  OUT=${OUT:-$PWD/$1_out}
  mkdir -p "$OUT"
  gpu_start_work "$1" && gpu_interpreters && gpu_install_wheels "$work/logs/wheels.log" || return 1
  gpu_describe_machine "$work/machine.txt"
  gpu_profile "$work/profile.toml" "$(nproc)"
}

# gpu_measuring_end NAME CHECK RESULTS...: collect each of $work's results folders that exists, the report of the
# first, `python -m bench.gpu_summary CHECK` (summary.md), and $work packed into $OUT/NAME.tar.gz, its summary
# beside it as NAME_summary.md (the campaigns' initial weights left out: a full-size model's are hundreds of MB,
# and a campaign run again makes them anew). Returns the summary's exit status.
gpu_measuring_end() {
  local name=$1 check=$2 results status
  shift 2
  echo "== $(date -u +%T) steps over" >> "$work/logs/steps.log"
  for results in "$@"; do
    [ -d "$work/$results" ] || continue
    "$orchestrator_python" main.py collect --results-dir "$work/$results" > "$work/logs/collect_$results.log" 2>&1 \
      || echo "collect of $results failed (see logs/collect_$results.log)"
  done
  "$orchestrator_python" main.py report --results-dir "$work/$1" > "$work/logs/report.log" 2>&1 \
    || echo "report failed (see logs/report.log)"
  "$orchestrator_python" -m bench.gpu_summary "$check" --work "$work"
  status=$?
  tar -czf "$OUT/$name.tar.gz" -C "$(dirname "$work")" --exclude="*/init/*" "$name"
  cp "$work/summary.md" "$OUT/${name}_summary.md" 2>/dev/null
  return "$status"
}

# gpu_step NAME COMMAND [LIMIT]: one step, unless an earlier call finished it or the time is up; the log says which.
# With LIMIT (seconds), a step that runs out of it is a finding (whether something compiles in that time): it is
# marked done and not run again.
gpu_step() {
  local name=$1 command=$2 limit left start code
  if [ -e "$work/done/$name" ]; then echo "== $name: finished in an earlier call"; return 0; fi
  left=$(( deadline - $(date +%s) ))
  limit=${3:-$left}
  if [ "$left" -lt 30 ] || [ "$left" -lt "$limit" ]; then echo "== $name: not run (the time is up)"; return 1; fi
  echo "== $(date -u +%T) $name: $command"
  start=$(date +%s)
  # timeout signals its whole process group: the backend processes too, which write their failure rows.
  eval "timeout --kill-after=15 $limit $command"
  code=$?
  if [ "$code" -eq 0 ]; then
    touch "$work/done/$name"
    echo "== $name: finished in $(( $(date +%s) - start )) s"
  elif [ -n "${3:-}" ] && [ "$code" -eq 124 ]; then
    touch "$work/done/$name"
    echo "== $name: stopped at its limit of $limit s"
  else
    echo "== $name: stopped (exit $code) after $(( $(date +%s) - start )) s; the next call goes on with it"
  fi
  return "$code"
}

# gpu_campaign RESULTS ARGS...: the command of a campaign run here, its results in $work/RESULTS; the profile is
# $profile, else $work/profile.toml; the caller sets $device and $variant (its command line's).
# shellcheck disable=SC2154
gpu_campaign() {
  echo "$orchestrator_python main.py --executor local --synthetic --device $device --variant $variant" \
       "--profile ${profile:-$work/profile.toml} --results-dir $work/$1 --scripts-dir $work/scripts/$1" "${*:2}"
}
