"""Figures in prose are generated: named blocks in README.md and docs/ are rewritten from the
committed results by one command, and a test fails when a block is stale (issue 20.3).

A block is

    <!-- gen:NAME -->
    ...generated Markdown...
    <!-- /gen:NAME -->

and ``GENERATORS[NAME](root)`` makes its text from the results under ``root`` (summary.json,
tables/*.csv, the exported runs). Text outside blocks carries no measured figure, or is history
in a dated section that names its commit.

    python -m replication.report.prose            # refresh every block of PROSE_FILES
    python -m replication.report.prose --check    # exit 1 and name the stale blocks
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from replication.report import prose_gdro, prose_reading, prose_regime, prose_reproducibility  # noqa: F401  (register their blocks)
from replication.report.prose_registry import GENERATORS, PAPERS, _p, _pts, _summary, block, paper_folder, paper_table  # noqa: F401
from replication.report.stats import MINUS
from replication.store import write_atomic

PROSE_FILES = ("README.md", "docs/gradient_variance.md", "docs/regime.md", "docs/reproducibility.md", "docs/fidelity/gdro.md",
               "docs/fidelity/vip.md", "docs/positive_control.md")
BLOCK = re.compile(r"(<!-- gen:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /gen:(?P=name) -->)", re.S)
@block("headline")
def headline(root: Path) -> str:
    """Each method against its paper's baseline on the average held-out set, mean@8 and pass@8
    (tables/comparisons.csv), read by the rules of reading.py (Holm-significant, equivalent by
    TOST, or inconclusive; the MDE at Holm's level and at the raw α)."""
    from replication.report import reading

    lines = []
    for paper, label in PAPERS.items():
        ann = reading.annotate(pd.read_csv(paper_table(root, paper, "comparisons.csv")))
        n_seeds = len(_summary(root, paper).get("seeds", []))
        part = ann[(ann["set"] == "average") & ann["metric"].isin(["mean@8", "pass@8"])]
        for arm, rows in part.groupby("arm", sort=False):
            texts = [f"held-out {r.metric} {reading.phrase(r)}" for r in rows.itertuples()]
            r0 = rows.iloc[0]
            lines.append(f"- {label}: {arm} vs {r0['baseline']} " + "; ".join(texts)
                         + f"; {int(r0['n'])} {r0['test']} seeds of {n_seeds}.")
    return "\n".join(lines)


@block("baseline-gains")
def baseline_gains(root: Path) -> str:
    """What RL does to each paper's baseline: held-out after − before, paired over seeds."""
    from replication.arms import _slug
    from replication.report.diagnostics import heldout_gain
    from replication.report.runs import load_eval

    lines = []
    for paper, label in PAPERS.items():
        s = _summary(root, paper)
        for base in dict.fromkeys(c["baseline"] for c in s["comparisons"]):
            seeds = [d for d in sorted((paper_folder(root, paper) / "runs" / _slug(base)).glob("s*"))]
            ev = load_eval(pd.DataFrame({"arm": base, "seed": [int(d.name[1:]) for d in seeds],
                                         "dir": [str(d) for d in seeds]}))
            parts = []
            for metric in ("mean@8", "pass@8"):
                g = heldout_gain(ev, base, metric, "average")
                moves = "rises" if g.lo > 0 else "falls" if g.hi < 0 else "interval includes 0"
                parts.append(f"{metric} {_pts(g.diff)} pts [{_pts(g.lo)}, {_pts(g.hi)}] ({moves})")
            lines.append(f"- {label} baseline {base} ({len(seeds)} seeds): " + "; ".join(parts) + ".")
    return "\n".join(lines)


def _final_ratios(root: Path, paper: str) -> pd.DataFrame:
    gv = pd.read_csv(paper_table(root, paper, "gradient_variance.csv"))
    last = gv[gv["step"] == gv["step"].max()]
    return last.set_index("method")


@block("gradient-variance")
def gradient_variance(root: Path) -> str:
    """Noise-to-signal ratio of the policy gradient against uniform at the last measured step."""
    lines = ["| base run | step | " + " | ".join(["method", "noise-to-signal ×uniform [95 % CI]"]) + " |",
             "|---|---|---|---|"]
    for paper, label in PAPERS.items():
        last = _final_ratios(root, paper)
        step = int(last["step"].iloc[0])
        for method, r in last.iterrows():
            if method == "uniform":
                continue
            lines.append(f"| {label} | {step} | {method} | {r['noise_to_signal ×unif']} |")
    return "\n".join(lines)


@block("predictor")
def predictor(root: Path) -> str:
    """VIP's next-step prediction MAE of the success probability, by predictor and subset (mean
    over the reported RLOO seeds), and the GP − moving-average difference with its CI over seeds."""
    tables = paper_folder(root, "vip") / "tables"
    ps = pd.read_csv(tables / "predictor_study.csv")
    piv = ps.pivot_table(index="predictor", columns="subset", values="mae")
    cnt = ps.groupby("subset")["count"].first()
    cols = [c for c in ("seen", "unseen", "all") if c in piv.columns]
    lines = ["| predictor | " + " | ".join(f"MAE {c} ({int(cnt[c]):,} prompt-steps)" for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for pred, r in piv.iterrows():
        lines.append(f"| {pred} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    paired = tables / "predictor_vs_reference.csv"
    if paired.is_file():
        pc = pd.read_csv(paired).set_index("subset")
        seeds = int(pc["n"].max())
        lines += ["", f"GP − moving average, paired over {seeds} seeds (mean [95 % CI]): " + "; ".join(
            f"{c} {pc.at[c, 'diff']:+.4f} [{pc.at[c, 'lo']:+.4f}, {pc.at[c, 'hi']:+.4f}]".replace("-", MINUS)
            for c in cols if c in pc.index)
            + "."]
    return "\n".join(lines)


@block("vip-upper-bound")
def vip_upper_bound(root: Path) -> str:
    """VIP's allocation told p̂ by a 16-sample probe (RLOO+phat16: a noisy-p arm, not an upper
    bound) beside RLOO+VIP against the same baseline, read by conclusions.upper_bound_conclusion."""
    from replication.report.conclusions import upper_bound_conclusion

    cmp = pd.read_csv(paper_table(root, "vip", "comparisons.csv"))
    return upper_bound_conclusion(cmp) or "The arm told p̂ by a probe did not run."


@block("true-p-controls")
def true_p_controls(root: Path) -> str:
    """Each paper's positive control (its +true-p arm) against its baseline, read by
    true_p.true_p_conclusion from the paper's comparisons, gradient-variance and share tables."""
    from replication.report.summary import PAPERS as LABELS
    from replication.report.true_p import ORACLE_ARMS, true_p_conclusion

    parts = []
    for paper, label in LABELS.items():
        cmp = pd.read_csv(paper_table(root, paper, "comparisons.csv"))
        optional = {name: (pd.read_csv(p) if p.is_file() else None)
                    for name, p in (("gv", paper_table(root, paper, "gradient_variance_vs_lab.csv")),
                                    ("shares", paper_table(root, paper, "oracle_share.csv")))}
        text = true_p_conclusion(cmp, gradient_vs_lab=optional["gv"], shares=optional["shares"])
        parts.append(f"**{label}.** " + (text or f"{ORACLE_ARMS[paper]} is not in the committed results."))
    return "\n\n".join(parts)


@block("rollout-gdro-signal")
def rollout_gdro_signal(root: Path) -> str:
    """Rollout-GDRO's replay: does its loss give the bandits a signal?"""
    t = pd.read_csv(paper_table(root, "gdro", "rollout_gdro_signal.csv"))
    lines = []
    for r in t.itertuples():
        lines.append(f"- {r.arm} ({int(r.runs)} runs): replaying the records reproduces the run's plans on "
                     f"{r.replay_matches_run:.0f} % of steps; with every loss set to 0 it plans the same counts on "
                     f"{r.zero_loss_plans_the_same:.1f} % of steps; {r.loss_exactly_0:.1f} % of the losses are "
                     f"exactly 0 (median |bin mean| {r.median_abs_bin_loss:.2g}).")
    return "\n".join(lines)


def blocks_in(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def render(text: str, root: Path) -> str:
    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise KeyError(f"unknown generated block {name!r}; known: {sorted(GENERATORS)}")
        return m.group(1) + GENERATORS[name](root).rstrip("\n") + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def stale(root: Path, files=PROSE_FILES) -> list[str]:
    """``file: block`` for every block whose text differs from what its generator writes."""
    out = []
    for rel in files:
        path = Path(root) / rel
        if not path.is_file():
            continue
        text = path.read_text()
        fresh = render(text, Path(root))
        if fresh != text:
            new = dict((m.group("name"), m.group("body")) for m in BLOCK.finditer(fresh))
            out += [f"{rel}: {m.group('name')}" for m in BLOCK.finditer(text) if new[m.group("name")] != m.group("body")]
    return out


def refresh(root: Path, files=PROSE_FILES) -> list[str]:
    changed = []
    for rel in files:
        path = Path(root) / rel
        if path.is_file():
            text = path.read_text()
            fresh = render(text, Path(root))
            if fresh != text:
                write_atomic(path, fresh)  # a doc is never left half-rendered
                changed.append(rel)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Refresh the generated blocks of README.md and docs/ from results/.")
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--check", action="store_true", help="exit 1 when a block is stale (nothing written)")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale(args.root)
        for b in bad:
            print(f"stale generated block: {b}", file=sys.stderr)
        if bad:
            print("refresh with: python -m replication.report.prose", file=sys.stderr)
        return 1 if bad else 0
    changed = refresh(args.root)
    print("refreshed: " + (", ".join(changed) if changed else "nothing (all blocks current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
