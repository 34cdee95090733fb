"""A compiled PyTorch row's mode is the mode torch.compile was given, not only the spec's word for it (once,
the unit test of the label read the spec back; compiled inference called torch.compile without the mode, so a
reduce-overhead or max-autotune inference row ran the default mode under the other's name).

The real backend runs a cell with torch.compile replaced by a spy that records each call's mode and returns the
function uncompiled: what is checked is what the backend asked torch.compile for, which needs no compilation."""

import json
import subprocess

import pytest
from helpers import REPO_ROOT, env_python
from test_backends import make_spec

from bench_contract.results import read_task_table

BACKEND_UNDER_SPY = """
import json, sys
import torch

modes = []

def spy(model=None, *, mode=None, **options):
    modes.append(mode)
    return model

torch.compile = spy
from torch_backend.run import TorchBackend, main

sys.argv = ["torch_backend.run", sys.argv[1]]
code = main(TorchBackend())
print(json.dumps(modes))
sys.exit(code)
"""


@pytest.mark.parametrize("use_case", [1, 5])
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_the_mode_a_compiled_row_names_is_the_mode_torch_compile_was_given(tmp_path, use_case, mode):
    spec = make_spec("torch", tmp_path, use_case=use_case, epochs=1, torch_compile=True, torch_compile_mode=mode)
    path = tmp_path / "torch.json"
    path.write_text(spec.to_json())
    proc = subprocess.run([str(env_python("torch")), "-c", BACKEND_UNDER_SPY, str(path)], capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    given = json.loads(proc.stdout.strip().splitlines()[-1])
    assert given and set(given) == {mode}, given  # every torch.compile the cell made had the cell's mode
    rows = read_task_table(tmp_path / "torch.parquet").to_pandas()
    labels = set(rows.framework_options.map(lambda options: json.loads(options)["mode"]))
    assert len(labels) == 1 and f"mode {mode}" in labels.pop(), labels  # and the rows name that mode
