"""The positive-control study's outputs (docs/positive_control.md): ``positive_control.csv``, one
row per declared cell with what each stage measured and decided, the heat-map
``positive_control.png`` of oracle vs uniform over the grid, and ``positive_control/study.json``
(the status, the pick, the verdict, the declaration's hash). Written whole by
scripts/positive_control.py after every invocation, complete or not (its ``status`` says how far).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ("cell", "mean_rollouts", "lower", "upper", "prompts", "mix", "lr", "rollouts_per_run",
           "screen_noise_to_signal_ratio", "screen_ratio_by_checkpoint", "screen_zero_variance_share",
           "screen_uniform_gain", "eligible", "rank", "piloted",
           "pilot_n", "pilot_diff", "pilot_diff_lo", "pilot_diff_hi", "pilot_diff_sd", "pilot_p", "pilot_p_holm",
           "pilot_uniform_gain", "pilot_uniform_gain_lo", "pilot_uniform_gain_hi", "pilot_passed", "pick",
           "confirm_n", "confirm_diff", "confirm_diff_lo", "confirm_diff_hi", "confirm_p",
           "confirm_uniform_gain_lo", "confirmed",
           "oracle_probe_rollouts_per_run", "oracle_probe_seconds_per_run", "oracle_wall_over_uniform")


def cell_table(spec, screen: pd.DataFrame, pilot: pd.DataFrame, pick: str | None,
               confirm: pd.DataFrame, verdict: dict | None, pairs_fn) -> pd.DataFrame:
    """One row per declared cell (the declared order); NaN where a stage did not reach it."""
    from replication.analysis.positive_control import paired_rows

    cells = spec.cells()
    steps_rollouts = dict(zip(screen["cell"], screen["rollouts"]))
    scr = screen.set_index("cell")
    pil = pilot.set_index("cell") if not pilot.empty else pd.DataFrame()
    rows = []
    for c in cells:
        s = scr.loc[c.name]
        r = {"cell": c.name, "mean_rollouts": c.budget.mean_rollouts, "lower": c.budget.lower,
             "upper": c.budget.upper, "prompts": c.prompts, "mix": c.mix, "lr": c.lr,
             "rollouts_per_run": int(steps_rollouts[c.name]),
             "screen_noise_to_signal_ratio": s["statistic"], "screen_ratio_by_checkpoint": s["ratio_by_checkpoint"],
             "screen_zero_variance_share": s["zero_variance_share"], "screen_uniform_gain": s["uniform_gain"],
             "eligible": bool(s["eligible"]), "rank": int(s["rank"]), "piloted": bool(s["piloted"]),
             "pick": c.name == pick}
        if c.name in pil.index:
            p = pil.loc[c.name]
            r.update({"pilot_n": p["n"], "pilot_diff": p["diff"], "pilot_diff_lo": p["diff_lo"],
                      "pilot_diff_hi": p["diff_hi"], "pilot_diff_sd": p["diff_sd"], "pilot_p": p["p_one_sided"],
                      "pilot_p_holm": p["p_holm"], "pilot_uniform_gain": p["uniform_gain"],
                      "pilot_uniform_gain_lo": p["uniform_gain_lo"], "pilot_uniform_gain_hi": p["uniform_gain_hi"],
                      "pilot_passed": bool(p["passed"])})
        if c.name == pick and not confirm.empty:
            q = paired_rows(confirm, 0.95).iloc[0]
            r.update({"confirm_n": q["n"], "confirm_diff": q["diff"], "confirm_diff_lo": q["diff_lo"],
                      "confirm_diff_hi": q["diff_hi"], "confirm_p": q["p_one_sided"],
                      "confirm_uniform_gain_lo": q["uniform_gain_lo"],
                      "confirmed": bool(verdict["confirmed"]) if verdict else np.nan})
        parts = [f for f in (pairs_fn([c], [int(x) for x in spec.pilot["seeds"]]),
                             confirm[confirm["cell"] == c.name] if not confirm.empty else None)
                 if f is not None and not f.empty]
        costs = pd.concat(parts) if parts else None
        if costs is not None and not costs.empty:
            r.update({"oracle_probe_rollouts_per_run": float(costs["oracle_probe_rollouts"].mean()),
                      "oracle_probe_seconds_per_run": float(costs["oracle_probe_seconds"].mean()),
                      "oracle_wall_over_uniform": float((costs["oracle_wall_seconds"]
                                                         / costs["uniform_wall_seconds"]).mean())})
        rows.append(r)
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS))


def heatmap(table: pd.DataFrame, path: str | Path):
    """Oracle / uniform gradient noise-to-signal (the screen, log scale centred at 1) over the
    grid: rows mix × learning rate, columns budget × prompts; the pilot's oracle − uniform
    (held-out mean@8, pts) written in the cells it ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, TwoSlopeNorm

    from replication.report.plots import save

    t = table.copy()
    t["row"] = t["mix"] + ", lr " + t["lr"].map(lambda x: f"{x:g}")
    t["col"] = ("n̄" + t["mean_rollouts"].astype(str) + " L" + t["lower"].astype(str) + " U" + t["upper"].astype(str)
                + "\nQ" + t["prompts"].astype(str))
    rows = list(dict.fromkeys(t["row"]))
    cols = list(dict.fromkeys(t["col"]))
    val = t.pivot(index="row", columns="col", values="screen_noise_to_signal_ratio").reindex(index=rows, columns=cols)
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2, 0.55 * len(rows) + 2))
    data = np.log2(val.to_numpy(float))
    lim = np.nanmax(np.abs(data)) if np.isfinite(data).any() else 1.0
    im = ax.imshow(data, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -max(lim, 1e-3), max(lim, 1e-3)), aspect="auto")
    ax.set_xticks(range(len(cols)), cols, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    for i, rname in enumerate(rows):
        for j, cname in enumerate(cols):
            r = t[(t["row"] == rname) & (t["col"] == cname)].iloc[0]
            txt = "" if not np.isfinite(r["screen_noise_to_signal_ratio"]) else f"{r['screen_noise_to_signal_ratio']:.2f}"
            if np.isfinite(r.get("pilot_diff", np.nan)):
                txt += f"\nΔ {100 * r['pilot_diff']:+.1f}"
            if not r["eligible"] and np.isfinite(r["screen_uniform_gain"]):
                txt += "\n(no gain)"
            ax.text(j, i, txt, ha="center", va="center", fontsize=6)
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("log2 oracle / uniform noise-to-signal (blue: oracle less noisy)")
    ax.set_title("Positive control, screen (seed 100): oracle vs uniform gradient noise-to-signal;\n"
                 "Δ = pilot oracle − uniform, held-out mean@8 (pts)", fontsize=9)
    save(fig, path)
    plt.close(fig)


def write_outputs(out: Path, spec, screen, pilot, pick, confirm, verdict, status, pairs_fn) -> pd.DataFrame:
    from replication.store import write_atomic

    table = cell_table(spec, screen, pilot, pick, confirm, verdict, pairs_fn)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "positive_control.csv", table.to_csv(index=False))
    heatmap(table, out / "positive_control.png")
    (out / "positive_control").mkdir(parents=True, exist_ok=True)
    write_atomic(out / "positive_control" / "study.json", json.dumps({
        "declaration": spec.blob, "status": status, "pick": pick,
        "verdict": {k: (v.item() if hasattr(v, "item") else v) for k, v in (verdict or {}).items()},
        "screened_cells": int(screen["statistic"].notna().sum()), "cells": len(screen)}, indent=1, default=str))
    return table


TABLE = Path("results/regime/positive_control.csv")
STUDY = Path("results/regime/positive_control/study.json")
"""The study's outputs the prose reads (relative to the repository root), each verified on read."""

FINAL = ("no setting passed the pilot", "not confirmed", "confirmed")
"""The statuses that end the study (scripts/positive_control.py); any other says how far it got."""


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "−")


def verdict_text(root: str | Path = ".", profile: str | None = None) -> str:
    """The first lines of each paper's conclusions, of results/summary.md and of the README's
    ``gen:positive-control`` block (issue 37): what the declared positive-control study found, read
    from its committed outputs (their folders' manifests verified). ``profile``: the notebook's; a
    paper or rehearsal profile gets "" (the study is of the small scale, whose default it varies)."""
    from replication.report.study_read import verify_study_folder

    if profile is not None and str(profile).startswith(("paper-", "rehearsal-")):
        return ""
    root = Path(root)
    if not (root / STUDY).is_file() or not (root / TABLE).is_file():
        return ("**Positive control: not run.** Nothing here yet shows that allocation could help at this "
                "scale (docs/positive_control.md).")
    verify_study_folder(root / TABLE.parent)  # results/regime's manifest covers both files
    study = json.loads((root / STUDY).read_text())
    t = pd.read_csv(root / TABLE)
    status = str(study["status"])
    screened = t[t["screen_noise_to_signal_ratio"].notna()]
    ratio = (f"the oracle's gradient noise-to-signal was {screened['screen_noise_to_signal_ratio'].min():.2f}–"
             f"{screened['screen_noise_to_signal_ratio'].max():.2f} × uniform's in the {len(screened)} cells screened"
             if len(screened) else "no cell was screened yet")
    piloted = t[t["piloted"].astype(bool) & t["pilot_diff"].notna()]
    rows = "; ".join(
        f"{r.cell}: oracle − uniform {_pts(r.pilot_diff)} [{_pts(r.pilot_diff_lo)}, {_pts(r.pilot_diff_hi)}] pts "
        f"(n = {int(r.pilot_n)}, one-sided p {r.pilot_p:.2g}, Holm p {r.pilot_p_holm:.2g}; uniform's own gain "
        f"{_pts(r.pilot_uniform_gain)} [{_pts(r.pilot_uniform_gain_lo)}, {_pts(r.pilot_uniform_gain_hi)}])"
        for r in piloted.itertuples())
    where = ("Evidence: `results/regime/positive_control.csv` and its map `results/regime/positive_control.png` "
             "(docs/positive_control.md).")
    if status == "no setting passed the pilot" or status == "not confirmed":
        pick = t[t["pick"].astype(bool)]
        confirm = ""
        if status == "not confirmed" and len(pick):
            r = pick.iloc[0]
            confirm = (f" The pilot's pick {r['cell']} was not confirmed on {int(r['confirm_n'])} fresh seeds: "
                       f"{_pts(r['confirm_diff'])} [{_pts(r['confirm_diff_lo'])}, {_pts(r['confirm_diff_hi'])}] pts, "
                       f"one-sided p {r['confirm_p']:.2g}.")
        worse = int((piloted["pilot_diff_hi"] < 0).sum())
        worse = (f" In {worse} of the {len(piloted)} it did worse, its 95 % interval below 0." if worse else "")
        return (f"**Positive control: at this scale reallocation had no room to help.** In the study declared "
                f"before its runs, allocation told p (VIP's program told a 64-rollout probe of the current policy) "
                f"did not beat uniform allocation on held-out mean@8 in any cell piloted ({rows}).{worse}{confirm} "
                f"Allocation did change the gradient — {ratio} — but not what the policy learned. Every method's "
                f"null below is read in that light: where allocation told p cannot beat uniform, no allocator's "
                f"null tells a working method from a broken one. {where}")
    if status == "confirmed":
        r = t[t["pick"].astype(bool)].iloc[0]
        return (f"**Positive control: confirmed in {r['cell']}.** Allocation told p beat uniform there on "
                f"{int(r['confirm_n'])} fresh seeds: {_pts(r['confirm_diff'])} [{_pts(r['confirm_diff_lo'])}, "
                f"{_pts(r['confirm_diff_hi'])}] pts on held-out mean@8, one-sided p {r['confirm_p']:.2g}; the "
                f"default profile runs that cell (deviations.md lists each change). {where}")
    return (f"**Positive control: under way ({status}).** Until the declared study ends, no method's null can be "
            f"read against what allocation told p achieves here; so far {ratio}"
            + (f", and the pilot has {rows}" if rows else "") + f". {where}")
