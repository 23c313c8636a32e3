"""The positive control in each paper's conclusions (issue 37.1): the paper's ``+true-p`` arm.

Each paper runs VIP's allocation program told p by a 64-rollout probe of the current policy per
prompt (outside the budget and the gradient) under that paper's baseline estimator: RLOO+true-p
for VIP, GRPO+true-p for DynaMO and GDRO. Its paragraph says, from the committed tables only:

- its reading against its baseline on the average held-out set, by the rules of reading.py
  (Holm-significant, equivalent by TOST, or inconclusive with its interval);
- the same allocation's gradient noise-to-signal ratio to uniform measured on the baseline's
  checkpoints (``vip-oracle`` in tables/gradient_variance_vs_lab.csv) beside the allocation lab's;
- what its probe cost (rollouts per budgeted rollout, share of its wall time, wall time against
  its baseline's);
- what follows: a gain means allocation had room and every method's share of that gain is stated
  (report/oracle_share.py); no gain means no method's null says anything about its allocation.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from replication.report import reading

ORACLE_ARMS = {"vip": "RLOO+true-p", "dynamo": "GRPO+true-p", "gdro": "GRPO+true-p"}
"""Each paper's positive control (params.yaml arms; issue 37.1)."""

LAB_METHOD = "vip-oracle"
"""The gradient-variance measurement's and the allocation lab's name for VIP's program told p."""


def oracle_arm(cmp_df: pd.DataFrame) -> str | None:
    """The true-p arm among a paper's compared arms, or None when it did not run."""
    if cmp_df is None or cmp_df.empty or "arm" not in cmp_df:
        return None
    present = [a for a in dict.fromkeys(ORACLE_ARMS.values()) if a in set(cmp_df["arm"])]
    return present[0] if present else None


def _gradient_line(gv_lab: pd.DataFrame | None, baseline: str) -> str:
    """The measured gradient ratios of VIP's program told p, from gradient_variance_vs_lab."""
    if gv_lab is None or gv_lab.empty or "method" not in gv_lab or LAB_METHOD not in set(gv_lab["method"]):
        return ""
    r = gv_lab[gv_lab["method"] == LAB_METHOD].iloc[0]
    cols = {c: r[c] for c in gv_lab.columns if c != "method"}
    n2s = next((v for c, v in cols.items() if c.startswith("measured noise/signal")), None)
    var = next((v for c, v in cols.items() if c.startswith("measured var")), None)
    lab = next((v for c, v in cols.items() if c.startswith("lab variance")), None)
    if n2s is None:
        return ""
    text = (f"Measured on {baseline}'s checkpoints at equal budget, the same allocation has gradient "
            f"noise-to-signal ×{n2s} of uniform's (mean over checkpoints, then each checkpoint)")
    if var is not None:
        text += f" and total variance ×{var}"
    if lab is not None:
        text += f"; the allocation lab puts its variance at ×{lab}"
    return text + " (tables/gradient_variance_vs_lab.csv)."


def _cost_line(runs: pd.DataFrame | None, oracle: str, baseline: str) -> str:
    """The probe's cost: rollouts outside the budget, share of the arm's wall time, wall vs baseline."""
    need = {"arm", "probe_rollouts", "rollouts_total", "probe_share", "wall_seconds"}
    if runs is None or runs.empty or not need <= set(runs) or oracle not in set(runs["arm"]):
        return ""
    o = runs[runs["arm"] == oracle]
    per = float(o["probe_rollouts"].sum()) / max(float(o["rollouts_total"].sum()), 1.0)
    text = (f"Its probe spent {per:.1f} rollouts per budgeted rollout, outside the budget, "
            f"{100 * float(o['probe_share'].mean()):.0f} % of its wall time")
    b = runs[runs["arm"] == baseline]
    if not b.empty and float(b["wall_seconds"].mean()) > 0:
        text += f"; a run took {float(o['wall_seconds'].mean()) / float(b['wall_seconds'].mean()):.1f}× {baseline}'s"
    return text + " (tables/overhead.csv)."


def _share_lines(shares: pd.DataFrame | None, set_name: str, metrics: Sequence[str]) -> list[str]:
    from replication.report.oracle_share import describe_share

    if shares is None or shares.empty or "method" not in shares:
        return []
    part = shares[(shares["set"] == set_name) & (shares["metric"].isin(metrics))]
    if "share" not in part:
        return []
    part = part[part["share"].notna()]
    return [f"- {m}: {describe_share(r)}." for m in metrics
            for r in (row for _, row in part[part["metric"] == m].iterrows())]


def true_p_conclusion(cmp_df: pd.DataFrame | None, *, runs: pd.DataFrame | None = None,
                      gradient_vs_lab: pd.DataFrame | None = None, shares: pd.DataFrame | None = None,
                      probe_rollouts: int = 64, set_name: str = "average",
                      metrics: Sequence[str] | None = None) -> str:
    """The positive control's paragraph (module docstring); "" when the paper's true-p arm did not run.
    ``metrics``: the comparisons' mean@k and pass@k (k > 1) when not given."""
    oracle = oracle_arm(cmp_df)
    if oracle is None:
        return ""
    if metrics is None:
        names = [str(m) for m in pd.unique(cmp_df["metric"])]
        metrics = [m for m in names if m.startswith(("mean@", "pass@")) and m != "pass@1"]
    rules = reading.load_rules()
    ann = reading.annotate(cmp_df, rules)
    part = ann[(ann["set"] == set_name) & (ann["arm"] == oracle) & (ann["metric"].isin(metrics))]
    if part.empty:
        return ""
    baseline = str(part["baseline"].iloc[0])
    se_max = (0.25 / probe_rollouts) ** 0.5
    lines = [f"{oracle} is this paper's positive control: VIP's allocation program told p by a "
             f"{probe_rollouts}-rollout probe of the current policy per prompt (standard error up to "
             f"{se_max:.4f}; outside the budget and the gradient), under the paper's baseline estimator "
             f"({baseline}). On the {set_name} held-out set:"]
    for metric in metrics:
        for r in part[part["metric"] == metric].itertuples():
            lines.append(f"- {oracle} vs {r.baseline}, {metric}: {reading.phrase(r, rules)}.")
    sig = reading.significant_rows(cmp_df, rules)
    elsewhere = sig[(sig["arm"] == oracle) & (sig["set"] != set_name)] if not sig.empty else sig
    if not elsewhere.empty:
        lines.append(f"On single held-out sets, every {rules['significant']} difference of {oracle}:")
        lines += [f"- {r.set_label} {r.metric}: {reading.phrase(r, rules)}." for r in elsewhere.itertuples()]
    extra = " ".join(t for t in (_gradient_line(gradient_vs_lab, baseline), _cost_line(runs, oracle, baseline)) if t)
    reads = dict(zip(part["metric"], part["reading"]))
    gains = [m for m, v in reads.items() if v == "gain"]
    losses = [m for m, v in reads.items() if v == "loss"]
    if gains:
        why = (f"Told p, allocation has a {rules['significant']} gain on {', '.join(gains)}: allocation had room "
               f"at this scale.")
    elif losses:
        why = (f"Told p, allocation has a {rules['significant']} loss on {', '.join(losses)}: here VIP's "
               f"variance objective, even with p known this well, does not serve held-out accuracy, so a "
               f"method's null below says nothing about whether its allocation works.")
    else:
        inc = "inconclusive" in reads.values()
        why = (f"Told p, allocation shows no Holm-significant change on the {set_name} set"
               + reading.null_reading(reads, baseline))
        why += (". The control did not show that reallocation has room to help here" if inc else
                ". At this scale reallocation had no room to help beyond the equivalence margin")
        why += ", so a method's null below says nothing about whether its allocation works."
    lost = ([f"{r.set_label} {r.metric}" for r in elsewhere[elsewhere["reading"] == "loss"].itertuples()]
            if not elsewhere.empty else [])
    if lost:
        loss = "loss" if len(lost) == 1 else "losses"
        why += (f" Its {rules['significant']} {loss} on {', '.join(lost)} {'is' if len(lost) == 1 else 'are'} the "
                f"allocation's own: it is the one "
                f"difference from {baseline}, and VIP's program gives the fewest rollouts (L) to prompts whose p "
                f"is near 0 or 1.")
    shared = _share_lines(shares, set_name, metrics)
    if shared:
        why += ("\n\nEach method's share of the oracle's gain (tables/oracle_share.csv; only where the oracle's "
                "own gain has a 95 % interval above 0):\n" + "\n".join(shared))
    else:
        why += (" No method's share of the oracle's gain is reported: the oracle's own gain has no 95 % "
                "interval above 0 (tables/oracle_share.csv).")
    return "\n".join(lines) + ("\n\n" + extra if extra else "") + "\n\n" + why
