"""The cell's configuration declared once (bench_contract.config) and bound to the command line
(orchestrator.cli.options): every setting is an option made from its declaration and refused in its declaration's
words; every campaign writes its configuration beside its manifest, and `--config` of that file plans the same cells
again, options beside it overriding it (orchestrator.plan.campaign_config)."""

import json
import re

import pytest
from helpers import run_cli

from bench_contract.config import ON_COMMAND_LINE, SETTINGS, CellConfig, ConfigError, option_of


def dry_run_into(tmp_path, name, *args):
    return run_cli("--dry-run", "--results-dir", str(tmp_path / name), "--scripts-dir", str(tmp_path / f"{name}-s"),
                   *args)


def cells(folder):
    (manifest,) = folder.glob("*/manifest.json")
    return sorted(cell["cell_id"] for cell in json.loads(manifest.read_text())["cells"])


def test_every_setting_on_the_command_line_is_an_option_with_its_declared_help():
    from typer.main import get_command

    from orchestrator.cli.app import app

    command = get_command(app)
    options = {name: param for param in command.params for name in param.opts}
    for name in ON_COMMAND_LINE:
        declaration = SETTINGS[name]
        param = options[option_of(name)]
        assert param.name == name and declaration.help in (param.help or "")
        assert all(alias in param.opts for alias in declaration.aliases)


@pytest.mark.parametrize("name", [n for n, d in SETTINGS.items() if d.minimum is not None or d.positive])
def test_a_value_below_its_declared_bound_is_refused_naming_the_option(name):
    declaration = SETTINGS[name]
    low = declaration.minimum if declaration.minimum is not None else 0
    value = low - 1 if isinstance(CellConfig.__dataclass_fields__[name].default, int) and not isinstance(
        CellConfig.__dataclass_fields__[name].default, bool) else low - 0.5
    spellings = re.escape(f" ({', '.join(declaration.aliases)})") if declaration.aliases else ""
    with pytest.raises(ConfigError, match=f"^{option_of(name)}{spellings} (must be|cannot be)"):
        CellConfig(**{name: value})


@pytest.mark.parametrize("name", [n for n, d in SETTINGS.items() if d.choices])
def test_a_value_outside_its_declared_choices_is_refused_with_the_choices(name):
    with pytest.raises(ConfigError, match=f"^unknown {option_of(name)} 'nonesuch'; choose from: "):
        CellConfig(**{name: "nonesuch"})


def test_every_campaign_writes_its_configuration_and_config_plans_the_same_cells(tmp_path):
    first = dry_run_into(tmp_path, "a", "--benchmark", "digits", "-u", "1,3", "--batch-sizes", "16", "--synthetic",
                 "--learning-rate", "0.05", "--trials", "auto", "--memory-limit", "6G", "--find-max-batch")
    assert first.returncode == 0, first.stderr
    (written,) = (tmp_path / "a").glob("*/campaign.toml")
    text = written.read_text()
    assert "learning_rate = 0.05" in text and "memory_limit_bytes = 6442450944" in text and 'trials = "auto"' in text
    again = dry_run_into(tmp_path, "b", "--config", str(written))
    assert again.returncode == 0, again.stderr
    assert cells(tmp_path / "b") == cells(tmp_path / "a")
    # An option beside the file overrides it, the rest comes from the file.
    changed = dry_run_into(tmp_path, "c", "--config", str(written), "--learning-rate", "0.1", "-u", "3")
    assert changed.returncode == 0, changed.stderr
    (rewritten,) = (tmp_path / "c").glob("*/campaign.toml")
    assert "learning_rate = 0.1" in rewritten.read_text() and "use_case = [3]" in rewritten.read_text()
    assert "memory_limit_bytes = 6442450944" in rewritten.read_text()


@pytest.mark.parametrize("text, words", [
    ("bogus = 1\n", "unknown keys bogus"),
    ("[settings]\nlearing_rate = 0.1\n", "unknown keys settings.learing_rate"),
    ("benchmark = 3\n", "benchmark must be a str"),
    ("benchmark = \"digits\"\nuse_case = [1]\n[settings]\nlearning_rate = -1\n", "--learning-rate must be positive"),
    ("benchmark = [\n", "is not a readable TOML file"),
])
def test_a_campaign_file_that_cannot_be_one_is_refused_in_one_sentence(tmp_path, text, words):
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    proc = dry_run_into(tmp_path, "r", "--config", str(path))
    assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_paper_preset_plans_paired_trials_as_many_as_the_interval_needs_and_options_override_it(tmp_path):
    proc = dry_run_into(tmp_path, "paper", "--benchmark", "digits", "--use-case", "1", "--preset", "paper")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "paper-s").iterdir()] == ["paired_digits_1.sh"]
    (toml,) = (tmp_path / "paper").glob("*/campaign.toml")
    assert 'trials = "auto"' in toml.read_text() and "paired = true" in toml.read_text()
    proc = dry_run_into(tmp_path, "three", "--benchmark", "digits", "--use-case", "1", "--preset", "paper",
                        "--trials", "3")
    assert proc.returncode == 0, proc.stderr
    (toml,) = (tmp_path / "three").glob("*/campaign.toml")
    assert 'trials = "3"' in toml.read_text() and "paired = true" in toml.read_text()
    proc = dry_run_into(tmp_path, "none", "--benchmark", "digits", "--use-case", "1", "--preset", "papers")
    assert (proc.returncode, proc.stderr.strip()) == (2, "error: --preset 'papers' is not a preset; choose from: paper")
    assert not (tmp_path / "none").exists()
