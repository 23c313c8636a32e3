"""Write the three template notebooks (no outputs; first code cell tagged `parameters`).

    python notebooks/build_notebooks.py

The notebooks are thin: every computation is a call into ``replication``; this script is the
reviewable source of their cells.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

PARAMS = '''# Parameters (papermill overrides these; `section` names the params.yaml block)
section = "{section}"
params_file = "params.yaml"
out_root = "results"
workers = 0  # 0 means the workers value of params.yaml'''

SETUP = '''from IPython.display import Markdown, display
from replication.report import pipeline, plots, tables, paper_tables, lab, conclusions
from replication.report.runs import list_runs

pr = pipeline.run_paper(section, params_file, out_root, workers)
print(f"profile={pr.profile}  seeds={pr.seeds}  arms={pr.arm_names()}")
runs = list_runs(pr.runs)
runs[["arm", "seed", "steps", "rollouts_total", "wall_seconds"]]'''

HELDOUT = '''display(Markdown("**Held-out accuracy after training** (mean ± 95 % CI over seeds)"))
table = tables.arm_table(pr.ev, phase="after")
display(table)
before = tables.arm_table(pr.ev, phase="before")
plots.arm_comparison(pr.ev, pr.figures / "heldout.png", phase="after");'''

COMPARE = '''cmp = pipeline.comparisons(pr)
display(Markdown("**Each method against its baseline** (paired over seeds; *not significant* means the CI covers 0)"))
view = cmp[cmp["set"].isin(["average", "pooled"])][["arm", "baseline", "set", "metric", "text"]]
display(view)'''

PAPER = '''pvo = paper_tables.paper_vs_ours("{paper}", pr.ev, {mapping})
display(Markdown("**The paper's change beside ours** (small-scale analogue; ours in points with a 95 % CI)"))
display(paper_tables.format_paper_vs_ours(pvo))'''

CURVES = '''plots.training_curves(pr.steps, pr.figures / "training_curves.png", smooth=5);'''

LAB = '''# Allocation lab: simulated prompts with known success probabilities that drift as the policy
# learns; drift fitted to the per-prompt records of this paper's baseline runs.
drift = lab.fit_drift(pipeline.runs_of(pr, "{baseline}"))
print(drift.describe())
lab_df = lab.run_lab(drift, lab.LabConfig({lab_options}), seed=0)
lab_summary = lab.summarise_lab(lab_df)
display(lab_summary)
lab.plot_lab(lab_df, pr.figures / "allocation_lab.png");'''

FINISH = '''extra = {{{extra}}}
tables.write_tables({{"heldout_after": table, "heldout_before": before, "comparisons": cmp,
                     "paper_vs_ours": pvo, "allocation_lab": lab_summary, **extra}}, pr.tables)
tables.write_summary_json(cmp, pr.out / "summary.json", profile=pr.profile, seeds=pr.seeds)
text = conclusions.conclusions(comparisons=cmp, runs=runs, lab=lab_summary, paper=pvo{wse})
(pr.out / "conclusions.md").write_text(text)
display(Markdown(text))'''


def notebook(title: str, intro: str, section: str, cells: list) -> nbformat.NotebookNode:
    params = new_code_cell(PARAMS.format(section=section))
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[new_markdown_cell(f"# {title}\n\n{intro}"), params, new_code_cell(SETUP), *cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def vip() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell("## Held-out accuracy: {RLOO, Dr. GRPO} × {uniform, VIP} and the ablations (paper Tables 1, 3)"),
        new_code_cell(HELDOUT),
        new_code_cell(COMPARE),
        new_code_cell(PAPER.format(paper="vip", mapping='{"RLOO": "RLOO", "RLOO+VIP": "RLOO+VIP"}')),
        new_markdown_cell("## Predictor study (paper Fig. 3): next-step success prediction from the logged records\n\n"
                          "Replays a uniform RLOO run: at each step every predictor sees only earlier steps."),
        new_code_cell('''from replication.report import predictor_study
texts = pipeline.prompt_texts(pr.profile)
rec = pipeline.runs_of(pr, "RLOO")
replay = predictor_study.replay_predictors(rec[rec["seed"] == pr.seeds[0]], texts)
pred_summary = predictor_study.mae_summary(replay)
display(pred_summary)
predictor_study.plot_mae(replay, pr.figures / "predictor_mae.png");'''),
        new_markdown_cell("## Allocation curve: rollouts against predicted success probability"),
        new_code_cell('''vip_rec = pr.prompts[pr.prompts["arm"].isin(["RLOO+VIP", "Dr.GRPO+VIP"])]
plots.allocation_curve(vip_rec, pr.figures / "allocation_curve.png");'''),
        new_markdown_cell("## Overhead: allocator time (plan + GP update) as a share of step time"),
        new_code_cell('''overhead = paper_tables.overhead_vs_paper(runs)
display(overhead)'''),
        new_markdown_cell("## Training dynamics"),
        new_code_cell(CURVES),
        new_markdown_cell("## Allocation lab"),
        new_code_cell(LAB.format(baseline="RLOO", lab_options="")),
        new_markdown_cell("## Conclusion (generated from the numbers above)"),
        new_code_cell(FINISH.format(extra='"predictor_study": pred_summary, "overhead": overhead', wse="")),
    ]
    return notebook("VIP — variance-informed predictive rollout allocation",
                    "Small-scale replication of arXiv 2602.01601 on the profile in `params.yaml`. "
                    "Every arm trains at the same budget C = 8·Q.", "vip", cells)


def dynamo() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell("## P@1 and P@k per held-out set: GRPO, + allocation, + compensation, + stabilisation, DynaMO"),
        new_code_cell(HELDOUT),
        new_code_cell(COMPARE),
        new_code_cell(PAPER.format(paper="dynamo", mapping='{"GRPO": "GRPO", "DynaMO": "DynaMO"}')),
        new_markdown_cell("## Training dynamics (gradient norm and entropy; the paper claims DynaMO smooths both)"),
        new_code_cell('''plots.training_curves(pr.steps, pr.figures / "training_curves.png",
                      keys=("reward", "grad_norm", "entropy", "zero_variance_frac"), smooth=5);'''),
        new_markdown_cell("## Allocation lab"),
        new_code_cell(LAB.format(baseline="GRPO", lab_options="")),
        new_markdown_cell("## Conclusion (generated from the numbers above)"),
        new_code_cell(FINISH.format(extra="", wse="")),
    ]
    return notebook("DynaMO — dynamic rollout allocation and advantage modulation",
                    "Small-scale replication of arXiv 2602.19208 on the profile in `params.yaml`. "
                    "Every arm trains at the same budget C = Q·n̄.", "dynamo", cells)


def gdro() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell("## mean@k per held-out set and pooled pass@k (paper Table 1)"),
        new_code_cell(HELDOUT),
        new_code_cell(COMPARE),
        new_code_cell(PAPER.format(paper="gdro", mapping='{"GRPO": "GRPO", "Prompt-GDRO": "Prompt-GDRO", "Rollout-GDRO": "Rollout-GDRO"}')),
        new_markdown_cell("## Weighted-standard-error proxy against compute-matched uniform"),
        new_code_cell('''from replication.report import gdro_diagnostics as gd
wse_frames = []
for arm in ["Rollout-GDRO", "Rollout-GDRO-sqrt"]:
    rec = pipeline.runs_of(pr, arm)
    if len(rec):
        wse_frames.append(gd.wse_reduction(gd.wse(rec)))
import pandas as pd
wse_table = pd.concat(wse_frames, ignore_index=True) if wse_frames else pd.DataFrame()
display(wse_table)'''),
        new_markdown_cell("## Rollout share per difficulty bin over time, and Prompt-GDRO weight mass per bin"),
        new_code_cell('''plots.bin_share_heatmap(pr.prompts, pr.figures / "bin_share.png");
if "weight_mass_per_bin" in pr.steps:
    plots.weight_mass_heatmap(pr.steps, pr.figures / "weight_mass.png");'''),
        new_markdown_cell("## Training dynamics"),
        new_code_cell(CURVES),
        new_markdown_cell("## Allocation lab"),
        new_code_cell(LAB.format(baseline="GRPO", lab_options="")),
        new_markdown_cell("## Conclusion (generated from the numbers above)"),
        new_code_cell(FINISH.format(extra='"wse": wse_table', wse=", wse=wse_table")),
    ]
    return notebook("Multi-adversary GDRO — Prompt-GDRO and Rollout-GDRO",
                    "Small-scale replication of arXiv 2601.19280 on the profile in `params.yaml`. "
                    "Every arm trains at the same mean budget n̄ (compute-neutral).", "gdro", cells)


def main() -> None:
    for name, build in (("vip", vip), ("dynamo", dynamo), ("gdro", gdro)):
        nbformat.write(build(), HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
