"""VIP's GP settings by next-step prediction error alone (docs/regime.md, "VIP's GP settings").

Replays one uniform run's per-prompt records through VIP's GP under each setting and prints the
MAE on seen / unseen / all prompts (replication.report.predictor_study). Example:

    python scripts/gp_settings_study.py results/vip/runs/RLOO/s0/prompts.jsonl.gz \\
        '{"median": {}, "bw=0.4": {"bandwidth": 0.4}, "bw=0.3,noise=0.25": {"bandwidth": 0.3, "noise": 0.25}}'

With ``--encoder results/encoder`` the prompts are embedded once with the paper's encoder
(all-MiniLM-L6-v2, the `encoder` stage's folder) instead of the offline hashed TF-IDF;
``--references`` first prints the moving average's MAE (seen) and the constant's (its unseen).
"""

from __future__ import annotations

import argparse
import json
import time

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
    args = ap.parse_args()
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
        print(json.dumps({"setting": "moving-average (unseen = constant)",
                          **{k: round(float(m[("moving-average", k)]), 4) for k in ("seen", "unseen", "all")
                             if ("moving-average", k) in m}}), flush=True)
    for name, opts in settings.items():
        t = time.time()
        rep = predictor_study.replay_predictors(rec, None if embeddings else texts, embeddings=embeddings,
                                                predictors=("gp",), predictor_options={"gp": opts})
        m = predictor_study.mae_summary(rep).set_index(["predictor", "subset"])["mae"]
        row = {k: round(float(m[("gp", k)]), 4) for k in ("seen", "unseen", "all") if ("gp", k) in m}
        print(json.dumps({"setting": name, **row, "seconds": round(time.time() - t)}), flush=True)


if __name__ == "__main__":
    main()
