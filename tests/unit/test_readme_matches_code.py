"""What the README and the example profile say is what the code has. The README's benchmark table is the
table `python main.py list` prints, and profiles/example_gpu_cluster.toml, said to show every key, shows every key
the profile loader knows."""

import re
import tomllib
from dataclasses import fields

from helpers import REPO_ROOT, run_cli

from orchestrator.plan.profile import ClusterProfile, SiteEnvironment, System, load_profile

README = REPO_ROOT / "README.md"
EXAMPLE_PROFILE = REPO_ROOT / "profiles" / "example_gpu_cluster.toml"
LIST_HEADER = ["benchmark", "model", "description", "use cases", "default batches"]


def printed_table(text: str, header: list[str]) -> list[list[str]]:
    """The rows of a table format_table printed, cut at the columns its dashes line marks (a cell holds spaces)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() and line.split()[:2] == header[:2])
    starts = [match.start() for match in re.finditer(r"-+", lines[start + 1])]
    assert [lines[start][a:b].strip() for a, b in zip(starts, [*starts[1:], None])] == header
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append([line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])])
    return rows


def markdown_table(text: str, header: list[str]) -> list[list[str]]:
    """The rows of the Markdown table with this header, each cell without its code backticks."""
    lines = text.splitlines()
    start = lines.index("| " + " | ".join(header) + " |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
    return rows


def test_the_readme_benchmark_table_is_the_table_list_prints():
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    assert markdown_table(README.read_text(), LIST_HEADER) == printed_table(listed.stdout, LIST_HEADER)


def with_commented_keys(text: str) -> str:
    """The profile with its commented-out keys and tables ("# key = ...", "# [table]") in force: the example shows
    those that would change where the jobs go or what they run, for the reader to uncomment."""
    return re.sub(r"(?m)^# (?=\[|\w+ = )", "", text)


def test_the_example_profile_shows_every_key_the_loader_knows(tmp_path):
    load_profile(EXAMPLE_PROFILE)  # as shipped, it loads
    shown = tmp_path / "every_key.toml"
    shown.write_text(with_commented_keys(EXAMPLE_PROFILE.read_text()))
    load_profile(shown)  # and with every key in force, too: each commented example is a valid value
    data = tomllib.loads(shown.read_text())
    assert set(data) == {f.name for f in fields(ClusterProfile)}
    assert set().union(*data["envs"].values()) == {f.name for f in fields(SiteEnvironment)}
    assert set().union(*data["systems"].values()) == {f.name for f in fields(System)}
    assert data["default_system"] in data["systems"]


def test_the_two_commands_are_two_and_ci_runs_the_test_one():
    """The README's "Two commands" listed four make targets; CI must run the one that tests."""
    section = README.read_text().split("## Two commands", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (REPO_ROOT / ".ci" / "run").read_text().splitlines()


def test_what_the_readme_says_campaigns_lists_is_what_it_lists():
    """The README said `campaigns` lists dry runs, marked; it lists submitted campaigns, and --dry-runs adds them."""
    said = [line for line in README.read_text().splitlines() if line.startswith("python main.py campaigns ")]
    assert said and all("--dry-runs" in line and "submitted" in line for line in said)
    assert "--dry-runs" in run_cli("campaigns", "-h").stdout
