"""The order in which the suite hands its files to the pytest workers (tests/suite_order.py): integration and backend
files interleaved, each group used up at an even pace, the unit files last; the heavy tests left out unless asked."""

from types import SimpleNamespace

import pytest
from suite_order import file_order, interleaved, leave_out_heavy_unless_asked


def test_two_groups_are_used_up_at_an_even_pace():
    assert interleaved([["a1", "a2"], ["b1", "b2", "b3", "b4"]]) == ["a1", "b1", "b2", "a2", "b3", "b4"]
    assert interleaved([["a1"], []]) == ["a1"]


def test_integration_and_backend_files_alternate_and_the_unit_files_come_last():
    nodeids = ["tests/unit/test_u.py::t", "tests/integration/test_i1.py::t", "tests/integration/test_i2.py::t",
               "tests/backends/test_b1.py::t", "tests/backends/test_b2.py::t", "tests/other/test_o.py::t",
               "tests/integration/test_i1.py::u"]
    rank = file_order(nodeids)
    assert sorted(rank, key=rank.get) == ["tests/integration/test_i1.py", "tests/backends/test_b1.py",
                                          "tests/integration/test_i2.py", "tests/backends/test_b2.py",
                                          "tests/unit/test_u.py", "tests/other/test_o.py"]


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
