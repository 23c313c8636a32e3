"""From a config to policy and rollout engine (the parts shared by train, eval and SFT).

The data side (prompt sets, verifiers) is ``replication.tasks.data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from replication.config import ConfigError, TrainConfig
from replication.tasks.data import TrainData


def load_model(cfg: TrainConfig) -> tuple[torch.nn.Module, Any]:
    from replication.models import load_policy

    path = Path(cfg.model.path)
    if not path.exists() and cfg.model.source != "hub":
        raise ConfigError(f"model.path {str(path)!r} does not exist: {missing_model_hint(cfg)}")
    device = cfg.model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device is 'cuda' but no CUDA device is available")
    model, tok = load_policy(str(path), device=device, dtype=cfg.model.dtype)
    return model, tok


def missing_model_hint(cfg: TrainConfig) -> str:
    """How to build ``model.path`` (never a command that writes over another model folder)."""
    if cfg.model.source == "smollm2":  # converted into model.path itself (a git-ignored cache)
        return f"convert it with `python -m replication prepare-model --profile {cfg.profile}`"
    return (f"build it with `python -m replication prepare-model --profile {cfg.profile} --out "
            f"{cfg.model.path}` (the default profile's committed results/base-model: `dvc repro base`)")


def format_inputs(data: TrainData, tokenizer: Any) -> bool:
    """Fill each set's ``inputs`` with the formatter's text; returns add_special_tokens."""
    from replication.models import make_formatter

    fmt = make_formatter(data.formatter_name, tokenizer=tokenizer, **data.formatter_options)
    for s in [data.train, *data.eval_sets.values()]:
        s.inputs = [fmt(t) for t in s.inputs]
    return fmt.add_special_tokens


def check_engine(cfg: TrainConfig) -> None:
    """ConfigError (CLI exit 2) when ``rollout.engine`` cannot run here — e.g. vllm is not
    installed or its version is unsupported. Called before any data or model is loaded."""
    from replication.engines import ENGINES, EngineUnavailable

    try:
        ENGINES.get(cfg.rollout.engine).check_available()
    except EngineUnavailable as err:
        raise ConfigError(f"rollout.engine: {err}") from None


def build_engine(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any,
                 add_special_tokens: bool = True, placement: Any = None, pass_sync: Any = None) -> Any:
    """The rollout engine named by ``rollout.engine`` (registry: replication/engines.py).

    ``placement`` (an ``EnginePlacement``: rank, world size, local rank) says which training
    process this is; None = read RANK / WORLD_SIZE / LOCAL_RANK from the environment (torchrun
    and accelerate set them; one process otherwise). ``pass_sync``: an FSDP run's ``World.max``,
    given only to engines that run passes over the sharded policy (engines.py: policy_passes)."""
    from replication.engines import ENGINES, EnginePlacement

    check_engine(cfg)
    return ENGINES.get(cfg.rollout.engine).build(
        cfg, model, tokenizer, add_special_tokens,
        placement if placement is not None else EnginePlacement.from_env(), pass_sync=pass_sync)
