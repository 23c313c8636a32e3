"""Load a results folder of exported runs into tidy pandas frames.

``orchestration.grid.run_grid`` exports each (arm, seed) run to OUT/<arm>/s<seed>/ with
metrics.json, steps.jsonl, config.json and prompts.jsonl.gz (train/loop.py writes the rows).
Every loader takes that OUT folder (or run_grid's returned frame with arm, seed, dir columns,
which keeps the arms' display names) and adds ``arm`` and ``seed`` columns:

- ``list_runs``: one row per run (allocator, estimator, wall time, allocator overhead ...).
- ``load_eval``: one row per (arm, seed, phase, set, metric) with phase "before"/"after".
- ``load_steps``: steps.jsonl rows; list fields (counts_hist, weight_mass_per_bin) kept as lists.
- ``load_prompts``: per-(step, prompt) records, read from the gzip.

Every run folder is verified before it is read (run_evidence.verify_run: its manifest, and rows
consistent with metrics): a cut, edited or unsealed run is a ``DamagedArtifact`` naming it,
never loaded silently. A ``s<seed>`` folder under an arm is a run, so a seed whose metrics.json
is gone is an error, not a seed fewer.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from replication.store.run_evidence import prompts_file, read_json, read_jsonl, verify_run
from replication.store import DamagedArtifact

SEED_DIR = re.compile(r"^s(\d+)$")
PHASES = {"eval_before": "before", "eval_after": "after"}

_read_json = read_json  # one line naming a cut or damaged file (run_evidence)
_read_jsonl = read_jsonl
_VERIFIED: dict[tuple, bool] = {}


def _fingerprint(d: Path) -> tuple:
    """What would change if a file of ``d`` changed: every file's name, size and mtime."""
    return (str(d.resolve()), *sorted((str(f.relative_to(d)), st.st_size, st.st_mtime_ns)
                                      for f in d.rglob("*") if f.is_file() for st in [f.stat()]))


def verified(d: Path) -> Path:
    """``d`` once its manifest and rows check out (run_evidence.verify_run; remembered until a
    file of it changes); DamagedArtifact naming it otherwise."""
    d = Path(d)
    if not d.is_dir():
        raise DamagedArtifact(f"run folder {d} is missing")
    key = _fingerprint(d)
    if key not in _VERIFIED:
        verify_run(d)
        _VERIFIED[key] = True
    return d


def _run_dirs(source: str | Path | pd.DataFrame) -> list[tuple[str, int, Path]]:
    if isinstance(source, pd.DataFrame):
        missing = {"arm", "seed", "dir"} - set(source.columns)
        if missing:
            raise ValueError(f"run frame lacks columns {sorted(missing)} (expected run_grid's output)")
        return [(str(r.arm), int(r.seed), verified(Path(r.dir))) for r in source.itertuples()]
    root = Path(source)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    out = []
    for arm_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for seed_dir in sorted(arm_dir.iterdir()):
            m = SEED_DIR.match(seed_dir.name)
            if m and seed_dir.is_dir():
                out.append((arm_dir.name, int(m.group(1)), verified(seed_dir)))
    if not out:
        raise FileNotFoundError(f"no runs under {root}: expected <arm>/s<seed>/metrics.json")
    return out


def list_runs(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """One row per run: arm, seed, dir, allocator, estimator, modulation, prompt_weights, steps,
    budget_per_step, rollouts_total, wall_seconds, allocator_seconds and prompt_weights_seconds
    (Prompt-GDRO's weights + observe; both summed over steps), allocator_share =
    allocator_seconds / wall_seconds (VIP's overhead measure, vip.md), probe_seconds and
    probe_rollouts (the rollouts an arm told p by a probe spends outside its budget, e.g.
    RLOO+phat16's 16 per prompt; 0 for every other arm), overhead_seconds = all three together
    (a probe is part of what that arm's method costs: issue 37.5), overhead_share =
    overhead_seconds / wall_seconds, probe_share = probe_seconds / wall_seconds and
    overhead_per_step (seconds; the GDRO paper's per-step figure)."""
    rows = []
    for arm, seed, d in _run_dirs(source):
        m = _read_json(d / "metrics.json")
        steps = _read_jsonl(d / "steps.jsonl")  # verified: one row per step
        n_steps = len(steps)
        alloc_s = float(sum(r.get("allocator_seconds", 0.0) for r in steps))
        pw_s = float(sum(r.get("prompt_weights_seconds", 0.0) for r in steps))
        probe_s = float(sum(r.get("probe_seconds", 0.0) or 0.0 for r in steps))
        probe_n = int(sum(r.get("probe_rollouts", 0) or 0 for r in steps))
        over = alloc_s + pw_s + probe_s
        wall = float(m.get("wall_seconds", np.nan))
        rows.append({
            "arm": arm, "seed": seed, "dir": str(d),
            **{k: m.get(k) for k in ("allocator", "estimator", "modulation", "prompt_weights", "steps",
                                     "budget_per_step", "rollouts_total")},
            "wall_seconds": wall,
            "allocator_seconds": alloc_s,
            "allocator_share": alloc_s / wall if wall > 0 else np.nan,
            "prompt_weights_seconds": pw_s,
            "probe_seconds": probe_s,
            "probe_rollouts": probe_n,
            "probe_share": probe_s / wall if wall > 0 else np.nan,
            "overhead_seconds": over,
            "overhead_share": over / wall if wall > 0 else np.nan,
            "overhead_per_step": over / n_steps if n_steps else np.nan,
        })
    return pd.DataFrame(rows)


def load_eval(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Held-out metrics, tidy: arm, seed, phase (before/after), set, metric, value.

    Sets are the held-out sets by name plus the evaluator's "average" (mean over sets) and
    "pooled" (all held-out prompts together, GDRO's pooled pass@k). n_prompts is kept as a
    metric row too.
    """
    rows = []
    for arm, seed, d in _run_dirs(source):
        m = _read_json(d / "metrics.json")
        for key, phase in PHASES.items():
            for set_name, metrics in m[key].items():  # verified: both phases present
                for metric, value in metrics.items():
                    rows.append({"arm": arm, "seed": seed, "phase": phase, "set": set_name,
                                 "metric": metric, "value": float(value)})
    return pd.DataFrame(rows, columns=["arm", "seed", "phase", "set", "metric", "value"])


def load_steps(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """All steps.jsonl rows with arm and seed; missing optional fields are NaN."""
    frames = []
    for arm, seed, d in _run_dirs(source):
        df = pd.DataFrame(_read_jsonl(d / "steps.jsonl"))
        df.insert(0, "seed", seed)
        df.insert(0, "arm", arm)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def load_prompts(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """All per-(step, prompt) records with arm and seed, plus rate = successes / n.

    Reads prompts.jsonl.gz (the export) or, for an unexported run folder, prompts.jsonl.
    predicted_p and bin are NaN where the allocator logged none.
    """
    from tqdm import tqdm

    frames = []
    for arm, seed, d in tqdm(_run_dirs(source), desc="per-prompt records", unit="run", leave=False):
        df = pd.DataFrame(_read_jsonl(prompts_file(d)))
        df.insert(0, "seed", seed)
        df.insert(0, "arm", arm)
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    for col in ("predicted_p", "bin", "weight", "loss"):
        out[col] = pd.to_numeric(out[col], errors="coerce") if col in out else np.nan
    out["rate"] = out["successes"] / out["n"].where(out["n"] > 0)
    return out


def load_config(run_dir: str | Path) -> dict:
    """The resolved TrainConfig of one run as a dict (config.json)."""
    return _read_json(verified(Path(run_dir)) / "config.json")
