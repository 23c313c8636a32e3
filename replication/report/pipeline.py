"""Notebook glue: read a paper's section of params.yaml, train its arms, load the results.

The notebooks stay thin: ``pr = run_paper("vip")`` trains (or reuses) every arm × seed at the
same budget and returns tidy frames; the notebook then draws the paper's tables and figures.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from replication.experiments import Arm, run_grid
from replication.report.runs import load_eval, load_prompts, load_steps
from replication.report.tables import compare_to_baseline

QUICK_PROFILE = "quick"


@dataclasses.dataclass
class PaperRun:
    paper: str
    profile: str
    seeds: list[int]
    arms: list[Arm]
    baselines: dict[str, str]
    """method arm → its baseline arm (only pairs whose arms both ran)."""
    out: Path
    runs: pd.DataFrame
    ev: pd.DataFrame
    steps: pd.DataFrame
    prompts: pd.DataFrame

    @property
    def figures(self) -> Path:
        p = self.out / "figures"
        p.mkdir(parents=True, exist_ok=True)
        return p

    @property
    def tables(self) -> Path:
        p = self.out / "tables"
        p.mkdir(parents=True, exist_ok=True)
        return p

    def arm_names(self) -> list[str]:
        return [a.name for a in self.arms]


def load_section(section: str, params_file: str | Path = "params.yaml") -> dict[str, Any]:
    params = yaml.safe_load(Path(params_file).read_text())
    if section not in params:
        raise KeyError(f"{params_file} has no section {section!r}")
    sec = dict(params[section])
    sec["profile"] = params.get("profile", "default")
    sec["workers"] = int(params.get("workers", 2))
    return sec


def select_arms(sec: dict) -> tuple[list[Arm], list[int]]:
    """Arms (base overrides + the arm's own) and seeds; the quick profile keeps one seed and the
    section's ``main`` arms."""
    names = list(sec["arms"])
    seeds = [int(s) for s in sec["seeds"]]
    if sec["profile"] == QUICK_PROFILE:
        names = [n for n in names if n in set(sec.get("main", names))]
        seeds = seeds[:1]
    base = dict(sec.get("base") or {})
    arms = [Arm(n, {**base, **(sec["arms"][n] or {})}) for n in names]
    return arms, seeds


def run_paper(section: str, params_file: str | Path = "params.yaml", out_root: str | Path = "results",
              workers: int | None = None) -> PaperRun:
    sec = load_section(section, params_file)
    arms, seeds = select_arms(sec)
    out = Path(out_root) / section
    runs = run_grid(sec["profile"], arms, seeds, out / "runs", steps=sec.get("steps"),
                    workers=workers or sec["workers"])
    names = {a.name for a in arms}
    baselines = {m: b for m, b in (sec.get("baseline") or {}).items() if m in names and b in names}
    return PaperRun(section, sec["profile"], seeds, arms, baselines, out, runs,
                    load_eval(runs), load_steps(runs), load_prompts(runs))


def comparisons(pr: PaperRun, phase: str = "after") -> pd.DataFrame:
    """Each method against its own baseline (paired over seeds)."""
    frames = []
    for base in dict.fromkeys(pr.baselines.values()):
        members = [m for m, b in pr.baselines.items() if b == base]
        ev = pr.ev[pr.ev["arm"].isin([base, *members])]
        frames.append(compare_to_baseline(ev, base, phase=phase))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def prompt_texts(profile: str) -> dict:
    """Prompt id → text of the profile's train pool (the runs log ids only)."""
    from replication.config import load_profile
    from replication.train.setup import build_data

    data = build_data(load_profile(profile))
    return dict(zip(data.train.ids, data.train.texts))


def runs_of(pr: PaperRun, arm: str) -> pd.DataFrame:
    return pr.prompts[pr.prompts["arm"] == arm]
