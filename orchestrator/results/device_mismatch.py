"""Rows that ran on a device their system does not expect (a constraint the site ignored), from the campaigns'
profiles: said by collect and report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.results.store import merged_dataset


def expected_devices_of(folders: Sequence[Path]) -> dict[tuple[str, str], str]:
    """(campaign, system) -> the device pattern its profile's system expects, from every campaign's manifest."""
    from orchestrator.plan.manifest import DamagedManifest, load_manifest
    from orchestrator.plan.profile import expected_devices

    expected = {}
    for folder in folders:
        for manifest_file in sorted(folder.glob("*/manifest.json")):
            try:
                manifest = load_manifest(manifest_file.parent)
            except DamagedManifest:
                continue  # collect says so, last
            for system, pattern in expected_devices(manifest.profile).items():
                expected[(manifest_file.parent.name, system)] = pattern
    return expected


def device_mismatch_lines(merged: Path, folders: Sequence[Path]) -> list[str]:
    """A sentence for each system whose rows ran on a device it does not expect (a constraint the site ignored)."""
    import pyarrow.dataset as ds

    from orchestrator.results.compare import mismatch_lines, system_mismatches

    expected = expected_devices_of(folders)
    columns = ["campaign", "cell_id", "trial", "system", "device_model", "slurm_nodelist"]
    dataset = merged_dataset(merged)
    if not expected or not set(columns) <= set(dataset.schema.names):
        return []
    rows = dataset.to_table(columns=columns, filter=ds.field("system") != "").to_pandas()
    return mismatch_lines(system_mismatches(rows, expected))
