"""The orchestrator's own speed: CLI startup, planning, submission, status polling and collection; and the
harness's overhead against a bare loop in each framework (`overhead`, issue 3).

Run with `make bench` (or `python -m bench`). Every number is the median of repeated runs on this machine,
and every ratio compares two runs made in the same invocation. Nothing here asserts on speed: the table
says which targets of issues 8 and 3 hold on the machine it ran on.
"""
