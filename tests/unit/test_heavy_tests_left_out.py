"""The tests marked heavy are left out of a run unless its -m expression names them (tests/helpers.py,
leave_out_heavy_unless_asked, called by tests/conftest.py)."""

from types import SimpleNamespace

import pytest
from helpers import leave_out_heavy_unless_asked


class Item(SimpleNamespace):
    """What the selection reads of a pytest item: its markers."""

    def get_closest_marker(self, name):
        return name if name in self.markers else None


@pytest.mark.parametrize("expression, kept", [("", ["light", "serial"]), ("not serial", ["light", "serial"]),
                                               ("heavy", ["light", "heavy", "serial"])])
def test_the_heavy_tests_run_only_where_the_marker_expression_names_them(expression, kept):
    """`make test`'s two runs ("not serial", "serial" after it) leave the heavy test out; `-m heavy` keeps it
    (pytest's own -m then selects among the kept)."""
    deselected = []
    config = SimpleNamespace(option=SimpleNamespace(markexpr=expression),
                             hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    items = [Item(name="light", markers=()), Item(name="heavy", markers=("heavy", "slurm")),
             Item(name="serial", markers=("serial",))]
    leave_out_heavy_unless_asked(config, items)
    assert [item.name for item in items] == kept
    assert [item.name for item in deselected] == ([] if "heavy" in kept else ["heavy"])
