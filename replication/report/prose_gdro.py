"""Generated blocks on GDRO's prompt weights (issue 20.2 and 20.8), for README.md and
docs/fidelity/gdro.md: per arm, the steps on which every weight is 0 and what the adversary sees
under the paper's loss with β·KL, from results/gdro/tables/prompt_gdro_weight_signal.csv (written by
the gdro notebook: gdro_diagnostics.weight_signal_by_arm), with the arm's held-out comparison from
results/gdro/summary.json."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from replication.report.prose_registry import _p, _pts, _summary, block, paper_table


@block("gdro-weight-signal")
def gdro_weight_signal(root: Path) -> str:
    t = pd.read_csv(paper_table(root, "gdro", "prompt_gdro_weight_signal.csv"))
    cmp = {c["arm"]: c for c in _summary(root, "gdro")["comparisons"] if c["metric"] == "average mean@8"}
    lines = ["| arm | runs | steps with every weight 0 (mean, min–max over runs) | longest such stretch | ℓ exactly 0 | ℓ > 0 | "
             "median spread of debiased bin means | median per-step max/min weight | steps with max/min ≥ 1.2 | "
             "held-out mean@8 vs GRPO |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in t.itertuples():
        c = cmp.get(r.arm)
        vs = (f"{_pts(c['diff'])} pts [{_pts(c['ci_low'])}, {_pts(c['ci_high'])}] (Holm p {_p(c['p_holm'])})"
              if c else "—")
        lines.append(f"| {r.arm} | {r.runs} | {100 * r.all_zero_share_mean:.1f} % ({100 * r.all_zero_share_min:.1f}–"
                     f"{100 * r.all_zero_share_max:.1f} %) | {r.longest_all_zero_run_max} steps | "
                     f"{100 * r.loss_zero_share:.1f} % | {100 * r.loss_positive_share:.1f} % | {r.bin_mean_spread:.4f} | "
                     f"{r.weight_ratio:.4f} | {100 * r.weight_ratio_ge_1_2_share:.1f} % | {vs} |")
    return "\n".join(lines)
