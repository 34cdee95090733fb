"""Cells + cluster profile -> one sbatch array script per framework, from the Jinja template.

All logic lives here: every #SBATCH directive is computed in Python, and every value the template puts on
a shell line goes through the `q` filter (shlex.quote). StrictUndefined makes a missing variable an error.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench_contract.measure.device import TF32_OVERRIDES
from bench_contract.results import ENVIRONMENT_KIND_VARIABLE, LOCKED
from bench_contract.run.progress import INTERVAL_ENV
from bench_contract.sequential import percent
from bench_contract.spec import FIRST_STAGE, PAIRED_ORDER
from orchestrator import PROJECT_ROOT
from orchestrator.errors import UsageError
from orchestrator.plan import catalog
from orchestrator.plan.matrix import Cell
from orchestrator.plan.profile import DEFAULT_ARRAY_PARALLELISM, ClusterProfile, slurm_seconds
from orchestrator.plan.sizing import Sized, header_lines, size

TEMPLATE_DIR = PROJECT_ROOT / "templates"

# Per-framework environment variables, each with the reason the reader of the script sees.
CUDA_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID",
              ("CUDA then numbers GPUs as NVML does (by PCI bus id), so the GPU details and energy read through "
               "NVML are those of the GPU the framework uses."))
FRAMEWORK_EXPORTS = {
    "jax": [
        ("XLA_PYTHON_CLIENT_PREALLOCATE", "false",
         "JAX would otherwise reserve most of the GPU's memory up front, and peak memory would mean nothing."),
        CUDA_ORDER,
    ],
    "torch": [CUDA_ORDER],
}


PAIRED = "paired"  # the key of the one paired script, where an unpaired campaign has one per framework

# Apptainer runs an image with --cleanenv, so that nothing of the job's shell (the login node's modules, a conda
# environment, a stray LD_LIBRARY_PATH) reaches the framework; these variables are passed on by name, each where it
# is set: what the script exports (the framework's, PYTHONPATH, the environment kind, the CPU count, torch's
# rendezvous), the GPUs Slurm gave the task and their numbering, the user's XLA flags, the TF32 overrides the
# backend clears and records, and the progress interval; then every SLURM_* (the ids the rows record, the ranks and
# node list a data-parallel cell reads) and NCCL_* (a site's network settings for NCCL) variable.
CONTAINER_VARIABLES = tuple(dict.fromkeys([
    "PYTHONPATH", ENVIRONMENT_KIND_VARIABLE, "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
    *(name for exports in FRAMEWORK_EXPORTS.values() for name, _, _ in exports), "XLA_FLAGS",
    "MASTER_ADDR", "MASTER_PORT", *TF32_OVERRIDES, INTERVAL_ENV]))
CONTAINER_PREFIXES = ("SLURM_", "NCCL_")


@dataclass(frozen=True)
class RenderedScript:
    framework: str  # the framework whose cells it runs, or PAIRED for the script that runs both
    name: str  # e.g. jax_mnist_1.sh
    text: str
    cells: list[Cell]
    trials: int = 1
    system: str = ""  # the profile's system it runs on ("": the profile's own values)
    pack: int = 0  # a paired script's pairs per array task (--pack); 0: one pair per task

    @property
    def key(self) -> str:
        """The script's key in the manifest, its submissions and its job names: framework (or PAIRED) and system."""
        return system_key(self.framework, self.system)

    @property
    def tasks(self) -> int:
        """Array tasks: one per cell and trial, or one per cell pair (whose task runs every trial of both)."""
        if self.framework == PAIRED:
            return pack_jobs(len(self.cells) // len(PAIRED_ORDER), self.pack)
        return len(self.cells) * self.trials

    def task_index(self, cell_index: int, trial: int) -> int:
        """The array task that runs trial `trial` of the script's `cell_index`-th cell of its framework."""
        if self.framework == PAIRED:
            return pack_of(cell_index, self.pack)
        return spec_line(cell_index, trial, self.trials)


def pack_jobs(pairs: int, pack: int) -> int:
    """The array tasks of a paired script of `pairs` pairs: one a pair, or with --pack N one a pack of N pairs (the
    last holds the rest)."""
    return -(-pairs // pack) if pack else pairs


def pack_of(pair: int, pack: int) -> int:
    """The array task that runs pair `pair`: its own, or with --pack N the pack that holds pairs pack*N to
    pack*N+N-1 (bench_contract.run.driver.pack_pairs reads the same plan)."""
    return pair // pack if pack else pair


def spec_line(cell_index: int, trial: int, trials: int) -> int:
    """Line (from 0) of a framework's specs file that holds trial `trial` of its `cell_index`-th cell."""
    return cell_index * trials + trial


def system_key(name: str, system: str) -> str:
    """A framework's (or the paired script's) name on one system: "jax" alone, "jax.a100" on system a100."""
    return f"{name}.{system}" if system else name


def specs_path(campaign_dir: Path, framework: str, system: str = "") -> Path:
    """The framework's specs file (on one system): one job spec per line, line i+1 for array index i."""
    return campaign_dir / "specs" / f"{system_key(framework, system)}.jsonl"


def script_name(framework: str, benchmark: str, use_cases: int | str, system: str = "") -> str:
    """E.g. jax_mnist_1.sh; jax_mnist_3+5.sh for the cells of use cases 3 and 5 (catalog.use_cases_label)."""
    return f"{framework}_{benchmark}_{use_cases}{'_' + system if system else ''}.sh"


def use_cases_said(cells: list[Cell]) -> str:
    """The header's words for the use cases a script runs: "use case 3 (its title)", or each of several."""
    numbers = sorted({cell.use_case for cell in cells})
    said = [f"{number} ({catalog.USE_CASES[number].title})" for number in numbers]
    return f"use case {said[0]}" if len(said) == 1 else f"use cases {', '.join(said[:-1])} and {said[-1]}"


# A data-parallel cell: srun starts one process per device in the allocation, each reads its rank from
# SLURM_PROCID. PyTorch's rendezvous is the first node of the allocation, on a port that differs per job.
SRUN = ["srun", "--kill-on-bad-exit=1"]
MASTER_PORT_BASE, MASTER_PORT_SPAN = 20000, 12000  # ports 20000 to 31999
DISTRIBUTED_LINES = {
    "jax": [
        "# jax.distributed.initialize() finds the coordinator, the process count and this rank in Slurm's variables.",
    ],
    "torch": [
        "# torch.distributed's rendezvous: the first node of the allocation, a port that differs per job.",
        # Assigned, then exported: `export X="$(...)"` would hide a failed scontrol behind export's status (SC2155).
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        "export MASTER_ADDR",
        # Below Linux's ephemeral ports (32768-60999), where other connections' own ports land: 20000 + id % 20000
        # reached them, and a CI run's rendezvous found its port taken (EADDRINUSE) next to a JAX job's gloo.
        f'export MASTER_PORT="$(({MASTER_PORT_BASE} + SLURM_JOB_ID % {MASTER_PORT_SPAN}))"',
    ],
}


# The limit of a job whose profile sets none and that no estimate sized (a campaign's arrays always are, by
# plan.sizing): validate's parity check, one forward pass of each framework.
UNSIZED_TIME_LIMIT = "00:30:00"


def sbatch_directives(profile: ClusterProfile, job_name: str, n_tasks: int, log_dir: Path,
                      nodes: int = 1, tasks_per_node: int = 1) -> list[str]:
    """Every #SBATCH line, in order; options the profile leaves unset are left out."""
    # One task per device; a one-task job says --ntasks=1.
    tasks = [("ntasks-per-node", str(tasks_per_node))] if nodes * tasks_per_node > 1 else [("ntasks", "1")]
    pairs = [
        ("job-name", job_name),
        ("array", profile.array_spec(f"0-{n_tasks - 1}")),
        ("output", slurm_filename(log_dir, f"{job_name}_%A_%a.out")),
        *profile.queue_options(),
        ("time", profile.time_limit or UNSIZED_TIME_LIMIT),
        ("nodes", str(nodes)),
        *tasks,
        *profile.task_options(profile.gpus_per_task * tasks_per_node),
        # B: signals the batch shell only, which is the backend itself (the script ends with exec); the backend
        # writes a failure row with the step it reached. Without it, Slurm's SIGTERM at the limit does the same
        # with KillWait's seconds to spare.
        ("signal", None if profile.warning_signal == "none" else f"B:{profile.warning_signal}@{profile.warning_seconds}"),
        # A requeued task appends to its log instead of truncating it: the earlier attempt's end stays readable.
        ("open-mode", "append"),
    ]
    directives = [f"--{key}={sbatch_value(key, str(value))}" for key, value in pairs if value is not None]
    # Explicit either way: a cluster's JobRequeue default would otherwise decide, and a task requeued after a
    # node failure waits about two minutes before it may start again. Without requeue, `resubmit` runs it.
    directives.append("--requeue" if profile.requeue else "--no-requeue")
    return directives + list(profile.extra_sbatch)


def slurm_filename(folder: Path, pattern: str) -> str:
    """A log path for --output: `folder` as it is, then the file name `pattern` with Slurm's replacement symbols
    (%A, %a, %j). Slurm expands every % of the whole path, so a % of the folder (--results-dir 100%) is written %%,
    which Slurm's filename patterns read as one literal %. A backslash cannot be written at all: in a filename
    pattern it means "replace nothing" (sbatch(1)), and on the local cluster such tasks failed to open their log."""
    if "\\" in str(folder):
        raise UsageError(f"{folder} holds a backslash, which Slurm reads in a log path as \"replace no %A or %a\" "
                         "(the tasks could not open their logs): choose a --results-dir without one")
    return f"{str(folder).replace('%', '%%')}/{pattern}"


# What Slurm's #SBATCH parser (sbatch's _get_argument) reads as it is outside quotes. Any other character goes
# inside double quotes: a space ends the value, ' and " open quotes (an unmatched one is sbatch's fatal error), an
# unquoted # starts a comment (`--output=r#1/x` is `--output=r`), and \ escapes the next character, inside quotes too.
PLAIN_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:@+%=/-]*\Z")


def sbatch_value(key: str, value: str) -> str:
    """A value as sbatch reads it in an #SBATCH line (no shell runs there): as it is where every character is plain,
    else in double quotes with \\ and " escaped by a backslash. A control character cannot be written (a line break
    would end the directive), and is refused in one sentence."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"#SBATCH --{key} cannot hold a line break or another control character (got {value!r}); "
                         "choose a folder name without one")
    if PLAIN_SBATCH_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def throttle_said(profile: ClusterProfile, n_tasks: int) -> list[str]:
    """The header's line on the array's throttle, where it has one."""
    limit = profile.throttle(n_tasks)
    if not limit:
        return []
    why = ("the profile's array_parallelism, or --array-parallelism" if profile.array_parallelism else
           f"by default, where an array holds more than {DEFAULT_ARRAY_PARALLELISM} tasks and the profile's "
           "array_parallelism sets none")
    return [f"--array=...%{limit}: at most {limit} of the {n_tasks} tasks run at once ({why}), so that one "
            "campaign leaves the rest of the partition to others."]


def comment(value: object) -> str:
    """Text for a "# ..." comment line: line breaks and other control characters written as escapes (\\n)."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(value))


def _environment():
    import jinja2  # only the commands that render need it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    # The words that start a process (srun, a container runtime) before its interpreter: each quoted, then a space.
    env.filters["words"] = lambda words: "".join(f"{shlex.quote(str(w))} " for w in words)
    # Text inside a "# ..." comment must stay on its line, whatever the user typed.
    env.filters["comment"] = comment
    return env


def environment_entry(framework: str, profile: ClusterProfile, mounts: list[Path] | tuple[Path, ...] = (),
                      world_size: int = 1) -> dict:
    """How a script enters a framework's environment: source the activate script of the one built from the lock and
    run its `python`; for a site environment, run the site's setup lines and then its interpreter by path; for a
    container, its setup lines and then the image's interpreter through the runtime, with `mounts` (the repository,
    the campaign, the data) at the same paths inside. `launcher` starts the process: srun for several (data
    parallel), and the container runtime. `kind` goes to the rows (environment_kind) through
    ENVIRONMENT_KIND_VARIABLE."""
    site = profile.site_environment(framework)
    if site is None:
        # Which build of the framework the lock holds: JAX's differs by device (the profile's jax_recipe).
        build = f"its {profile.jax_recipe} build" if framework == "jax" else "its one build"
        return {"activate": profile.env_path(framework) / "bin" / "activate", "python": "python", "setup_lines": [],
                "build": build, "kind": LOCKED, "kind_variable": ENVIRONMENT_KIND_VARIABLE,
                "launcher": launcher_words(None, mounts, world_size), "passed": [], "pinned": []}
    python = profile.python_path(framework)
    if site.container:
        check_container_reference(framework, site)
    found = tag_digest(site)
    pinned = found.digest if found else None
    # The tasks run the image the tag named when the campaign was planned, by its digest: the registry may move
    # the tag while the campaign's jobs wait in the queue, and each node pulls when its task starts.
    runs = replace(site, container=pinned_reference(site.container, pinned)) if pinned else site
    return {"activate": None, "python": python, "setup_lines": list(site.setup_lines),
            "kind": container_kind(site) if site.container else f"site: {python}",
            "kind_variable": ENVIRONMENT_KIND_VARIABLE,
            "container": site.container, "runtime": site.runtime, "launcher": launcher_words(runs, mounts, world_size),
            "passed": passed_words() if site.container and site.runtime == "apptainer" else [],
            "pinned": pinned_said(framework, site.container, pinned) if pinned else []}


def passed_words() -> list[str]:
    """The words a script's loop passes into an Apptainer image by name (CONTAINER_VARIABLES, then bash's list of
    the variables set with each prefix: ${!SLURM_@})."""
    return [*CONTAINER_VARIABLES, *(f"${{!{prefix}@}}" for prefix in CONTAINER_PREFIXES)]


def launcher_words(site, mounts, world_size: int) -> list[str]:
    """The words before the interpreter: srun for several processes, then the container runtime where there is one
    (Apptainer: `apptainer exec --nv --cleanenv --bind A,B IMAGE`, the script passing the variables a run needs by
    name; pyxis: srun's --container-image and --container-mounts, on the srun of a data-parallel cell or on a
    one-task srun)."""
    processes = SRUN if world_size > 1 else []
    if site is None or site.container is None:
        return processes
    paths = list(dict.fromkeys(str(m) for m in mounts))
    check_mounts(paths, "apptainer's --bind" if site.runtime == "apptainer" else "pyxis's --container-mounts")
    if site.runtime == "apptainer":
        return [*processes, "apptainer", "exec", "--nv", "--cleanenv", "--bind", ",".join(paths), site.container]
    return [*(processes or ["srun", "--ntasks=1"]), f"--container-image={pyxis_image(site.container)}",
            "--container-mounts=" + ",".join(f"{p}:{p}" for p in paths)]


# How each runtime names an image. pyxis (its README): `--container-image=[USER@][REGISTRY#]IMAGE[:TAG]`, pulled
# by enroot, or the path of a squashfs file (`enroot import`); a docker:// URI is not its form. Apptainer: a .sif
# file, or a URI (docker://, library://, oras://, shub://) that it pulls and converts when the task starts, in
# every task, on compute nodes that often have no internet.
APPTAINER_PULLED = ("docker://", "library://", "oras://", "shub://", "http://", "https://")


def pyxis_image(reference: str) -> str:
    """pyxis's form of a docker:// reference (docker://nvcr.io/nvidia/jax:25.04-py3 -> nvcr.io#nvidia/jax:25.04-py3,
    docker://ubuntu:24.04 -> ubuntu:24.04); any other reference as it is."""
    if not reference.startswith("docker://"):
        return reference
    name = reference.removeprefix("docker://")
    host, _, rest = name.partition("/")
    # A first component with a dot or a port, or localhost, is a registry (Docker's own rule); else Docker Hub's.
    return f"{host}#{rest}" if rest and ("." in host or ":" in host or host == "localhost") else name


def is_image_file(reference: str) -> bool:
    """An image given as a file (Apptainer's .sif, enroot's squashfs), not a registry reference."""
    return "://" not in reference and (reference.startswith(("/", "./", "../", "~"))
                                       or reference.endswith((".sif", ".sqsh", ".squashfs")))


def container_kind(site) -> str:
    """What the rows say a container run ran in (environment_kind): the reference, and for an image file the sha256
    of its bytes, so that a report names exactly what ran; a registry reference says its own digest where it pins
    one (name@sha256:...), and a tag the digest it named when the campaign was planned (name:tag@sha256:..., Docker's
    form for both), where the registry said (tag_digest)."""
    if not is_image_file(site.container):
        found = tag_digest(site)
        return f"{site.kind}@{found.digest}" if found and found.digest else site.kind
    path = Path(site.container).expanduser()
    if not path.is_file():
        return site.kind  # refused before submission (run.envs.check_container); a dry run may name a future file
    stat = path.stat()
    return f"{site.kind} (sha256:{file_sha256(path, stat.st_size, stat.st_mtime_ns)})"


@functools.cache
def file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    """sha256 of a file, read once per plan for its size and time of change (an image of gigabytes: seconds)."""
    digest = hashlib.sha256()
    with open(path, "rb") as image:
        while chunk := image.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def unpinned_image(framework: str, site) -> str | None:
    """A warning for a registry image named by its tag alone whose digest the registry did not give (tag_digest):
    the registry may move the tag between a campaign's jobs, and the rows can then name only the tag
    (container_kind), not the image that ran. None for an image file (its sha256 goes to the rows), for a reference
    pinned with @sha256:, and for a tag whose digest was found (the jobs run that)."""
    found = tag_digest(site)
    if found is None or found.digest:
        return None
    return (f"{framework}'s image {site.container} is named by its tag, and its digest could not be found "
            f"({found.why}): its registry may move the tag between this campaign's jobs, and the rows can name only "
            f"the tag; pin it as IMAGE@sha256:DIGEST (`{shlex.join(skopeo_words(site.container))}` prints the digest)")


# How a plan learns the digest a registry tag names: skopeo, which reads the image's manifest from the registry
# without pulling the image. Neither runtime documents such a lookup: enroot's import (pyxis pulls through it)
# downloads and converts the whole image, and `apptainer inspect` reads an image already on disk. skopeo's .Digest
# is the top-level manifest's, for an image of several architectures the list's (skopeo-inspect(1)), so the pinned
# image still gives each node its own architecture's, whichever architecture the login node has.
SKOPEO = "skopeo"
# A registry answers an inspect in a second or two, its token exchange included; the limit is for a login node whose
# network drops the connection instead of refusing it, so that a plan (a dry run too) waits this long at most.
DIGEST_TIMEOUT_S = 20
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Digest:
    """What the registry said a tag named: its digest (sha256:...), or why none was found."""

    digest: str | None
    why: str = ""


def tag_digest(site) -> Digest | None:
    """The digest a registry image named by its tag alone names now (pyxis's: Apptainer runs image files, and its
    registry references are refused, container_reference_problem); None for any other image."""
    if (site is None or site.container is None or site.runtime != "pyxis" or is_image_file(site.container)
            or "@sha256:" in site.container or container_reference_problem(site.runtime, site.container)):
        return None
    return registry_digest(site.container, shutil.which(SKOPEO))


def skopeo_words(reference: str) -> list[str]:
    """`skopeo inspect` of a reference in either form pyxis takes (REGISTRY#IMAGE:TAG or docker://...)."""
    return [SKOPEO, "inspect", "--format", "{{.Digest}}", "docker://" + reference.replace("#", "/", 1).removeprefix(
        "docker://")]


@functools.cache
def registry_digest(reference: str, skopeo: str | None) -> Digest:
    """Ask the registry, once per plan and reference, what `reference` names now. Whatever stops skopeo (not on
    PATH, no network, a refusal, no answer within DIGEST_TIMEOUT_S) is a reason, never an error: the plan goes on
    with the tag, and warns (unpinned_image)."""
    if skopeo is None:
        return Digest(None, f"no {SKOPEO} on PATH to ask its registry")
    try:
        proc = subprocess.run([skopeo, *skopeo_words(reference)[1:]], capture_output=True, text=True, check=False,
                              timeout=DIGEST_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Digest(None, f"{SKOPEO} had no answer from its registry within {DIGEST_TIMEOUT_S} s")
    except OSError as exc:
        return Digest(None, f"{SKOPEO} could not run ({exc})")
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return Digest(None, f"{SKOPEO} failed: {said}")
    digest = proc.stdout.strip()
    if not DIGEST.match(digest):
        return Digest(None, f"{SKOPEO} printed {digest[:100]!r}, not a sha256 digest")
    return Digest(digest)


def pinned_reference(reference: str, digest: str) -> str:
    """The reference with its tag replaced by `digest` (nvcr.io#nvidia/jax:25.01-py3 -> nvcr.io#nvidia/jax@sha256:...,
    docker://ubuntu:24.04 -> docker://ubuntu@sha256:...): the IMAGE@sha256:DIGEST form pyxis documents, without the
    tag, which not every enroot reads beside a digest."""
    head, last = re.fullmatch(r"(.*[/#])?([^/#]*)", reference).groups()
    return f"{head or ''}{last.partition(':')[0]}@{digest}"


def pinned_said(framework: str, reference: str, digest: str) -> list[str]:
    """The header's lines on an image pinned at plan time: its tag and the digest the tag named."""
    return [f"{catalog.FRAMEWORKS[framework]}'s image {reference}: its tag named this digest when this script was "
            f"written ({SKOPEO} inspect),", f"  {digest}",
            "which the script runs, so that every task runs one image whatever its registry does with the tag."]


def check_container_reference(framework: str, site) -> None:
    """Refuse, in one sentence with the fix, an image that the site's runtime cannot use as the jobs would."""
    problem = container_reference_problem(site.runtime, site.container)
    if problem:
        raise UsageError(f"{framework}: {problem} (profile table 'envs.{framework}')")


def container_reference_problem(runtime: str, reference: str) -> str | None:
    """Why `runtime` cannot use `reference` as the jobs would, with the fix; None when it can."""
    if runtime == "apptainer":
        if reference.startswith(APPTAINER_PULLED):
            return (f"apptainer would pull {reference} in every task, on compute nodes that may have no internet; "
                    f"pull it once on the login node (`apptainer pull /shared/path/image.sif {reference}`) and "
                    "give that .sif as container")
        if "#" in reference:
            docker = "docker://" + reference.replace("#", "/", 1)
            return (f"{reference} is pyxis's form of an image; for apptainer pull it once on the login node "
                    f"(`apptainer pull /shared/path/image.sif {docker}`) and give that .sif as container")
        return None
    if "://" in reference and not reference.startswith("docker://"):
        return (f"pyxis pulls registry images as REGISTRY#IMAGE:TAG (e.g. nvcr.io#nvidia/jax:25.04-py3) and cannot "
                f"pull {reference}; give such a reference, or a squashfs file made with `enroot import`")
    if reference.endswith(".sif"):
        return (f"{reference} is an Apptainer image, which pyxis cannot run; give a registry reference "
                "(REGISTRY#IMAGE:TAG, e.g. nvcr.io#nvidia/jax:25.04-py3) or a squashfs file made with `enroot import`, "
                "or set runtime = \"apptainer\"")
    return None


# Both runtimes read their mounts as one list, `SRC[:DEST[:OPTIONS]],...`, with no way to write a comma or a colon
# inside a path: /data/a,b would be two mounts, and /data/x:y a path and where it goes.
MOUNT_SEPARATORS = ",:"


def check_mounts(paths: list[str], option: str) -> None:
    """Refuse, at plan time and in one sentence, a path the container's mount list would split."""
    for path in paths:
        if any(c in path for c in MOUNT_SEPARATORS):
            raise UsageError(f"{path} holds a ',' or ':', which {option} list reads as a separator, so the container "
                             "could not see that folder: choose a --results-dir (or --data-dir, or a place for this "
                             "repository) without them")


def container_mounts(campaign_dir: Path, cells: list[Cell]) -> list[Path]:
    """What a containerised backend reads and writes: the repository (its code), the campaign (specs, weights,
    results) and each cell's data folder."""
    data = [Path(c.settings.data_dir).resolve() for c in cells if c.settings.data_dir]
    return [PROJECT_ROOT, campaign_dir.resolve(), *data]


def header_values(name: str, cells: list[Cell], profile: ClusterProfile, *, campaign: str, command: str,
                  git_commit: str, created_at: str, sizing: list[str] = ()) -> dict:
    """What both templates (one framework's array, or the paired one) say about the campaign and the profile;
    `sizing`, what the tasks ask Slurm for and why (plan.sizing, and the throttle)."""
    # A header that says "on one GPU" above a job that asks for none would mislead the reader of the script.
    device = "" if profile.gpus_per_task else ", on CPUs: this plan asks Slurm for no GPU"
    return {"script_name": name, "benchmark": cells[0].benchmark, "use_cases_said": use_cases_said(cells) + device,
            "campaign": campaign, "command": command,
            "git_commit": git_commit, "created_at": created_at, "profile_name": profile.name,
            "setup_lines": list(profile.setup_lines), "project_root": PROJECT_ROOT,
            "cpus_per_task": profile.cpus_per_task, "sizing_lines": header_lines(list(sizing))}


def render_scripts(
    cells: list[Cell],
    profile: ClusterProfile,
    *,
    campaign: str,
    campaign_dir: Path,
    command: str,
    git_commit: str,
    created_at: str,
    sized: Sized | None = None,
) -> list[RenderedScript]:
    """One script per framework; array index i runs line i+1 of specs/<fw>.jsonl (with several trials, trial
    t of the framework's c-th cell is line c*trials+t+1). With --paired, one script instead: array index i runs
    every trial of the i-th JAX/PyTorch cell pair. `sized`: the profile with its time limits and the header's lines
    on them (plan.sizing); without it, the profile is sized here."""
    sized = sized or size(profile, cells)
    scripts = []
    for system in dict.fromkeys(c.system for c in cells):  # one system after another, in the order asked
        on_system = [c for c in cells if c.system == system]
        scripts += render_system(on_system, sized.profile.for_system(system), system, campaign=campaign,
                                 campaign_dir=campaign_dir, command=command, git_commit=git_commit,
                                 created_at=created_at, sizing=sized.notes.get(system, []))
    return scripts


def render_system(cells: list[Cell], profile: ClusterProfile, system: str, *, campaign: str, campaign_dir: Path,
                  command: str, git_commit: str, created_at: str, sizing: list[str] = ()) -> list[RenderedScript]:
    """The scripts of one system's cells, with that system's profile."""
    if cells and cells[0].settings.paired:
        return [render_paired(cells, profile, system, campaign=campaign, campaign_dir=campaign_dir, command=command,
                              git_commit=git_commit, created_at=created_at, sizing=sizing)]
    template = _environment().get_template("sbatch.sh.j2")
    scripts = []
    for framework in catalog.FRAMEWORKS:
        mine = [c for c in cells if c.framework == framework]
        if not mine:
            continue
        first = mine[0]
        trials = first.settings.trials
        name = script_name(framework, first.benchmark, catalog.use_cases_label(c.use_case for c in mine), system)
        cell_lines = [
            f"{spec_line(i, t, trials):<5}  {c.model_label} batch {c.batch_size} {c.precision}"
            + (f" trial {t}" if trials > 1 else "") + f"  ({c.cell_id})"
            for i, c in enumerate(mine) for t in range(trials)
        ]
        text = template.render(
            **header_values(name, mine, profile, campaign=campaign, command=command, git_commit=git_commit,
                            created_at=created_at,
                            sizing=[*sizing, *throttle_said(profile, len(mine) * trials)]),
            framework=framework,
            framework_title=catalog.FRAMEWORKS[framework],
            cell_lines=cell_lines,
            directives=sbatch_directives(profile, name.removesuffix(".sh"), len(mine) * trials, campaign_dir / "logs",
                                         first.settings.nodes, first.settings.tasks_per_node),
            world_size=first.settings.world_size,
            distributed_lines=DISTRIBUTED_LINES[framework] if first.settings.world_size > 1 else [],
            environment=environment_entry(framework, profile, container_mounts(campaign_dir, mine),
                                          first.settings.world_size),
            exports=FRAMEWORK_EXPORTS[framework],
            specs_file=specs_path(campaign_dir, framework, system),
        )
        scripts.append(RenderedScript(framework, name, text, mine, trials, system))
    return scripts


# The collect job reads result files and writes Parquet: one CPU and a few minutes, whatever the cells needed.
COLLECT_TIME_LIMIT = "00:10:00"


def collect_script_name(campaign: str) -> str:
    return f"collect_{campaign}.sh"


def render_collect(profile: ClusterProfile, *, campaign: str, campaign_dir: Path, results_dir: Path, python: str,
                   command: str, git_commit: str, created_at: str) -> str:
    """The --collect-after job: collect and report of one campaign, on the profile's partition, without a GPU. Its
    dependency on the arrays is given to sbatch when they have ids."""
    name = collect_script_name(campaign)
    qos = [option for option in profile.extra_sbatch if option.startswith(("--qos=", "--account="))]
    pairs = [("job-name", f"collect:{campaign}"), ("output", slurm_filename(campaign_dir / "logs", "collect_%j.out")),
             *profile.queue_options(), ("time", COLLECT_TIME_LIMIT),
             # Not the profile's task_options: reading files needs one CPU, and no GPU or the cells' memory.
             ("ntasks", "1"), ("cpus-per-task", "1")]
    directives = [f"--{key}={sbatch_value(key, value)}" for key, value in pairs if value is not None] + qos
    return _environment().get_template("collect.sh.j2").render(
        script_name=name, campaign=campaign, command=command, git_commit=git_commit, created_at=created_at,
        directives=directives, project_root=PROJECT_ROOT, python=python, results_dir=results_dir)


def render_paired(cells: list[Cell], profile: ClusterProfile, system: str, *, campaign: str, campaign_dir: Path, command: str,
                  git_commit: str, created_at: str, sizing: list[str] = ()) -> RenderedScript:
    """One array script, one task per JAX/PyTorch cell pair: on its node, trial after trial, JAX then PyTorch in even
    trials and the other way round in odd ones (bench_contract.spec.pair_order), each in its own environment and its
    own process."""
    by_framework = {fw: [c for c in cells if c.framework == fw] for fw in PAIRED_ORDER}
    pairs = list(zip(*by_framework.values()))
    if any(len(mine) != len(pairs) for mine in by_framework.values()) or any(
            len({c.pair_key for c in pair}) != 1 for pair in pairs):
        raise UsageError("--paired needs the same cells in both frameworks, one JAX cell per PyTorch cell")
    first = pairs[0][0]
    trials = first.settings.trials
    name = script_name(PAIRED, first.benchmark, catalog.use_cases_label(c.use_case for c in cells), system)
    runs = [
        {"framework": fw, "title": catalog.FRAMEWORKS[fw],
         "environment": environment_entry(fw, profile, container_mounts(campaign_dir, cells)),
         "exports": FRAMEWORK_EXPORTS[fw], "specs_file": specs_path(campaign_dir, fw, system),
         "launcher": f"run_{fw}"}  # the script's launch function, which the driver calls by name
        for fw in PAIRED_ORDER
    ]
    # A pack the plan left open (a campaign planned outside launch.with_pack) is no pack.
    pack, slots, nodes = first.settings.pack or 0, first.settings.pack_slots, first.settings.pack_nodes
    tasks = pack_jobs(len(pairs), pack)
    first_stage = FIRST_STAGE if first.settings.target_interval else 0
    rule_launcher = "trials_needed" if first_stage else ""  # the launch function of Stein's rule
    text = _environment().get_template("paired.sh.j2").render(
        **header_values(name, cells, profile, campaign=campaign, command=command, git_commit=git_commit,
                        created_at=created_at, sizing=[*sizing, *pack_said(pack, slots, nodes, len(pairs)),
                                                       *throttle_said(profile, tasks)]),
        launch_functions=[run["launcher"] for run in runs] + ([rule_launcher] if rule_launcher else []),
        rule_launcher=rule_launcher,
        driver=driver_entry(runs),
        pair_lines=[f"{pack_of(i, pack):<5}  {a.model_label} batch {a.batch_size} {a.precision}  "
                    f"({a.pair_key})" for i, (a, *_) in enumerate(pairs)],
        directives=sbatch_directives(profile, name.removesuffix(".sh"), tasks, campaign_dir / "logs",
                                     nodes if pack else 1, slots // nodes if pack else 1),
        pack=pack, slots=slots, pair_count=len(pairs), pack_gpus=bool(profile.gpus_per_task),
        step_options=step_options(profile) if pack else [],
        pack_log=campaign_dir / PACK_LOGS,
        order=" then ".join(catalog.FRAMEWORKS[fw] for fw in PAIRED_ORDER),
        trials=trials,
        runs=runs,
        first_stage=first_stage,
        target_percent=percent(first.settings.target_interval),
        time_limit=profile.time_limit or "",
        time_limit_s=slurm_seconds(profile.time_limit) if profile.time_limit else 0,
        # Trials must end before Slurm's warning signal, which stops the one that runs: the budget ends at the
        # earliest the signal may come.
        warning_s=profile.earliest_warning_s(),
    )
    return RenderedScript(PAIRED, name, text, [c for pair in pairs for c in pair], trials, system, pack)


def pack_said(pack: int, slots: int, nodes: int, pairs: int) -> list[str]:
    """The header's line on a pack's tasks (--pack, --pack-slots, --pack-nodes)."""
    if not pack:
        return []
    spread = f"--nodes={nodes} --ntasks-per-node={slots // nodes}" if nodes > 1 else f"--ntasks-per-node={slots}"
    side = (f"{spread}: {slots} slots, each a Slurm task with the CPUs and GPUs below, so that {slots} pairs run side "
            "by side, one per slot" if slots > 1 else "--ntasks=1: one slot, the pairs one after another")
    jobs = pack_jobs(pairs, pack)
    return [f"--pack {pack}: {pairs} pairs in {jobs} job{'' if jobs == 1 else 's'} of up to {pack} pairs (--pack N), "
            f"instead of a job each; {side}; each run a job step of its own, srun --exact."]


PACK_LOGS = "packs"  # the campaign's folder of the packs' run records, one file per job (bench_contract.run.driver)


def step_options(profile: ClusterProfile) -> list[str]:
    """What each run of a pack asks srun for, beyond one task on one node: one slot's CPUs and GPUs (one slot of the
    job's --ntasks-per-node) and, where memory is per GPU, its GPUs' memory. Memory per node is the driver's to share
    (bench_contract.run.driver.slot_memory): it reads the job's own, the profile's or the partition's default."""
    options = [f"--cpus-per-task={profile.cpus_per_task}"]
    if profile.gpus_per_task:
        options.append(f"--gpus-per-task={profile.gpus_per_task}")
        if profile.mem_per_gpu and not profile.mem:
            options.append(f"--mem-per-gpu={profile.mem_per_gpu}")
    return options


def driver_entry(runs: list[dict]) -> dict:
    """Where the paired job's driver (bench_contract.run.driver) runs: the first framework's environment that is not
    a container, since the driver starts every framework's process, containers included, from the node itself; where
    both are containers, the interpreter that plans the campaign, as the --collect-after job runs it. The driver needs
    the standard library and the contract only."""
    for run in runs:
        if not run["environment"].get("container"):
            return {"framework": run["framework"], "title": run["title"], "environment": run["environment"]}
    return {"framework": "", "title": "", "environment": {"python": sys.executable}}
