"""``python -m replication eval``: the held-out evaluation block of a saved model.

``--checkpoint`` takes a model folder (config.json and weights, e.g. ``runs/vip-s0/model``) or a
run folder (the README's form, ``runs/vip-s0``): its ``model/`` (written when the run finished)
or else its latest checkpoint (the base model of the run's config with the checkpoint's
weights). Anything else is one line naming the folder and what is missing, before data or a
model is loaded.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from replication.config import ConfigError, TrainConfig, to_dict
from replication.store import write_atomic

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def is_model_folder(path: Path) -> bool:
    """An HF model folder: config.json beside weights (a run folder has config.json only)."""
    return (path / "config.json").is_file() and any((path / f).is_file() for f in WEIGHT_FILES)


def resolve_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any] | None, str]:
    """(model folder to load, checkpoint payload whose weights replace it or None, what was
    chosen). ConfigError (CLI exit 2) naming the folder when it holds no model."""
    from replication.train.checkpoint import CheckpointError, checkpoint_path, read_checkpoint_file

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"--checkpoint {str(path)!r} does not exist")
    if is_model_folder(path):
        return path, None, "model folder"
    if is_model_folder(path / "model"):
        return path / "model", None, "the run's final model/"
    state = checkpoint_path(path) if path.is_dir() else None
    if state is None:
        raise ConfigError(
            f"--checkpoint {str(path)!r} holds no model: neither a model folder (config.json with "
            "model.safetensors) nor a run folder with model/ (written when a run finishes) or "
            "checkpoint/ (committed runs under results/ keep their logs only)")
    try:
        payload = read_checkpoint_file(state)
        base = Path(payload["config"]["model"]["path"])
    except CheckpointError as err:
        raise ConfigError(f"--checkpoint: {err}") from None
    except (KeyError, TypeError):
        raise ConfigError(f"--checkpoint: {state} names no model.path in its config") from None
    if not is_model_folder(base):
        raise ConfigError(f"--checkpoint: {state} was trained from {str(base)!r}, which is not a "
                          "model folder here (run eval from the run's working directory, or pass "
                          "its model/ folder)")
    return base, payload, f"checkpoint at step {payload.get('step')}"


def evaluate_checkpoint(cfg: TrainConfig, checkpoint: str | Path, out: str | Path, seed: int = 0) -> dict:
    folder, payload, chosen = resolve_checkpoint(checkpoint)  # before the heavy imports below
    from replication.evaluate.runner import Evaluator
    from replication.tasks.data import build_data
    from replication.train.setup import build_engine, check_engine, format_inputs, load_model

    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(folder)))
    check_engine(cfg)
    data = build_data(cfg)
    model, tok = load_model(cfg)
    if payload is not None:
        try:
            model.load_state_dict(payload["components"]["model"])
        except (KeyError, RuntimeError) as err:
            detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ConfigError(f"--checkpoint {str(checkpoint)!r}: its weights do not fit "
                              f"{str(folder)!r} ({detail[:200]})") from None
    add_special = format_inputs(data, tok)
    engine = build_engine(cfg, model, tok, add_special_tokens=add_special)
    result = {
        "checkpoint": str(checkpoint),
        "model": f"{folder} ({chosen})",
        "profile": cfg.profile,
        "seed": seed,
        "eval": Evaluator(engine, data.eval_sets, data.verifier, cfg.eval)(model, seed=seed),
        "eval_config": to_dict(cfg.eval),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "metrics.json", json.dumps(result, indent=1, sort_keys=True))
    return result
