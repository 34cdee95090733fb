"""One calibration per device in the merged dataset: every run's MFU, peak FLOP/s and roofline against the peak
and the bandwidth both frameworks share there (orchestrator.results.compare: with_shared_peak and
with_shared_roofline), not against each process's own (issue 29, defect 7).

Each backend divides by its own calibration, and two calibrations of one CPU differ (85.4 against 53.3 GFLOP/s in a
digits campaign here). A task file keeps what its process measured. In the merged dataset, which users query with
pandas or DuckDB, those rows are renamed `<metric>_own` as each file is merged (with_own_names), and one derived
part holds the shared rows under the plain names. That part is computed from the whole dataset and written again
at every collect that changes it: a new run with a higher peak changes the MFU of every run on that device.
"""

from __future__ import annotations

from pathlib import Path

from bench_contract.measure.flops import PEAK_FRACTIONS
from bench_contract.results import SCHEMA
from orchestrator.results import store
from orchestrator.results.compare import with_device_key, with_shared_peak, with_shared_roofline

# The metrics a run computes from its own calibration; their shared values are the derived part's rows. Every
# fraction of the peak is one (PEAK_FRACTIONS, where each is declared): the language model's MFU by 6N came back
# divided by each process's own peak when this list named `mfu` alone.
CALIBRATED = (*PEAK_FRACTIONS, "peak_flops", "peak_bandwidth", "ridge_point", "compute_bound")
OWN_SUFFIX = "_own"
OWN_NAMES = tuple(f"{metric}{OWN_SUFFIX}" for metric in CALIBRATED)
# What the shared values are computed from: the own rows, and each run's arithmetic intensity (its bound).
INPUTS = (*OWN_NAMES, "arithmetic_intensity")
FRACTION_NOTE = "; against the shared peak_flops (this process's own peak: {metric}" + OWN_SUFFIX + ")"
DERIVED_PREFIX = "part-shared-"  # the derived part's name; store's readers and its index treat it as a part


def with_own_names(table):
    """A task table (bench_contract.results.SCHEMA) with its CALIBRATED rows renamed `<metric>_own`: the process's
    own calibration, kept under a name of its own. Rows keep their order, so the index's offsets stay true."""
    import pyarrow as pa
    import pyarrow.compute as pc

    metric = table.column("metric")
    own = pc.is_in(metric, value_set=pa.array(CALIBRATED))
    if not pc.any(own).as_py():
        return table
    renamed = pc.if_else(own, pc.binary_join_element_wise(metric, pa.scalar(OWN_SUFFIX[1:]), "_"), metric)
    return table.set_column(table.schema.get_field_index("metric"), "metric", renamed)


def shared_rows(rows):
    """The CALIBRATED rows of every run against the shared calibration: `rows` (a SCHEMA table of the INPUTS
    rows) with the own rows renamed back to the plain names and their values and notes made the shared ones; the
    intensities are dropped."""
    import numpy as np
    import pyarrow as pa

    frame = rows.to_pandas()
    frame["metric"] = [m[: -len(OWN_SUFFIX)] if m in OWN_NAMES else m for m in frame["metric"]]
    shared = with_shared_roofline(with_shared_peak(with_device_key(frame)))
    keep = frame["metric"].isin(CALIBRATED).to_numpy()
    said = shared["metric"].map(lambda metric: FRACTION_NOTE.format(metric=metric))
    notes = shared["note"].where(~(shared["metric"].isin(PEAK_FRACTIONS) & shared["value"].notna()),
                                 shared["note"].fillna("") + said)
    out = rows.filter(pa.array(keep))
    for name, values in (("metric", frame["metric"][keep]), ("value", shared["value"][keep]), ("note", notes[keep])):
        field = out.schema.field(name)
        out = out.set_column(out.schema.get_field_index(name), field,
                             pa.array(np.asarray(values), type=field.type, from_pandas=True))
    return out


def write_shared_part(output: Path, parts: list[str]) -> str | None:
    """Write the derived part of the unpublished generation `output` from the rows of its `parts`; its name, or
    None when no run recorded a calibration."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tables = [pq.read_table(output / part, schema=SCHEMA, filters=pc.field("metric").isin(INPUTS)) for part in parts]
    rows = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    if not pc.any(pc.is_in(rows.column("metric"), value_set=pa.array(OWN_NAMES))).as_py():
        return None
    return store.write_part(output, iter([shared_rows(rows)]), prefix=DERIVED_PREFIX)
