"""What can be checked of a paper's products without a manifest, before sealing them once.

The committed ``results/<paper>/`` folders were written before the paper manifest existed
(store/products.py). Sealing them writes down whatever bytes are there, so first we check what
can be checked from the files themselves: every file parses as what it is (JSON, CSV, Markdown,
a whole PNG), ``summary.json`` agrees number for number with the ``tables/comparisons.csv`` it was
made from (a hand edit of one without the other shows), every exported run verifies on its own
manifest and holds each seed the summary names, and the gradient-variance measurement verifies.
Every failure is one ``DamagedArtifact`` line naming the file; nothing is sealed then.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from replication.store.manifest import MANIFEST, DamagedArtifact, verify_manifest
from replication.store.products import RUNS, SUMMARY, product_files

PNG_HEAD = b"\x89PNG\r\n\x1a\n"
PNG_TAIL = b"IEND\xaeB`\x82"
COMPARED = {"diff": "diff", "ci_low": "lo", "ci_high": "hi", "p_value": "p", "method_mean": "method_mean",
            "baseline_mean": "baseline_mean"}
"""summary.json field -> tables/comparisons.csv column (report/tables.write_summary_json)."""


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DamagedArtifact(f"{path}: not UTF-8 text (damaged)") from None


def _csv_rows(path: Path) -> list[dict]:
    text = _text(path)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise DamagedArtifact(f"{path}: not a CSV table ({e})") from None
    if not rows or not rows[0]:
        raise DamagedArtifact(f"{path}: empty table (no header)")
    width = len(rows[0])
    for i, row in enumerate(rows[1:], 2):
        if len(row) != width:
            raise DamagedArtifact(f"{path}: row {i} has {len(row)} fields, the header {width} (cut or damaged)")
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def _check_file(path: Path) -> str:
    """Parse one product file by its type; the type's name for the summary line."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        _csv_rows(path)
        return "table"
    if suffix == ".png":
        raw = path.read_bytes()
        if not raw.startswith(PNG_HEAD) or not raw.endswith(PNG_TAIL):
            raise DamagedArtifact(f"{path}: not a whole PNG (cut or damaged)")
        return "figure"
    if suffix in (".json", ".ipynb"):
        from replication.store.run_evidence import read_json

        value = read_json(path)
        if suffix == ".ipynb" and not isinstance(value.get("cells"), list):
            raise DamagedArtifact(f"{path}: a notebook without cells")
        return "notebook" if suffix == ".ipynb" else "json"
    if suffix == ".md":
        _text(path)
        return "markdown"
    path.read_bytes()
    return "file"


def _number(path: Path, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DamagedArtifact(f"{path}: {where} is not a number")
    return float(value)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def check_summary(folder: Path) -> dict:
    """``summary.json`` parses, has the fields ``report`` reads, and every comparison equals its
    row of ``tables/comparisons.csv``; returns the summary."""
    from replication.store.run_evidence import read_json

    path = folder / SUMMARY
    summary = read_json(path)
    comps, seeds = summary.get("comparisons"), summary.get("seeds")
    if not isinstance(summary.get("profile"), str) or not isinstance(comps, list) or not isinstance(seeds, list):
        raise DamagedArtifact(f"{path}: needs 'profile', 'seeds' and 'comparisons'")
    table = folder / "tables" / "comparisons.csv"
    rows = {}
    if table.is_file():
        for r in _csv_rows(table):
            rows[(r.get("arm"), r.get("baseline"), r.get("set"), r.get("metric"))] = r
    for i, c in enumerate(comps):
        if not isinstance(c, dict) or not all(isinstance(c.get(k), str) for k in ("arm", "baseline", "metric")):
            raise DamagedArtifact(f"{path}: comparison {i} lacks arm, baseline or metric")
        label = f"comparison {i} ({c['arm']} vs {c['baseline']}, {c['metric']})"
        values = {k: _number(path, f"{label} {k}", c.get(k)) for k in COMPARED}
        if not table.is_file():
            continue
        set_name, _, metric = c["metric"].partition(" ")
        row = rows.get((c["arm"], c["baseline"], set_name, metric))
        if row is None:
            raise DamagedArtifact(f"{path}: {label} has no row in {table}")
        for k, col in COMPARED.items():
            try:
                theirs = float(row[col]) if row.get(col) not in (None, "") else math.nan
            except ValueError:
                raise DamagedArtifact(f"{table}: {col} of {label} is not a number") from None
            if not _same(values[k], theirs):
                raise DamagedArtifact(f"{path}: {label} {k} = {values[k]!r}, but {table} says {theirs!r} "
                                      f"(edited by hand?)")
        if str(c.get("n")) != str(row.get("n")):
            raise DamagedArtifact(f"{path}: {label} n = {c.get('n')}, but {table} says {row.get('n')}")
    return summary


def check_runs(folder: Path, seeds: list) -> int:
    """Every export under ``runs/`` verifies on its manifest and every arm holds each summary seed;
    the number of exports."""
    from replication.store.run_evidence import run_folders, verify_run

    runs = folder / RUNS
    if not runs.is_dir():
        return 0
    found = run_folders(runs)
    for run in found:
        verify_run(run)
    for arm in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        have = {p.name for p in arm.iterdir() if p.is_dir()}
        lost = [s for s in seeds if f"s{s}" not in have]
        if lost and any(n[:1] == "s" and n[1:].isdigit() for n in have):
            raise DamagedArtifact(f"{arm}: no export for seed(s) {lost} that {folder / SUMMARY} names")
    return len(found)


def check_products(folder: str | Path) -> dict:
    """Check an unsealed paper folder file by file (module docstring); counts by type."""
    folder = Path(folder)
    if not (folder / SUMMARY).is_file():
        raise DamagedArtifact(f"{folder}: no {SUMMARY}; not a paper's products")
    summary = check_summary(folder)
    counts: dict[str, int] = {"export": check_runs(folder, summary["seeds"])}
    for f in product_files(folder):
        rel = f.relative_to(folder)
        if f.name == MANIFEST:
            if rel.parts[0] == RUNS:
                continue  # verified above with the export's own checks
            kind = verify_manifest(f.parent).get("kind", "artifact")
            counts[kind] = counts.get(kind, 0) + 1
            continue
        if rel.parts[0] == RUNS:
            raise DamagedArtifact(f"{f}: under {folder / RUNS} but in no sealed export "
                                  f"(`python -m replication seal {folder / RUNS}` first)")
        kind = _check_file(f)
        counts[kind] = counts.get(kind, 0) + 1
    return counts
