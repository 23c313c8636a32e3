"""``python -m replication verify PATH...`` and ``seal PATH...``: every kind of folder the pipeline
writes, recognised and checked, one line each saying what was checked.

Kinds (``classify``): a run folder or export (``metrics.json`` / a manifest of kind run or export),
a folder of exports (``results/<paper>/runs``), a paper's products (``summary.json``, kind
``paper``), a gradient-variance measurement, the base model, the regime studies, one
``summary.json``, a file some manifest lists, and ``results/`` itself (each of the above in it).
Exit status: 0 when everything verified, 1 when damage was found (an ``error:`` line per damaged
item, on stderr), 2 for bad input: a path that does not exist, an empty folder or one that is
none of these. Bad input is found before anything is verified, so a typo costs no time.

A folder the pipeline writes without a manifest (the base model: its stage writes none; the
regime studies: scripts outside the pipeline write them) is checked for what its files can show
and its line says it is not under a manifest.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import sys
from pathlib import Path

from replication.store.manifest import MANIFEST, DamagedArtifact, read_manifest, verify_manifest
from replication.store.products import PAPER_KIND, RUNS, SUMMARY, nested_folders, verify_products

MEASUREMENT_KIND = "gradient-variance"
MEASUREMENT_FILES = ("gradient_variance.csv", "gradient_variance.json")
BASE_KEY = "BASE_KEY"
NOT_CHECKED = {"encoder": "a DVC-cached output: `dvc status encoder` checks it against DVC's cache",
               "summary.md": "a page the report stage renders from the summaries checked here"}
"""Entries of results/ that carry no manifest of ours, and why."""


class BadInput(ValueError):
    """A path that is not something the pipeline writes (exit 2)."""


@dataclasses.dataclass(frozen=True)
class Item:
    path: Path
    kind: str


# ----------------------------------------------------------------------------- recognising


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _manifest_kind(folder: Path) -> str:
    try:
        kind = read_manifest(folder).get("kind")
    except DamagedArtifact:
        return "sealed"  # an unreadable manifest: verifying it reports the damage
    return {"run": "run", "export": "run", PAPER_KIND: "paper", MEASUREMENT_KIND: "measurement"}.get(kind, "sealed")


def _folder_kind(folder: Path) -> str | None:
    if (folder / MANIFEST).is_file():
        return _manifest_kind(folder)
    if (folder / "metrics.json").is_file():
        return "run"
    if (folder / SUMMARY).is_file():
        return "paper"
    if {p.name for p in _entries(folder)} == set(MEASUREMENT_FILES):
        return "measurement"  # without its manifest: damage
    if (folder / BASE_KEY).is_file() or ((folder / "config.json").is_file() and (folder / "model.safetensors").is_file()):
        return "base-model"
    if folder.name == "regime":
        return "regime"
    return None


def _listing(path: Path) -> Path | None:
    """The nearest folder above ``path`` whose manifest lists it (for a folder: a file in it)."""
    path = path.absolute()
    for folder in path.parents:
        if (folder / MANIFEST).is_file():
            try:
                files = read_manifest(folder)["files"]
            except DamagedArtifact:
                return folder
            rel = path.relative_to(folder).as_posix()
            if rel in files or (path.is_dir() and any(f.startswith(rel + "/") for f in files)):
                return folder
    return None


def classify(path: Path) -> list[Item]:
    """What ``path`` is (expanded into the items it holds); BadInput when it is nothing we write."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    if path.is_file():
        if path.name == MANIFEST:
            return classify(path.parent)
        if path.name == SUMMARY:
            return [Item(path, "summary")]
        if _listing(path) is not None:
            return [Item(path, "listed")]
        if path.name in NOT_CHECKED:
            return [Item(path, "not-checked")]
        raise BadInput(f"{path}: not a file any manifest lists")
    if not _entries(path):
        raise BadInput(f"{path}: empty folder")
    kind = _folder_kind(path)
    if kind is not None:
        return [Item(path, kind)]
    from replication.store.run_evidence import run_folders

    runs = run_folders(path)
    if runs:
        return [Item(r, "run") for r in runs]
    if _listing(path) is not None:  # a paper's tables/ or figures/
        return [Item(path, "listed")]
    items = []
    for child in _entries(path):  # results/ itself: each thing the pipeline writes into it
        if child.name in NOT_CHECKED:
            items.append(Item(child, "not-checked"))
        elif child.is_dir() and _entries(child) and _folder_kind(child) is not None:
            items.append(Item(child, _folder_kind(child)))
    if not any(i.kind != "not-checked" for i in items):
        raise BadInput(f"{path}: not a folder the pipeline writes (no run, export, paper products, "
                       f"measurement or base model in it)")
    return items


# ----------------------------------------------------------------------------- verifying


def _run(path: Path) -> str:
    from replication.store.run_evidence import verify_run

    m = verify_run(path)
    key = (m.get("extra") or {}).get("key")
    return (f"{path}: {m.get('kind')} verified ({len(m['files'])} files: size and SHA-256 against {MANIFEST}; "
            f"{(m.get('extra') or {}).get('steps', '?')} steps, rows per step, seed, key record"
            + (f" {key}" if key else "") + ")")


def _nested(folder: Path) -> str:
    """Verify a folder the paper manifest pins by its own manifest; its kind."""
    from replication.store.run_evidence import verify_run

    kind = read_manifest(folder).get("kind")
    if kind in ("run", "export"):
        verify_run(folder)
    else:
        verify_manifest(folder)
    return str(kind)


def _paper(path: Path) -> str:
    from replication.store.products import read_summary
    from replication.store.run_evidence import run_folders

    if not (path / MANIFEST).is_file():
        raise DamagedArtifact(f"{path}: paper products without a {MANIFEST} (written before paper manifests, or "
                              f"outside a stage): `python -m replication seal {path}` checks and seals them once")
    manifest = verify_products(path)
    summary, _ = read_summary(path)
    counts: dict[str, int] = {}
    done = set()
    for sub in nested_folders(path, manifest):
        kind = _nested(sub)
        counts[kind] = counts.get(kind, 0) + 1
        done.add(sub.resolve())
    if (path / RUNS).is_dir():  # an export left by a stage stopped after exporting it
        for run in run_folders(path / RUNS):
            if run.resolve() not in done:
                _nested(run)
                counts["unlisted export"] = counts.get("unlisted export", 0) + 1
    own = [r for r in manifest["files"] if Path(r).name != MANIFEST]
    tops = sorted({r.split("/", 1)[0] + ("/" if "/" in r else "") for r in own})
    nested = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return (f"{path}: paper products verified ({len(own)} files: {', '.join(tops)}; size and SHA-256 against "
            f"{MANIFEST}, nothing unlisted; {len(summary.get('comparisons', []))} comparisons in {SUMMARY}"
            + (f"; on their own manifests: {nested}" if nested else "") + ")")


def _measurement(path: Path) -> str:
    m = verify_manifest(path, kind=MEASUREMENT_KIND)
    return (f"{path}: gradient-variance measurement verified ({len(m['files'])} files: size and SHA-256 against "
            f"{MANIFEST}; key {(m.get('extra') or {}).get('key')})")


def _sealed(path: Path) -> str:
    m = verify_manifest(path)
    return f"{path}: {m.get('kind')} verified ({len(m['files'])} files: size and SHA-256 against {MANIFEST})"


def _summary(path: Path) -> str:
    from replication.store.products import read_summary

    summary, _ = read_summary(path.parent)
    return (f"{path}: verified against {path.parent / MANIFEST} (size and SHA-256; "
            f"{len(summary.get('comparisons', []))} comparisons)")


def _listed(path: Path) -> str:
    """A file or sub-folder some manifest lists: that whole manifest verified (it is one artifact)."""
    from replication.store.run_evidence import verify_run

    rel = path.absolute().relative_to(_listing(path))
    folder = path.parents[len(rel.parts) - 1]  # as the user typed it
    kind = read_manifest(folder).get("kind")
    m = (verify_products(folder) if kind == PAPER_KIND else verify_run(folder) if kind in ("run", "export")
         else verify_manifest(folder))
    return f"{path}: verified with the {len(m['files'])} files {folder / MANIFEST} lists (size and SHA-256)"


def _safetensors(path: Path) -> int:
    """Tensors in a whole safetensors file: its header parses and the file ends where the last
    tensor does (a cut file does not)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise DamagedArtifact(f"{path}: cut (no header)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise DamagedArtifact(f"{path}: header of {n} bytes in a file of {size} (cut or damaged)")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise DamagedArtifact(f"{path}: header is not JSON (damaged)") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    if 8 + n + end != size:
        raise DamagedArtifact(f"{path}: {size} bytes, its header describes {8 + n + end} (cut or damaged)")
    return len(tensors)


def check_base_model_files(path: Path) -> str:
    """What can be checked of a base model folder without a manifest: ``BASE_KEY`` present, every
    JSON file parses, the weights end where their headers say. DamagedArtifact otherwise; returns
    what was checked."""
    from replication.store.run_evidence import read_json

    key = (path / BASE_KEY).read_text().strip() if (path / BASE_KEY).is_file() else None
    if not key:
        raise DamagedArtifact(f"{path / BASE_KEY}: missing or empty (the base stage writes it last)")
    parsed = [f for f in sorted(path.glob("*.json")) if read_json(f) is not None]
    tensors = sum(_safetensors(f) for f in sorted(path.glob("*.safetensors")))
    if not tensors:
        raise DamagedArtifact(f"{path}: no model weights (*.safetensors)")
    return (f"{BASE_KEY} {key}, {len(parsed)} JSON files parse, weights whole ({tensors} tensors within the "
            f"file's size)")


def _base_model(path: Path) -> str:
    if (path / MANIFEST).is_file():
        return _sealed(path)
    return f"{path}: base model checked, not under a {MANIFEST} (written before manifests): {check_base_model_files(path)}"


def check_study_files(path: Path) -> int:
    """Every file of a study folder parses (JSON, CSV, Markdown, PNG); returns how many."""
    from replication.store.product_checks import _check_file

    files = [f for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith(".") and f.name != MANIFEST]
    for f in files:
        _check_file(f)
    return len(files)


def _regime(path: Path) -> str:
    if (path / MANIFEST).is_file():
        return _sealed(path)
    return (f"{path}: regime study outputs checked, not under a {MANIFEST} (the regime-manifest stage "
            f"writes it): {check_study_files(path)} files parse")


def _not_checked(path: Path) -> str:
    return f"{path}: not checked here, {NOT_CHECKED[path.name]}"


VERIFY = {"run": _run, "paper": _paper, "measurement": _measurement, "sealed": _sealed, "summary": _summary,
          "listed": _listed, "base-model": _base_model, "regime": _regime, "not-checked": _not_checked}


def _items(paths: list[Path]) -> list[Item] | None:
    items, bad = [], 0
    for p in paths:
        try:
            items += classify(Path(p))
        except BadInput as e:
            print(f"error: {e}", file=sys.stderr)
            bad += 1
    return None if bad else items


def verify_paths(paths: list[Path]) -> int:
    """Verify every item under ``paths``: 0 all verified, 1 damage found, 2 bad input."""
    items = _items(paths)
    if items is None:
        return 2
    damaged = 0
    for item in items:
        try:
            print(VERIFY[item.kind](item.path), flush=True)
        except DamagedArtifact as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            damaged += 1
    return 1 if damaged else 0


# ----------------------------------------------------------------------------- sealing once


def seal_paper(folder: Path) -> str:
    """Seal a paper folder written before its manifest existed, after ``check_products``; one
    that has a manifest is verified instead, never resealed."""
    from replication.store.lock import writer_lock
    from replication.store.product_checks import check_products
    from replication.store.products import write_products_manifest

    if (folder / MANIFEST).is_file():
        return _paper(folder).replace("verified (", "already sealed, verified (", 1)
    with writer_lock(folder, "seal"):
        counts = check_products(folder)
        write_products_manifest(folder, extra={"paper": folder.name, "sealed": "once, after the fact: "
                                               "every file parsed and checked (store/product_checks.py)"})
    _paper(folder)
    what = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return f"{folder}: paper products sealed after checking {what}"


def seal_paths(paths: list[Path]) -> int:
    """Seal exports and paper folders made before manifests: 0 done, 1 damage found, 2 bad input."""
    from replication.store.run_evidence import seal

    items = _items(paths)
    if items is None:
        return 2
    unsealable = [i for i in items if i.kind not in ("run", "paper")]
    for i in unsealable:
        print(f"error: {i.path}: nothing to seal here ({i.kind}); `seal` takes exports and paper folders",
              file=sys.stderr)
    if unsealable:
        return 2
    damaged = 0
    for item in items:
        try:
            print(seal(item.path) if item.kind == "run" else seal_paper(item.path), flush=True)
        except DamagedArtifact as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            damaged += 1
    return 1 if damaged else 0
