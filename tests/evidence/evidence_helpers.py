"""Small helpers for the evidence tests (issue 18): a synthetic finished run folder or export in
the real file formats, the train CLI arguments, and the one-line error check."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from replication.store import write_manifest

ROOT = Path(__file__).resolve().parents[2]
Q = 4
"""Prompts per step of the synthetic runs."""


def synthetic_record(*, seed: int = 0, steps: int = 3) -> dict:
    """A key record (store.run_key) whose config is the synthetic runs' config.json."""
    from replication.store.run_key import key_record

    return key_record(config={"seed": seed, "rollout": {"prompts_per_step": Q}}, steps=steps, command=["train"],
                      shape={"nodes": 1, "processes": 1}, code="synthetic", inputs={}, revisions={})


def synthetic_run(dest: Path, *, seed: int = 0, steps: int = 3, kind: str = "run", key: str | None = None,
                  shift: float = 0.0, seal: bool = True, record: dict | None = None) -> Path:
    """A finished run folder (kind "run": prompts.jsonl) or export (kind "export":
    prompts.jsonl.gz) with ``steps`` steps of ``Q`` prompts, sealed by its manifest. ``record``:
    a key record written as key.json, its config as config.json (what ``ensure_run`` and the
    trainer write); ``key``: a legacy export's run.json instead."""
    dest.mkdir(parents=True, exist_ok=True)
    if record is not None:
        key = record["key"]
        (dest / "key.json").write_text(json.dumps(record))
    ev = {"average": {"mean@2": 0.4 + shift + 0.01 * seed, "pass@2": 0.6 + shift + 0.01 * seed},
          "pooled": {"mean@2": 0.4 + shift + 0.01 * seed, "pass@2": 0.6 + shift}}
    (dest / "metrics.json").write_text(json.dumps({"seed": seed, "steps": steps, "allocator": "uniform",
                                                   "eval_before": ev, "eval_after": ev,
                                                   "wall_seconds": 1.0}, indent=1))
    config = record["inputs"]["config"] if record is not None else {"seed": seed, "rollout": {"prompts_per_step": Q}}
    (dest / "config.json").write_text(json.dumps(config))
    (dest / "steps.jsonl").write_text("".join(json.dumps({"step": t, "reward": 0.5}) + "\n"
                                              for t in range(steps)))
    rows = "".join(json.dumps({"step": t, "prompt_id": f"p{i}", "n": 2, "successes": 1}) + "\n"
                   for t in range(steps) for i in range(config["rollout"]["prompts_per_step"]))
    if kind == "export":
        with gzip.open(dest / "prompts.jsonl.gz", "wt") as f:
            f.write(rows)
        if key is not None and record is None:
            (dest / "run.json").write_text(json.dumps({"key": key}) + "\n")
    else:
        (dest / "prompts.jsonl").write_text(rows)
    if seal:
        extra = {"steps": steps} if key is None else {"steps": steps, "key": key}
        write_manifest(dest, kind=kind, extra=extra)
    return dest


def train_args(small: dict, out: Path, *extra: str, overrides: dict | None = None) -> list[str]:
    o = {**small, **(overrides or {})}
    args = ["train", "--profile", "default", "--out", str(out), "--no-progress", "--seed", "0"]
    for k, v in o.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "replication", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_line_error(err: str, *needles: str) -> str:
    """Exactly one ``error:`` line, no traceback, naming every needle; returns the line."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]
