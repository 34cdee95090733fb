"""The campaigns of a results folder, found by their manifests: each listed (one that cannot be read said so), the
newest, one named by its id or folder, and the one the same command planned before."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.plan.manifest import MANIFEST, CellEntry, DamagedManifest, Manifest, load_manifest
from orchestrator.suggest import command


@dataclass(frozen=True)
class CampaignEntry:
    """One campaign folder as `campaigns` lists it, read from its manifest alone."""

    folder: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def dry_run(self) -> bool:
        return self.manifest.dry_run

    @property
    def benchmark(self) -> str:
        return self.manifest.benchmark

    @property
    def use_case(self) -> str:
        """Its use cases, as --use-case takes them: 3, or 3,5."""
        return ",".join(map(str, self.manifest.use_cases))

    @property
    def cells(self) -> int:
        """Cells of the campaign; trials of one cell count once."""
        return len({(c.framework, c.cell_id) for c in self.manifest.cells})

    @property
    def kind(self) -> str:
        if self.dry_run:
            return "dry run"
        return "submitted" if self.manifest.submissions else "not submitted"

    @property
    def created_at(self) -> str:
        return self.manifest.created_at


def campaign_scan(results_dir: Path) -> list[CampaignEntry | DamagedManifest]:
    """Every campaign under results_dir, oldest first (by the manifest's last write, as the newest is chosen): its
    entry, or DamagedManifest where its manifest cannot be read."""
    found: list[tuple[float, CampaignEntry | DamagedManifest]] = []
    for path in results_dir.glob(f"*/{MANIFEST}"):
        try:
            found.append((path.stat().st_mtime, CampaignEntry(path.parent, load_manifest(path.parent))))
        except DamagedManifest as exc:
            found.append((path.stat().st_mtime, exc))
        except OSError:
            continue  # gone meanwhile
    return [entry for _, entry in sorted(found, key=lambda pair: pair[0])]


def campaign_entries(results_dir: Path) -> list[CampaignEntry]:
    """Every campaign under results_dir whose manifest reads, oldest first (campaign_scan)."""
    return [entry for entry in campaign_scan(results_dir) if isinstance(entry, CampaignEntry)]


def newest_campaign(results_dir: Path, dry_runs: bool = False) -> Path:
    """The newest campaign folder under results_dir; dry runs are left out unless `dry_runs`, since one dry run
    after a submitted campaign would otherwise hide it from status. Refuses in one sentence when there is none, or
    when a manifest newer than the one chosen cannot be read (it may be the newest submitted campaign)."""
    scan = campaign_scan(results_dir)
    entries = [entry for entry in scan if isinstance(entry, CampaignEntry)]
    chosen = [entry for entry in entries if dry_runs or not entry.dry_run]
    newer = scan[scan.index(chosen[-1]) + 1:] if chosen else scan
    damage = next((entry for entry in reversed(newer) if isinstance(entry, DamagedManifest)), None)
    if damage is not None:
        raise damage
    if chosen:
        return chosen[-1].folder
    if entries:
        newest = entries[-1].name
        raise UsageError(f"no submitted campaign in {results_dir}, only dry runs (the newest is {newest}; "
                         f"`{command(None, '--campaign', newest, results_dir=results_dir)}` shows it)")
    raise UsageError(f"no campaign in {results_dir}")


def campaign_folder(results_dir: Path, campaign: str) -> Path:
    """The folder of the campaign named by its id (a folder under results_dir) or by its path."""
    folder = Path(campaign) if Path(campaign).is_dir() else results_dir / campaign
    if not (folder / MANIFEST).is_file():
        known = [entry.name for entry in campaign_entries(results_dir)][-5:]
        raise UsageError(f"no campaign {campaign!r} in {results_dir} (no {MANIFEST} there); "
                         + (f"the newest are: {', '.join(known)}" if known else "it holds no campaign"))
    return folder


def cell_layout(cells: list[CellEntry]) -> list[tuple[str, str, int]]:
    return sorted((cell.framework, cell.cell_id, cell.trial) for cell in cells)


def find_same_campaign(results_dir: Path, layout: list[tuple[str, str, int]]) -> Path | None:
    """The newest submitted campaign under results_dir with exactly these cells and trials (a cell id is a
    hash of every setting, trials and pairing included, so the same command planned again renders the same
    scripts with the same array indices), or None."""
    scan = campaign_scan(results_dir)
    damage = next((entry for entry in scan if isinstance(entry, DamagedManifest)), None)
    if damage is not None:  # it may be this command's campaign: planning anew would submit its cells again
        raise damage
    for entry in reversed(scan):
        if not entry.dry_run and cell_layout(entry.manifest.cells) == layout:
            return entry.folder
    return None
