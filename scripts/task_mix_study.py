"""The task-mix rule of docs/regime.md on finished uniform runs: each run's held-out gain.

For every ``--mix NAME=FOLDER`` (a folder of run folders ``s<seed>``, each a finished
``python -m replication train --allocator uniform`` run), reads each run's metrics.json — its
manifest verified first (replication.store) — and records the gain eval_after − eval_before of the
"average" held-out mean@8 (the held-out sets are the mix's own levels), with the mix's train sizes
from config.json. Writes one CSV, whole (replication.store.write_atomic): the evidence behind the
generated block on the task mix (replication.report.prose_regime). Example:

    python scripts/task_mix_study.py --mix frontier=/tmp/mix/frontier --mix addition=/tmp/mix/addition \\
        --out results/regime/task_mix_seeds_100-103.csv
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from replication.store import DamagedArtifact, verify_manifest, write_atomic


def gains(mixes: dict[str, Path], metric: str = "mean@8", set_name: str = "average") -> pd.DataFrame:
    rows = []
    for name, folder in mixes.items():
        runs = sorted(Path(folder).glob("s*"), key=lambda d: int(d.name[1:]))
        if not runs:
            raise SystemExit(f"error: no run folders s<seed> under {folder} (mix {name!r})")
        for run in runs:
            verify_manifest(run)
            m = json.loads((run / "metrics.json").read_text())
            cfg = json.loads((run / "config.json").read_text())
            if m.get("allocator") != "uniform":
                raise SystemExit(f"error: {run} is not a uniform run (allocator {m.get('allocator')!r}): "
                                 "the rule reads the baseline alone")
            before, after = m["eval_before"][set_name][metric], m["eval_after"][set_name][metric]
            rows.append({"mix": name, "seed": int(m["seed"]), "estimator": m["estimator"], "steps": int(m["steps"]),
                         "train_sizes": json.dumps(cfg["task"]["options"].get("train_sizes", {}), sort_keys=True),
                         f"before_{metric}": before, f"after_{metric}": after, "gain": after - before})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mix", action="append", required=True, metavar="NAME=FOLDER")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from replication.report.study_output import check_study_out

    check_study_out(args.out)  # results/ only from its dvc.yaml stage
    mixes = {}
    for item in args.mix:
        name, sep, folder = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --mix wants NAME=FOLDER, got {item!r}")
        mixes[name] = Path(folder)
    try:
        table = gains(mixes)
    except DamagedArtifact as e:
        raise SystemExit(f"error: {e}") from None
    write_atomic(args.out, table.to_csv(index=False))
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
