"""A paper stage's products under one manifest: ``<paper>/MANIFEST.json`` (kind ``paper``).

A paper stage publishes ``summary.json``, ``tables/``, ``figures/``, the executed notebook and
``conclusions.md`` into ``results/<paper>/`` (or a trial's ``workspace/<profile>/<paper>/``),
beside ``runs/`` and ``gradient_variance/``, which carry manifests of their own. Before this
manifest, a hand-edited ``summary.json`` was published by ``report`` as it was. Now:

- the stage writes the manifest when it swaps the products in (orchestration/stage.py), while it
  still holds the writer lock and with signals held off, so products and manifest change together;
- the manifest lists every product file with its size and SHA-256, and, for a sub-folder that has
  its own manifest (an export, a gradient-variance measurement), that ``MANIFEST.json`` only:
  the paper's manifest pins the nested manifests and they pin their files (no 20 MB rehash);
- a reader (``read_summary``) verifies the manifest before it trusts ``summary.json`` or a table:
  damage is one ``DamagedArtifact`` line naming the file. It checks the products themselves, not
  the nested manifests they pin (``verify`` checks those, and their files). A product file the
  manifest does not list is damage too, except under ``runs/``, where a stage stopped after
  exporting a run legitimately leaves one (``verify_all`` verifies those on their own manifests);
- ``verify_all.seal_paper`` seals a folder written before this manifest existed, once, after
  checking what it can (``product_checks``); a folder that has a manifest is verified, never
  resealed.
"""

from __future__ import annotations

from pathlib import Path

from replication.store.manifest import MANIFEST, DamagedArtifact, _describe, read_manifest, verify_manifest, write_manifest

PAPER_KIND = "paper"
SUMMARY = "summary.json"
RUNS = "runs"


def product_files(folder: Path) -> list[Path]:
    """What the paper manifest lists: every file under ``folder`` except dot names and the
    manifest itself; a sub-folder with its own manifest contributes that manifest only."""
    folder = Path(folder)
    found: list[Path] = []

    def walk(d: Path) -> None:
        for p in sorted(d.iterdir()):
            if p.name.startswith(".") or p.is_symlink():
                continue
            if p.is_dir():
                if (p / MANIFEST).is_file():
                    found.append(p / MANIFEST)
                else:
                    walk(p)
            elif p.is_file() and p != folder / MANIFEST:
                found.append(p)

    walk(folder)
    return found


def write_products_manifest(folder: str | Path, *, extra: dict | None = None) -> dict:
    """Describe the products of ``folder`` and write ``folder/MANIFEST.json`` atomically (the
    format of store.manifest, so ``verify_manifest`` reads it)."""
    folder = Path(folder)
    return write_manifest(folder, kind=PAPER_KIND, extra=extra, files=product_files(folder))


def nested_folders(folder: Path, manifest: dict) -> list[Path]:
    """The sub-folders whose own manifests the paper manifest lists."""
    return [Path(folder) / Path(rel).parent for rel in sorted(manifest["files"])
            if Path(rel).name == MANIFEST and Path(rel).parent != Path(".")]


def _own_files(folder: Path, manifest: dict) -> None:
    """Each listed product file that is not a nested manifest: present, its size and SHA-256."""
    for rel, want in sorted(manifest["files"].items()):
        if Path(rel).name == MANIFEST:
            continue
        f = folder / rel
        if not f.is_file():
            raise DamagedArtifact(f"{f}: missing (listed in {folder / MANIFEST})")
        got = _describe(f)
        if got["size"] != want.get("size"):
            raise DamagedArtifact(f"{f}: {got['size']} bytes, {folder / MANIFEST} says {want.get('size')} "
                                  f"(damaged or changed)")
        if got["sha256"] != want.get("sha256"):
            raise DamagedArtifact(f"{f}: checksum differs from {folder / MANIFEST} (damaged or changed)")


def verify_products(folder: str | Path, *, nested: bool = True) -> dict:
    """The paper manifest of ``folder`` once every listed file matches and no product file is
    unlisted (``runs/`` aside); else ``DamagedArtifact`` naming the file. ``nested``: also the
    bytes of the exports' and measurement's manifests it pins (``verify`` does; a reader of the
    summary and tables needs only the products themselves). ``verify_all`` verifies the nested
    folders' own files too."""
    folder = Path(folder)
    if nested:
        manifest = verify_manifest(folder, kind=PAPER_KIND)
    else:
        manifest = read_manifest(folder)
        if manifest.get("kind") != PAPER_KIND:
            raise DamagedArtifact(f"{folder}: manifest of a {manifest.get('kind')!r}, expected {PAPER_KIND!r}")
        _own_files(folder, manifest)
    listed = set(manifest["files"])
    for f in product_files(folder):
        rel = f.relative_to(folder).as_posix()
        if rel not in listed and rel.split("/", 1)[0] != RUNS:
            raise DamagedArtifact(f"{f}: not in {folder / MANIFEST} (added or replaced after its stage wrote it)")
    return manifest


def is_sealed(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def read_summary(folder: str | Path, *, required: bool = True) -> tuple[dict, bool]:
    """(``folder/summary.json``, whether it was verified). The paper manifest is verified first,
    so a hand-edited or cut summary is one ``DamagedArtifact`` line naming it. Without a manifest:
    damage when ``required`` (a published folder), else the summary is parsed unverified (a
    notebook's trial outside a stage writes none) and the caller says so."""
    from replication.store.run_evidence import read_json

    folder = Path(folder)
    if is_sealed(folder):
        manifest = verify_products(folder, nested=False)
        if SUMMARY not in manifest["files"]:
            raise DamagedArtifact(f"{folder / SUMMARY}: not in {folder / MANIFEST}")
        verified = True
    elif required:
        raise DamagedArtifact(f"{folder}: no {MANIFEST}, so {SUMMARY} cannot be verified (restore the folder "
                              f"from git, or rerun its stage)")
    else:
        verified = False
    summary = read_json(folder / SUMMARY)
    if not isinstance(summary.get("comparisons", []), list):
        raise DamagedArtifact(f"{folder / SUMMARY}: 'comparisons' is not a list")
    return summary, verified
