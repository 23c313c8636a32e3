"""What a run writes while it trains: per-step metrics and per-prompt records.

- ``steps.jsonl``: one line per step (reward, accuracy, zero-variance fraction, grad norm,
  entropy, counts histogram, allocator and step time ...). The source of truth.
- ``prompts.jsonl``: one line per (step, prompt): n, successes, predicted p, bin, weight.
- ``dvclive/``: the same per-step scalars through dvclive, for ``dvc plots`` and Studio.

On resume both JSONL files are cut back to the checkpoint's step and dvclive is rebuilt from
``steps.jsonl``, so a killed-and-resumed run leaves exactly the files of an uninterrupted one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

# Scalars mirrored to dvclive; the rest (histograms, lists) stay in steps.jsonl only.
LIVE_KEYS = (
    "reward",
    "accuracy",
    "zero_variance_frac",
    "effective_rollout_frac",
    "grad_norm",
    "entropy",
    "clipfrac",
    "allocator_seconds",
    "step_seconds",
)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x


def _truncate_jsonl(path: Path, last_step: int) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["step"] <= last_step]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


class RunLog:
    def __init__(self, run_dir: Path, resume_step: int | None, use_dvclive: bool = True) -> None:
        self.dir = Path(run_dir)
        self.steps_path = self.dir / "steps.jsonl"
        self.prompts_path = self.dir / "prompts.jsonl"
        last = -1 if resume_step is None else resume_step
        if resume_step is None:
            for p in (self.steps_path, self.prompts_path):
                p.unlink(missing_ok=True)
        previous = _truncate_jsonl(self.steps_path, last)
        _truncate_jsonl(self.prompts_path, last)
        self.live = None
        if use_dvclive:
            from dvclive import Live

            shutil.rmtree(self.dir / "dvclive", ignore_errors=True)
            self.live = Live(str(self.dir / "dvclive"), save_dvc_exp=False, dvcyaml=False)
            for row in previous:
                self._to_live(row)

    def _to_live(self, row: dict) -> None:
        if self.live is None:
            return
        self.live.step = int(row["step"])
        for key in LIVE_KEYS:
            if key in row and row[key] is not None:
                self.live.log_metric(f"train/{key}", float(row[key]))
        self.live.next_step()

    def log_step(self, row: dict, prompt_rows: list[dict]) -> None:
        row = _jsonable(row)
        with open(self.steps_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        with open(self.prompts_path, "a") as f:
            for pr in prompt_rows:
                f.write(json.dumps(_jsonable(pr)) + "\n")
        self._to_live(row)

    def close(self) -> None:
        if self.live is not None:
            self.live.end()
