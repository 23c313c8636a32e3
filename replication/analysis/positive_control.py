"""The positive-control regime study (issue 37, docs/positive_control.md) as data and decisions.

Its rule is declared in ``replication/specs/positive_control.yaml`` before any run; this module
reads it (``load_study``), lists the cells and the runs each stage asks for (``Cell``,
``run_name``, ``run_overrides``), and applies the declared decisions to what the runs measured:
the screen's ranking (``rank_screen``), the pilot's Holm-adjusted paired tests and pick
(``pilot_table``), the confirmation's number of seeds (``confirm_seeds``) and verdict
(``confirm_verdict``). It trains nothing: ``scripts/positive_control.py`` (DVC stage
``regime-positive-control``) runs the commands and writes the records.

Only two arms exist here, uniform and the true-p oracle; no method arm is ever named.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats as sps

SPEC = Path(__file__).resolve().parents[1] / "specs" / "positive_control.yaml"
ARMS = ("uniform", "oracle")
STAGES = ("screen", "pilot", "confirm")


def git_blob_hash(data: bytes) -> str:
    """The hash git gives the file's content (``git hash-object``): what every record carries,
    so a record made under another version of the rule is recognised as such."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Budget:
    mean_rollouts: int
    lower: int
    upper: int


@dataclasses.dataclass(frozen=True)
class Cell:
    """One level of every lever. ``order`` is the cell's place in the declared order."""

    budget: Budget
    prompts: int
    mix: str
    lr: float
    order: int = 0

    @property
    def name(self) -> str:
        b = self.budget
        return f"n{b.mean_rollouts}L{b.lower}U{b.upper}-q{self.prompts}-{_slug(self.mix)}-lr{self.lr:g}"

    @property
    def uniform_name(self) -> str:
        """Uniform spends n̄ on every prompt: its run is shared by the cells differing in L, U."""
        return f"n{self.budget.mean_rollouts}-q{self.prompts}-{_slug(self.mix)}-lr{self.lr:g}"

    def rollouts(self, steps: int) -> int:
        """Training rollouts of one run (prompts × n̄ × steps): the study's measure of cost."""
        return self.prompts * self.budget.mean_rollouts * steps


def _slug(text: str) -> str:
    return text.replace("/", "of")


@dataclasses.dataclass(frozen=True)
class Study:
    """The declared rule (field names follow the YAML file)."""

    profile: str
    arms: Mapping[str, Mapping]
    primary: Mapping[str, str]
    secondary: Sequence[Mapping[str, str]]
    budgets: tuple[Budget, ...]
    prompts: tuple[int, ...]
    mixes: Mapping[str, Mapping[str, int]]
    lrs: tuple[float, ...]
    screen: Mapping
    pilot: Mapping
    confirm: Mapping
    blob: str
    """git blob hash of the declaration file this study was read from."""

    def cells(self) -> list[Cell]:
        out = []
        for b in self.budgets:
            for q in self.prompts:
                for mix in self.mixes:
                    for lr in self.lrs:
                        out.append(Cell(b, q, mix, lr, order=len(out)))
        return out

    def cell(self, name: str) -> Cell:
        for c in self.cells():
            if c.name == name:
                return c
        raise KeyError(f"no cell {name!r} in the declared grid")

    def uniform_budget(self, mean_rollouts: int) -> Budget:
        """The bounds a uniform run is configured with: the first declared budget of its n̄
        (uniform never uses them; one run serves every L, U of that n̄)."""
        return next(b for b in self.budgets if b.mean_rollouts == mean_rollouts)


def load_study(path: str | Path = SPEC) -> Study:
    """Read and check the declaration; a malformed one raises ValueError naming the key."""
    path = Path(path)
    raw = path.read_bytes()
    d = yaml.safe_load(raw)
    try:
        lev = d["levers"]
        budgets = tuple(Budget(int(b["mean_rollouts"]), int(b["lower"]), int(b["upper"])) for b in lev["budget"])
        study = Study(profile=str(d["profile"]), arms=dict(d["arms"]), primary=dict(d["primary"]),
                      secondary=list(d.get("secondary") or []), budgets=budgets,
                      prompts=tuple(int(q) for q in lev["prompts_per_step"]),
                      mixes={str(k): {str(a): int(n) for a, n in v.items()} for k, v in lev["mix"].items()},
                      lrs=tuple(float(x) for x in lev["lr"]), screen=dict(d["screen"]), pilot=dict(d["pilot"]),
                      confirm=dict(d["confirm"]), blob=git_blob_hash(raw))
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: the declaration lacks or misforms {e}") from None
    if set(study.arms) != set(ARMS):
        raise ValueError(f"{path}: arms must be exactly {ARMS}, got {sorted(study.arms)}")
    for b in budgets:
        if not b.lower <= b.mean_rollouts <= b.upper:
            raise ValueError(f"{path}: budget {b} needs lower <= mean_rollouts <= upper")
    if min(study.pilot["seeds"]) < 100 or int(study.confirm["first_seed"]) < 100 or int(study.screen["seed"]) < 100:
        raise ValueError(f"{path}: the study's seeds must be >= 100 (0-99 belong to the reported tables)")
    return study


# ---- the runs ------------------------------------------------------------------------------

def run_name(cell: Cell, arm: str, seed: int) -> str:
    """``<cell>/<arm>/s<seed>``; a uniform run is named by its n̄ only (shared across L, U)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    return f"{cell.uniform_name if arm == 'uniform' else cell.name}/{arm}/s{seed}"


def run_overrides(study: Study, cell: Cell, arm: str) -> dict:
    """The dotted config keys of one run over the declared profile (``--set KEY=VALUE``)."""
    b = cell.budget if arm == "oracle" else study.uniform_budget(cell.budget.mean_rollouts)
    out = {"rollout.mean_rollouts": b.mean_rollouts, "rollout.lower": b.lower, "rollout.upper": b.upper,
           "rollout.prompts_per_step": cell.prompts, "optim.lr": cell.lr,
           "task.options": {**_profile_task_options(study.profile), "train_sizes": dict(study.mixes[cell.mix])}}
    out.update(study.arms[arm])
    return out


def _profile_task_options(profile: str) -> dict:
    """The profile's task options: a cell replaces the training pool (``train_sizes``) alone."""
    from replication.config import load_profile

    return dict(load_profile(profile).task.options)


def set_args(overrides: Mapping) -> list[str]:
    """``--set`` arguments (values as JSON, which the CLI parses)."""
    out = []
    for k, v in overrides.items():
        out += ["--set", f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}"]
    return out


# ---- the statistics ------------------------------------------------------------------------

def metric(metrics: Mapping, when: str, spec: Mapping[str, str]) -> float:
    """``metrics[when][set][metric]`` of a run (``when``: eval_before | eval_after)."""
    return float(metrics[when][spec["set"]][spec["metric"]])


def gain(metrics: Mapping, spec: Mapping[str, str]) -> float:
    return metric(metrics, "eval_after", spec) - metric(metrics, "eval_before", spec)


def screen_statistic(gradvar: pd.DataFrame) -> tuple[float, dict[int, float]]:
    """The oracle's noise-to-signal ratio to uniform's, mean over the checkpoints where it is
    defined (the declaration); NaN when it is defined at none."""
    rows = gradvar[(gradvar["method"] == "vip-oracle") & (gradvar["metric"] == "noise_to_signal_vs_uniform")]
    per = {int(r.step): float(r.value) for r in rows.itertuples()}
    ok = [v for v in per.values() if np.isfinite(v)]
    return (float(np.mean(ok)) if ok else math.nan), per


def rank_screen(screen: pd.DataFrame, study: Study, steps: int) -> pd.DataFrame:
    """Add ``eligible``, ``rank`` and ``piloted`` to the screen's rows (one per cell: ``cell``,
    ``statistic``, ``uniform_gain``): eligible cells by ascending statistic, undefined ones last,
    ties by fewer rollouts per run, then the declared order."""
    df = screen.copy()
    cells = {c.name: c for c in study.cells()}
    df["rollouts"] = [cells[n].rollouts(steps) for n in df["cell"]]
    df["order"] = [cells[n].order for n in df["cell"]]
    df["eligible"] = df["uniform_gain"] > float(study.screen["eligible_min_gain"])
    key = df.assign(_undef=~np.isfinite(df["statistic"]), _stat=df["statistic"].fillna(np.inf))
    key = key.sort_values(["eligible", "_undef", "_stat", "rollouts", "order"],
                          ascending=[False, True, True, True, True])
    df["rank"] = 0
    df.loc[key.index, "rank"] = np.arange(1, len(df) + 1)
    df.loc[~df["eligible"], "rank"] = 0
    n = int(study.screen["pilot_cells"])
    df["piloted"] = df["eligible"] & (df["rank"] >= 1) & (df["rank"] <= n)
    return df.sort_values("order").reset_index(drop=True)


def _t_interval(x: np.ndarray, level: float) -> tuple[float, float]:
    if len(x) < 2:
        return math.nan, math.nan
    half = sps.t.ppf(0.5 + level / 2, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return float(x.mean() - half), float(x.mean() + half)


def _one_sided_p(d: np.ndarray) -> float:
    """Paired one-sided t-test of mean d > 0 (NaN with fewer than 2 pairs; 0 or 1 for a
    constant non-zero d)."""
    if len(d) < 2:
        return math.nan
    if np.all(d == d[0]):
        return 0.0 if d[0] > 0 else 1.0
    return float(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue)


def paired_rows(pairs: pd.DataFrame, level: float) -> pd.DataFrame:
    """Per cell, from rows (cell, seed, uniform_after, oracle_after, uniform_gain[, secondary]):
    n, mean and sd of d = oracle − uniform, its one-sided p, and uniform's gain with its interval."""
    out = []
    if pairs.empty:
        return pd.DataFrame(out)
    for cell, g in pairs.groupby("cell", sort=False):
        d = (g["oracle_after"] - g["uniform_after"]).to_numpy(float)
        ug = g["uniform_gain"].to_numpy(float)
        lo, hi = _t_interval(d, 0.95)
        glo, ghi = _t_interval(ug, level)
        out.append({"cell": cell, "n": len(d), "diff": float(d.mean()), "diff_lo": lo, "diff_hi": hi,
                    "diff_sd": float(np.std(d, ddof=1)) if len(d) > 1 else math.nan, "p_one_sided": _one_sided_p(d),
                    "uniform_gain": float(ug.mean()), "uniform_gain_lo": glo, "uniform_gain_hi": ghi})
    return pd.DataFrame(out)


def pilot_table(pairs: pd.DataFrame, study: Study, steps: int) -> tuple[pd.DataFrame, str | None]:
    """The pilot's rows with the Holm-adjusted p over the piloted cells and ``passed``; the pick
    (largest mean difference among the passing cells, ties by fewer rollouts) or None."""
    from replication.report.stats import holm

    df = paired_rows(pairs, float(study.pilot["baseline_ci"]))
    if df.empty:
        return df, None
    df["p_holm"] = holm(df["p_one_sided"])
    df["passed"] = (df["p_holm"] < float(study.pilot["alpha"])) & (df["uniform_gain_lo"] > 0) & (df["diff"] > 0)
    cells = {c.name: c for c in study.cells()}
    df["rollouts"] = [cells[c].rollouts(steps) for c in df["cell"]]
    passing = df[df["passed"]].sort_values(["diff", "rollouts"], ascending=[False, True])
    return df, (None if passing.empty else str(passing.iloc[0]["cell"]))


def confirm_seeds(pilot_sd: float, study: Study) -> int:
    """The smallest n in [min_seeds, max_seeds] with (t_{1−α,n−1} + t_{power,n−1})·sd/√n ≤ effect,
    sd the pilot's paired sd floored at ``sd_floor``; max_seeds when none reaches it."""
    c = study.confirm
    sd = max(float(pilot_sd) if np.isfinite(pilot_sd) else 0.0, float(c["sd_floor"]))
    for n in range(int(c["min_seeds"]), int(c["max_seeds"]) + 1):
        mde = (sps.t.ppf(1 - float(c["alpha"]), n - 1) + sps.t.ppf(float(c["power"]), n - 1)) * sd / math.sqrt(n)
        if mde <= float(c["effect"]):
            return n
    return int(c["max_seeds"])


def confirm_seed_list(n: int, study: Study) -> list[int]:
    first = int(study.confirm["first_seed"])
    return list(range(first, first + n))


def confirm_verdict(pairs: pd.DataFrame, study: Study) -> dict:
    """The confirmation's one test: one-sided paired p < alpha and uniform's gain interval > 0."""
    df = paired_rows(pairs, 0.95)
    if df.empty:
        return {"confirmed": False, "reason": "no confirmation runs"}
    r = df.iloc[0].to_dict()
    r["confirmed"] = bool(r["p_one_sided"] < float(study.confirm["alpha"]) and r["uniform_gain_lo"] > 0
                          and r["diff"] > 0)
    return r
