"""What a run writes while it trains: per-step metrics and per-prompt records.

- ``steps.jsonl``: one line per step (reward, accuracy, zero-variance fraction, grad norm,
  entropy, counts histogram, allocator and step time ...). The source of truth.
- ``prompts.jsonl``: one line per (step, prompt): n, successes, predicted p, bin, weight.
- ``dvclive/``: the same per-step scalars through dvclive, for ``dvc plots`` and Studio.

On resume both JSONL files are cut back to the checkpoint's step and dvclive is rebuilt from
``steps.jsonl``, so a killed-and-resumed run leaves exactly the files of an uninterrupted one.
The checkpoint is the truth: a partial last line (a kill or a full disk in the middle of a write)
is trimmed with a warning; a damaged line before it, or logs that stop before the checkpoint's
step, make the checkpoint unresumable (``logs_problem``, checked by run_folder.prepare_run).

A write that fails (disk full, file-size limit, permissions, I/O error) is cut back to the last
whole line when possible and raises ``store.DiskFull``: one line naming the file and the free
space on its disk. dvclive's writes (and the DVC repository it opens) are guarded the same way;
its folder is rebuilt from ``steps.jsonl`` on resume, so a failure there loses nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from replication.store import MANIFEST, io_errors, write_atomic

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


class LogDamaged(ValueError):
    """A log line that is not JSON before the last line: the log cannot be trusted."""


def read_rows(path: Path) -> tuple[list[dict], bool]:
    """The JSONL rows of ``path`` and whether its last line is partial (cut mid-write: not JSON,
    no newline). A bad line elsewhere raises ``LogDamaged`` naming the file and line."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    partial = False
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:  # the last line, without its newline: a cut write
                partial = True
                continue
            raise LogDamaged(f"{path} line {i + 1} is not JSON (damaged log)") from None
    return rows, partial


def logs_problem(run_dir: Path, steps_done: int) -> str | None:
    """Why the logs of ``run_dir`` cannot continue a checkpoint taken after ``steps_done`` steps
    (None when they can): both logs must hold every step 0..steps_done-1 (rows past it are cut
    on resume)."""
    for name in ("steps.jsonl", "prompts.jsonl"):
        path = Path(run_dir) / name
        if not path.exists():
            return f"{path} is missing" if steps_done else None
        try:
            rows, _ = read_rows(path)
        except LogDamaged as e:
            return str(e)
        except OSError as e:
            return f"{path} cannot be read ({e.strerror or e})"
        try:
            logged = {int(r["step"]) for r in rows}
        except (KeyError, TypeError, ValueError):
            return f"{path} has a row without a step number"
        missing = sorted(set(range(steps_done)) - logged)
        if missing:
            return (f"{path} holds {len(set(range(steps_done)) & logged)} of the checkpoint's "
                    f"{steps_done} steps (first missing: step {missing[0]})")
        if name == "steps.jsonl" and sum(1 for r in rows if int(r["step"]) < steps_done) != steps_done:
            return f"{path} has duplicate rows before step {steps_done}"
    return None


def trim_partial_lines(run_dir: Path) -> None:
    """Cut a partial last line from both logs, with a warning naming the file."""
    for name in ("steps.jsonl", "prompts.jsonl"):
        path = Path(run_dir) / name
        if not path.exists():
            continue
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data) and data[cut:].strip():
            try:
                json.loads(data[cut:])
                continue  # a whole row without its newline: kept (RunLog rewrites the file)
            except ValueError:
                pass
            warnings.warn(f"{path}: partial last line ({len(data) - cut} bytes, a cut write) "
                          f"removed; the checkpoint is the truth", stacklevel=2)
            with open(path, "r+b") as f:
                f.truncate(cut)


def _truncate_jsonl(path: Path, last_step: int) -> list[dict]:
    if not path.exists():
        return []
    rows, _ = read_rows(path)
    rows = [r for r in rows if r["step"] <= last_step]
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _write(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a full disk shows up here as OSError ENOSPC, maybe after a part)."""
    while data:
        data = data[os.write(fd, data):]


def _append(path: Path, lines: list[str]) -> None:
    """Append whole lines; a failed write is cut back to where the file was (when the disk lets
    us) and raises ``DiskFull``. Unbuffered, so nothing is left to fail again at close."""
    with io_errors(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                _write(fd, "".join(lines).encode())
            except OSError:
                with contextlib.suppress(OSError):  # else left partial: --resume trims it
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


class RunLog:
    def __init__(self, run_dir: Path, resume_step: int | None, use_dvclive: bool = True) -> None:
        self.dir = Path(run_dir)
        self.steps_path = self.dir / "steps.jsonl"
        self.prompts_path = self.dir / "prompts.jsonl"
        last = -1 if resume_step is None else resume_step
        # the logs change from here on: the run is unfinished until finish_run seals it again
        # (a finished run resumed to more steps loses its old manifest and metrics first)
        for stale in (MANIFEST, "metrics.json"):
            (self.dir / stale).unlink(missing_ok=True)
        if resume_step is None:
            for p in (self.steps_path, self.prompts_path):
                p.unlink(missing_ok=True)
        previous = _truncate_jsonl(self.steps_path, last)
        _truncate_jsonl(self.prompts_path, last)
        self.live = None
        if use_dvclive:
            from dvclive import Live

            shutil.rmtree(self.dir / "dvclive", ignore_errors=True)
            with io_errors(self.dir / "dvclive"):
                self.live = Live(str(self.dir / "dvclive"), save_dvc_exp=False, dvcyaml=False)
            for row in previous:
                self._to_live(row)

    def _to_live(self, row: dict) -> None:
        if self.live is None:
            return
        with io_errors(self.dir / "dvclive"):  # a full disk here is one line, not dvclive's traceback
            self.live.step = int(row["step"])
            for key in LIVE_KEYS:
                if key in row and row[key] is not None:
                    self.live.log_metric(f"train/{key}", float(row[key]))
            self.live.next_step()

    def log_step(self, row: dict, prompt_rows: list[dict]) -> None:
        row = _jsonable(row)
        _append(self.steps_path, [json.dumps(row) + "\n"])
        _append(self.prompts_path, [json.dumps(_jsonable(pr)) + "\n" for pr in prompt_rows])
        self._to_live(row)

    def close(self) -> None:
        if self.live is not None:
            with io_errors(self.dir / "dvclive"):
                self.live.end()
