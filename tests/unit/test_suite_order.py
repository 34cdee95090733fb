"""The order in which the suite hands its files to the pytest workers (tests/suite_order.py): integration and backend
files interleaved, each group used up at an even pace, the unit files last."""

from suite_order import file_order, interleaved


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
