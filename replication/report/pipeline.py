"""A paper's exported runs as tidy frames (what the notebooks read; nothing here trains).

``replication.orchestration.grid.run_paper`` trains or loads the grid and returns a ``PaperRun``
built by ``load_paper_run``; the notebooks then draw the paper's tables and figures from it.

Every run is verified as it is read (runs.py), and ``load_paper_run`` checks that each
(arm, seed) asked for is there with the same held-out sets and metrics as its arm's other seeds:
a seed never drops out silently (which would turn a paired test into an unpaired one).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from replication.report.runs import load_eval, load_prompts, load_steps
from replication.report.tables import add_holm, compare_to_baseline
from replication.report.true_p import ORACLE_ARMS  # each paper's positive control (params.yaml arms; issue 37.1)
from replication.store import DamagedArtifact


@dataclasses.dataclass
class PaperRun:
    paper: str
    profile: str
    seeds: list[int]
    arms: list[str]
    """Arm display names, in params.yaml order."""
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
        return list(self.arms)


def load_paper_run(paper: str, profile: str, seeds: list[int], arms: list[str],
                   baselines: dict[str, str], out: str | Path, runs: pd.DataFrame) -> PaperRun:
    """Read the exported runs listed in ``runs`` (arm, seed, dir columns)."""
    names = set(arms)
    pairs = {m: b for m, b in baselines.items() if m in names and b in names}
    ev = load_eval(runs)
    check_every_seed(ev, runs, arms, seeds)
    return PaperRun(paper, profile, list(seeds), list(arms), pairs, Path(out), runs,
                    ev, load_steps(runs), load_prompts(runs))


def check_every_seed(ev: pd.DataFrame, runs: pd.DataFrame, arms: list[str], seeds: list[int]) -> None:
    """Every (arm, seed) has a run, and each run has the (phase, set, metric) values of its
    arm's other seeds; DamagedArtifact naming the run otherwise."""
    have = {(str(r.arm), int(r.seed)): r.dir for r in runs.itertuples()}
    for arm in arms:
        lost = [s for s in seeds if (arm, int(s)) not in have]
        if lost:
            raise DamagedArtifact(f"arm {arm!r}: no run for seed(s) {lost}; every seed must be there "
                                  f"(a missing seed would turn paired tests into unpaired ones)")
        keys = {s: set(zip(*(g[c] for c in ("phase", "set", "metric"))))
                for s, g in ev[ev["arm"] == arm].groupby("seed")}
        union = set().union(*keys.values()) if keys else set()
        for s in seeds:
            gap = union - keys.get(int(s), set())
            if gap:
                phase, set_name, metric = sorted(gap)[0]
                raise DamagedArtifact(f"{have[(arm, int(s))]}: metrics.json lacks {phase} {set_name} "
                                      f"{metric} that the arm's other seeds have ({len(gap)} value(s) "
                                      f"missing); seed {s} would drop out of the comparisons")


def comparisons(pr: PaperRun, phase: str = "after") -> pd.DataFrame:
    """Each method against its own baseline (paired over seeds), Holm-adjusted over ALL of the
    paper's comparisons (one family per paper; tables.add_holm).

    The Holm p-values are also left on ``pr.ev.attrs["holm"]`` as {(arm, baseline, set, metric):
    p_holm} (paper_tables.paper_vs_ours takes them from there) and carries ``attrs`` paper and tables (the folder where the
    notebook writes its tables; conclusions reads the predictor study from it)."""
    frames = []
    for base in dict.fromkeys(pr.baselines.values()):
        members = [m for m, b in pr.baselines.items() if b == base]
        ev = pr.ev[pr.ev["arm"].isin([base, *members])]
        frames.append(compare_to_baseline(ev, base, phase=phase))
    out = add_holm(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    out.attrs.update({"paper": pr.paper, "tables": str(pr.out / "tables")})
    if not out.empty:
        pr.ev.attrs["holm"] = {(r.arm, r.baseline, r.set, r.metric): float(r.p_holm) for r in out.itertuples()}
    return out



def oracle_shares(pr: PaperRun) -> pd.DataFrame:
    """Every method's share of its paper's true-p oracle gain (report/oracle_share.py), against the
    oracle's own baseline; one row saying so when the oracle arm did not run."""
    from replication.report.oracle_share import oracle_share

    oracle = ORACLE_ARMS[pr.paper]
    if oracle not in set(pr.ev["arm"]) or oracle not in pr.baselines:
        return pd.DataFrame([{"oracle": oracle, "note": f"{oracle} did not run (params.yaml `run`): no share computed"}])
    base = pr.baselines[oracle]
    methods = [a for a, b in pr.baselines.items() if b == base and a != oracle]
    return oracle_share(pr.ev, base, oracle, methods, sets=("average",))


def prompt_texts(profile: str, overrides: dict | None = None) -> dict:
    """Prompt id → text of the train pool of ``profile`` with the notebook's ``overrides`` (a
    changed task option changes the pool; the runs log ids only)."""
    from replication.config import load_profile
    from replication.tasks.data import build_data

    data = build_data(load_profile(profile, overrides))
    return dict(zip(data.train.ids, data.train.texts))


def runs_of(pr: PaperRun, arm: str) -> pd.DataFrame:
    return pr.prompts[pr.prompts["arm"] == arm]
