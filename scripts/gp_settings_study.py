"""VIP's GP settings by next-step prediction error alone (docs/regime.md, "VIP's GP settings").

Replays one uniform run's per-prompt records through VIP's GP under each setting and prints the
MAE on seen / unseen / all prompts (replication.report.predictor_study). Example:

    python scripts/gp_settings_study.py results/vip/runs/RLOO/s0/prompts.jsonl.gz \\
        '{"median": {}, "bw=0.4": {"bandwidth": 0.4}, "bw=0.3,noise=0.25": {"bandwidth": 0.3, "noise": 0.25}}'

With ``--encoder results/encoder`` the prompts are embedded once with the paper's encoder
(all-MiniLM-L6-v2, the `encoder` stage's folder) instead of the offline hashed TF-IDF;
``--references`` first prints the moving average's MAE (seen) and the constant's (its unseen).
``--out FILE`` also writes every printed row, the records' run (its config.json's seed, arm
settings and task mix when the records sit in a run folder) and the command into one JSON file,
written whole (replication.store.write_atomic): the evidence behind docs/regime.md's generated
block on the GP choice (replication.report.prose_regime).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from replication.report import pipeline, predictor_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", help="prompts.jsonl(.gz) of a uniform run")
    ap.add_argument("settings", help='JSON object: name -> GPConfig options, e.g. {"bw=0.4": {"bandwidth": 0.4}}')
    ap.add_argument("--profile", default="default", help="profile whose train pool holds the prompt texts")
    ap.add_argument("--encoder", default=None,
                    help="sentence-transformers model folder (e.g. results/encoder); default: hashed TF-IDF")
    ap.add_argument("--references", action="store_true",
                    help="first print the moving average's MAE (its unseen MAE is the constant predictor's)")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows and their provenance to this JSON file")
    args = ap.parse_args()
    from replication.report.study_output import check_study_out

    check_study_out(args.out)  # results/ only from its dvc.yaml stage
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    settings = json.loads(args.settings)
    texts = pipeline.prompt_texts(args.profile)
    rec = pd.read_json(args.records, lines=True)
    embeddings = None
    if args.encoder is not None:
        from replication.allocation.embeddings import make_embedder

        ids = list(dict.fromkeys(rec["prompt_id"].tolist()))
        vectors = make_embedder("sentence-transformers", model_path=args.encoder)([texts[i] for i in ids])
        embeddings = dict(zip(ids, vectors))
    if args.references:
        rep = predictor_study.replay_predictors(rec, texts, predictors=("moving-average",))
        m = predictor_study.mae_summary(rep).set_index(["predictor", "subset"])["mae"]
        emit({"setting": "moving-average (unseen = constant)", "reference": True,
              **{k: round(float(m[("moving-average", k)]), 4) for k in ("seen", "unseen", "all")
                 if ("moving-average", k) in m}})
    for name, opts in settings.items():
        t = time.time()
        rep = predictor_study.replay_predictors(rec, None if embeddings else texts, embeddings=embeddings,
                                                predictors=("gp",), predictor_options={"gp": opts})
        m = predictor_study.mae_summary(rep).set_index(["predictor", "subset"])["mae"]
        row = {k: round(float(m[("gp", k)]), 4) for k in ("seen", "unseen", "all") if ("gp", k) in m}
        emit({"setting": name, "options": opts, **row, "seconds": round(time.time() - t)})
    if args.out is not None:
        from replication.store import write_atomic

        run_dir = Path(args.records).parent
        config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").is_file() else {}
        write_atomic(args.out, json.dumps({
            "records": str(args.records), "seed": config.get("seed"), "profile": args.profile,
            "run": {k: config.get(k) for k in ("rollout", "rl", "allocator", "task") if k in config},
            "encoder": args.encoder, "command": shlex.join(["python", *sys.argv]), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
