"""Is a re-run neutral? Compare the exported runs in the working tree with those of a git revision.

    python scripts/compare_runs.py c9a38f8            # every results/*/runs/*/s*/ run
    python scripts/compare_runs.py c9a38f8 --root .   # another checkout
    python scripts/compare_runs.py 2689777 --renamed RLOO_VIP-oracle=RLOO_phat16   # an arm renamed since

Every committed metrics.json, steps.jsonl, prompts.jsonl.gz and config.json under
results/*/runs is read from the revision (``git show``) and from the working tree, and compared
with timings (keys ending in ``_seconds``) and provenance (how and where the run ran: commit,
code digest, versions) left out, as scripts/golden_runs.py leaves them out. Unlike the golden
comparison (1e-6 relative, the golden file's keys) every value must be equal and every key
present on both sides. Prints how many files were compared, which differ, and the first
differing field of each; exit 1 when any differs. This is the check a full re-run's note cites.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

from golden_runs import _drop_timings as clean  # the golden runs' rule: no *_seconds, no provenance

COMPARED = ("metrics.json", "steps.jsonl", "prompts.jsonl.gz", "config.json")


def load(data: bytes, name: str):
    text = (gzip.decompress(data) if name.endswith(".gz") else data).decode()
    if ".jsonl" in name:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def first_difference(a, b, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ, as a dotted path with the two values."""
    if type(a) is not type(b):
        return f"{path}: {str(a)[:60]} != {str(b)[:60]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in the {'working tree' if k in b else 'revision'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a} != {b}"


def compare(rev: str, root: Path, renamed: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    """(files compared, {file: first difference}) between ``rev`` and the working tree; ``renamed``
    maps an arm folder of ``rev`` to its name in the working tree (the same runs under a new name)."""
    renamed = renamed or {}
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", "results"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    files = [f for f in files if "/runs/" in f and f.endswith(COMPARED)]
    differ = {}
    for f in files:
        old = subprocess.run(["git", "show", f"{rev}:{f}"], cwd=root, capture_output=True, check=True).stdout
        parts = f.split("/")  # results/<paper>/runs/<arm>/s<seed>/<file>
        if len(parts) > 3 and parts[3] in renamed:
            parts[3] = renamed[parts[3]]
        new = root / "/".join(parts)
        if not new.exists():
            differ[f] = "missing from the working tree"
            continue
        d = first_difference(clean(load(old, f)), clean(load(new.read_bytes(), f)))
        if d:
            differ[f] = d
    return len(files), differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the git revision whose exported runs the working tree is compared with")
    ap.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: here)")
    ap.add_argument("--renamed", action="append", default=[], metavar="OLD=NEW",
                    help="an arm folder renamed since the revision (repeatable)")
    args = ap.parse_args()
    bad = [r for r in args.renamed if r.count("=") != 1 or "" in r.split("=")]
    if bad:
        ap.error(f"--renamed takes OLD=NEW (an arm folder of the revision = its name now), got {bad}")
    n, differ = compare(args.rev, args.root, dict(r.split("=") for r in args.renamed))
    print(f"compared {n} run files with {args.rev} (timings and provenance left out); {len(differ)} differ")
    for f, d in differ.items():
        print(f"  {f}: {d}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
