"""One spelling of "error:". Whatever the bad input (click's own usage errors, our refusals, a group given
no command, a --data-dir in the way of a file), the CLI says it in one line on stderr that starts with a lower-case
"error: ", exits 2 and prints nothing on stdout; never click's "Error:", a page of help or a traceback."""

import pytest
from helpers import run_cli


def bad_inputs(tmp_path) -> list[list[str]]:
    """Bad input of every kind the CLI meets, the default command's and the commands'."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("x =\n")
    results = ["--results-dir", str(tmp_path / "results")]
    return [
        ["--no-such-option"],                                          # click: unknown option
        ["--benchmark", "digits", "--use-case", "1", "--nodes", "x"],  # click: wrong type
        ["--benchmark", "digits", "--use-case", "3,x", *results],      # ours: a bad item of a list
        ["--benchmark", "nope", "--use-case", "1", *results],          # ours: an unknown name
        ["--benchmark", "digits", "--use-case", "1", "--profile", str(bad_toml), *results],
        ["--benchmark", "digits"],                                     # ours: a missing option
        ["collect", "--results-dir"],                                  # click: an option without its value
        ["validate"],                                                  # click: a missing option
        ["data", "check"],                                             # click: a missing argument
        ["list", "extra"],                                             # click: an extra argument
        ["status", "--campaign", "nope", *results],
        ["data"],                                                      # a group given no command
        ["baseline"],
        ["data", "fetch", "mnist", "--data-dir", str(a_file)],         # a file where the folder goes
        ["data", "fetch", "mnist", "--data-dir", str(a_file / "below")],
    ]


def test_every_bad_input_is_one_line_that_starts_with_lower_case_error(tmp_path):
    said = {}
    for args in bad_inputs(tmp_path):
        proc = run_cli(*args)
        said[" ".join(args)] = (proc.returncode, proc.stdout, proc.stderr.splitlines())
    wrong = {args: result for args, result in said.items()
             if result[0] != 2 or result[1] or len(result[2]) != 1 or not result[2][0].startswith("error: ")}
    assert wrong == {}
    assert not any("Error:" in lines[0] for _, _, lines in said.values())


@pytest.mark.parametrize("group, commands", [("data", "fetch or check"), ("baseline", "save")])
def test_a_group_without_a_command_names_its_commands(group, commands):
    proc = run_cli(group)
    assert proc.stderr.strip() == f"error: `main.py {group}` needs a command: {commands} (see `main.py {group} -h`)"
