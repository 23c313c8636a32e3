# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # VIP — variance-informed predictive rollout allocation
#
# Small-scale replication of arXiv 2602.01601 on the profile in `params.yaml`. Every arm trains at the same budget C = 8·Q.

# %% tags=["parameters"]
# Parameters: papermill (dvc repro) sets `section`; in JupyterLab change any line and run all.
section = "vip"            # the params.yaml block: arms, seeds, steps, baselines
params_file = "params.yaml"
out_root = "results"
workers = 0                # runs trained at once; 0 = params.yaml's `workers`
profile = None             # None = params.yaml's `profile` (default | quick | smoke | ...)
overrides = {}             # dotted config keys for every arm, e.g. {"optim.lr": 6e-5, "rollout.mean_rollouts": 4}
seeds = None               # None = the section's seeds, e.g. [0]
arms = None                # None = the section's arms, e.g. ["RLOO", "RLOO+VIP"]
steps = None               # None = the section's steps (null there = the profile's length)

# %%
# Cached results load; only runs missing from results/ and the run cache (.cache/runs) train.
from IPython.display import Markdown, display
from replication.orchestration.grid import run_paper
from replication.report import pipeline, plots, tables, paper_tables, lab, conclusions
from replication.report.runs import list_runs

pr = run_paper(section, params_file, out_root, workers, profile=profile, overrides=overrides,
               seeds=seeds, arms=arms, steps=steps)
print(f"profile={pr.profile}  seeds={pr.seeds}  arms={pr.arm_names()}")
runs = list_runs(pr.runs)
runs[["arm", "seed", "steps", "rollouts_total", "wall_seconds"]]

# %% [markdown]
# ## Held-out accuracy: {RLOO, Dr. GRPO} × {uniform, VIP} and the ablations (paper Tables 1, 3)

# %%
display(Markdown("**Held-out accuracy after training** (mean ± 95 % CI over seeds)"))
table = tables.arm_table(pr.ev, phase="after")
display(table)
before = tables.arm_table(pr.ev, phase="before")
plots.arm_comparison(pr.ev, pr.figures / "heldout.png", phase="after");

# %%
cmp = pipeline.comparisons(pr)
display(Markdown("**Each method against its baseline** (paired over seeds; *not significant* means the CI covers 0)"))
view = cmp[cmp["set"].isin(["average", "pooled"])][["arm", "baseline", "set", "metric", "text"]]
display(view)

# %%
pvo = paper_tables.paper_vs_ours("vip", pr.ev, {"RLOO": "RLOO", "RLOO+VIP": "RLOO+VIP"})
display(Markdown("**The paper's change beside ours** (small-scale analogue; ours in points with a 95 % CI)"))
display(paper_tables.format_paper_vs_ours(pvo))

# %% [markdown]
# ## Predictor study (paper Fig. 3): next-step success prediction from the logged records
#
# Replays a uniform RLOO run: at each step every predictor sees only earlier steps.

# %%
from replication.report import predictor_study
texts = pipeline.prompt_texts(pr.profile)
rec = pipeline.runs_of(pr, "RLOO")
replay = predictor_study.replay_predictors(rec[rec["seed"] == pr.seeds[0]], texts)
pred_summary = predictor_study.mae_summary(replay)
display(pred_summary)
predictor_study.plot_mae(replay, pr.figures / "predictor_mae.png");

# %% [markdown]
# ## Allocation curve: rollouts against predicted success probability

# %%
vip_rec = pr.prompts[pr.prompts["arm"].isin(["RLOO+VIP", "Dr.GRPO+VIP"])]
plots.allocation_curve(vip_rec, pr.figures / "allocation_curve.png");

# %% [markdown]
# ## Overhead: allocator time (plan + GP update) as a share of step time

# %%
overhead = paper_tables.overhead_vs_paper(runs)
display(overhead)

# %% [markdown]
# ## Training dynamics

# %%
plots.training_curves(pr.steps, pr.figures / "training_curves.png", smooth=5);

# %% [markdown]
# ## Allocation lab

# %%
# Allocation lab: simulated prompts with known success probabilities that drift as the policy
# learns; drift fitted to the per-prompt records of this paper's baseline runs.
drift = lab.fit_drift(pipeline.runs_of(pr, "RLOO"))
print(drift.describe())
lab_df = lab.run_lab(drift, lab.LabConfig(), seed=0)
lab_summary = lab.summarise_lab(lab_df)
display(lab_summary)
lab.plot_lab(lab_df, pr.figures / "allocation_lab.png");

# %% [markdown]
# ## Conclusion (generated from the numbers above)

# %%
extra = {"predictor_study": pred_summary, "overhead": overhead}
tables.write_tables({"heldout_after": table, "heldout_before": before, "comparisons": cmp,
                     "paper_vs_ours": pvo, "allocation_lab": lab_summary, **extra}, pr.tables)
tables.write_summary_json(cmp, pr.out / "summary.json", profile=pr.profile, seeds=pr.seeds)
text = conclusions.conclusions(comparisons=cmp, runs=runs, lab=lab_summary, paper=pvo)
(pr.out / "conclusions.md").write_text(text)
display(Markdown(text))
