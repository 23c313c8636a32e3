"""``python -m replication eval``: the held-out evaluation block of a saved model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from replication.config import TrainConfig, to_dict
from replication.evaluate.runner import Evaluator
from replication.tasks.data import build_data
from replication.train.setup import build_engine, check_engine, format_inputs, load_model


def evaluate_checkpoint(cfg: TrainConfig, checkpoint: str | Path, out: str | Path, seed: int = 0) -> dict:
    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise FileNotFoundError(f"--checkpoint {str(checkpoint)!r} does not exist")
    if (checkpoint / "model").is_dir() and not (checkpoint / "config.json").exists():
        checkpoint = checkpoint / "model"  # a run folder: evaluate its final model
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(checkpoint)))
    check_engine(cfg)
    data = build_data(cfg)
    model, tok = load_model(cfg)
    add_special = format_inputs(data, tok)
    engine = build_engine(cfg, model, tok, add_special_tokens=add_special)
    result = {
        "checkpoint": str(checkpoint),
        "profile": cfg.profile,
        "seed": seed,
        "eval": Evaluator(engine, data.eval_sets, data.verifier, cfg.eval)(model, seed=seed),
        "eval_config": to_dict(cfg.eval),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return result
