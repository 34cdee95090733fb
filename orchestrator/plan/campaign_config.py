"""A campaign's configuration as a TOML file: what every campaign writes beside its manifest (`campaign.toml`), and
what `--config FILE` reads, so that `python main.py --config results/<campaign>/campaign.toml` plans the same cells
again. Options on the command line override the file's values.

The file holds the request's matrix (benchmark, use cases, frameworks, models, batch sizes, precisions, PyTorch
modes, DP-SGD engines, state layouts, systems), its trials, and under [settings] the cell's configuration
(bench_contract.config) as resolved: every setting of the command line with its value, the defaults applied, except
those the plan derives per use case (DP-SGD's sampling, a noise multiplier derived from a target epsilon) where
they were not given. Keys are the command's parameter names (`batch_sizes`, `learning_rate`), values as the
configuration holds them (`memory_limit_bytes = 6442450944`, `data_source = "synthetic"`).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from bench_contract.config import ON_COMMAND_LINE, SETTINGS
from orchestrator.errors import UsageError

FILE = "campaign.toml"
# The command's own parameters a campaign file may set (the matrix and the trials), with their kinds.
MATRIX_KEYS = {"benchmark": str, "use_case": list, "frameworks": list, "models": list, "batch_sizes": list,
               "precision": list, "torch_modes": list, "dp_engine": list, "parallelism": list, "systems": list,
               "trials": str, "target_interval": str, "max_trials": int}
# Settings whose value the plan derives per use case where the user gave none: written only when given.
DERIVED_PER_USE_CASE = ("sampling", "noise_multiplier")
# Named configurations (--preset NAME), below a --config file and the command line: (matrix, settings) as load
# gives them. "paper": what a careful reader of a published comparison expects, paired trials interleaving the two
# frameworks on one node, as many as the interval needs (Stein's rule); the variables that would turn TF32 on behind
# the settings are cleared in every run anyway (bench_contract.measure.device.clear_tf32_overrides).
PRESETS = {"paper": ({"trials": "auto"}, {"paired": True})}


def preset(name: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the matrix's parameters, the settings) of a named preset; nothing for None; one sentence for an unknown one."""
    if name is None:
        return {}, {}
    if name not in PRESETS:
        raise UsageError(f"--preset {name!r} is not a preset; choose from: {', '.join(PRESETS)}")
    matrix, settings = PRESETS[name]
    return dict(matrix), dict(settings)


def configuration_text(matrix: dict[str, Any], settings: dict[str, Any], given: dict[str, Any], command: str) -> str:
    """The file: a header that says where it came from and how to use it, the matrix, then [settings]."""
    lines = [f"# The configuration of the campaign planned by `{command}`.",
             "# `python main.py --config THIS_FILE` plans the same cells again; options given beside it override it.",
             ""]
    lines += [f"{key} = {toml_value(value)}" for key, value in matrix.items() if value not in (None, [], "")]
    lines += ["", "[settings]"]
    for name, value in ((name, settings[name]) for name in ON_COMMAND_LINE):
        if value is None or (name in DERIVED_PER_USE_CASE and name not in given):
            continue
        if name == "noise_multiplier" and settings.get("target_epsilon") is not None:
            continue  # derived from the target epsilon, cell by cell
        lines.append(f"{name} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    """A TOML value: strings and lists of strings as JSON writes them (a TOML basic string), numbers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the matrix's parameters, the settings) of a campaign file; one sentence for a file that cannot be one."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--config {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"--config {path} is not a readable TOML file ({error})") from None
    settings = data.pop("settings", {})
    unknown = sorted(set(data) - set(MATRIX_KEYS)) + sorted(f"settings.{name}" for name in
                                                           set(settings) - set(SETTINGS) if isinstance(settings, dict))
    if not isinstance(settings, dict) or unknown:
        what = f"unknown keys {', '.join(unknown)}" if unknown else "[settings] is not a table"
        raise UsageError(f"--config {path}: {what}; a campaign file holds {', '.join(MATRIX_KEYS)} and a [settings] "
                         "table of the cell's settings (see a campaign's campaign.toml)")
    for key, kind in MATRIX_KEYS.items():
        if key in data and not isinstance(data[key], kind):
            raise UsageError(f"--config {path}: {key} must be a {'list' if kind is list else kind.__name__}, "
                             f"got {data[key]!r}")
    matrix = {key: [str(v) for v in value] if isinstance(value, list) else value for key, value in data.items()}
    return matrix, settings
