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
# # Multi-adversary GDRO — Prompt-GDRO and Rollout-GDRO
#
# Small-scale replication of arXiv 2601.19280 on the profile in `params.yaml`. Every arm trains at the same mean budget n̄ (compute-neutral).

# %% tags=["parameters"]
# Parameters: papermill (dvc repro) sets `section`; in JupyterLab change any line and run all.
# Any setting other than the committed ones makes a trial: its outputs go to workspace/, never results/.
section = "gdro"           # the params.yaml block: arms, seeds, steps, baselines
params_file = "params.yaml"
out_root = None            # None: results/ for the published default, else workspace/<profile>[-<hash>]/
workers = 0                # runs trained at once; 0: params.yaml's `workers`
profile = None             # None: params.yaml's `profile` (default | quick | smoke | ...)
overrides = {}             # dotted config keys for every arm, e.g. {"optim.lr": 6e-5, "rollout.mean_rollouts": 4}
seeds = None               # None: the section's seeds; e.g. [0] (papermill: -y 'seeds: [0]' or -p seeds '[0]')
arms = None                # None: the section's arms, e.g. ["RLOO", "RLOO+VIP"]
steps = None               # None: the section's steps (null there: the profile's length)
gradvar_draws = None       # rollout sets per allocator and checkpoint (gradient variance); None: the profile's `gradvar:` section (30; quick 6)

# %%
# JupyterLab and nbconvert start the kernel in notebooks/; params.yaml and the paths in it and in the
# profiles (results/base-model, results/encoder) are the repository's, so the kernel works from its
# root (replication/paths.py: the folder with dvc.yaml and params.yaml; running this again is a no-op).
from replication.paths import enter_repo_root
_root = enter_repo_root()  # the working directory is the repository root from here on (not printed: a machine path)

# %%
# Cached results load; only runs missing from the output folder and the run cache (.cache/runs) train.
from IPython.display import Markdown, display
from replication.orchestration.grid import run_paper
from replication.report import pipeline, plots, tables, paper_tables, lab, conclusions
from replication.report.inline import show  # figures inline (PNG) in every front end
from replication.report.runs import list_runs
from replication.stage_params import notebook_value

# papermill's -p passes a list or mapping as text: read it as YAML
overrides, seeds, arms = (notebook_value("overrides", overrides, dict) or {}, notebook_value("seeds", seeds, list),
                          notebook_value("arms", arms, list))
pr = run_paper(section, params_file, out_root, workers, profile=profile, overrides=overrides,
               seeds=seeds, arms=arms, steps=steps, notebook_params={"gradvar_draws": gradvar_draws})
print(f"profile={pr.profile}  seeds={pr.seeds}  arms={pr.arm_names()}")
from replication.report.banner import show_banner
show_banner(pr.profile)  # rehearsal numbers are not results (docs/rehearsal.md)
runs = list_runs(pr.runs)
runs[["arm", "seed", "steps", "rollouts_total", "wall_seconds"]]

# %% [markdown]
# ## Deviations from the paper (generated from `replication/specs/gdro.yaml`)
# Every setting in which an arm of this run differs from the paper, with the stated reason
# (docs/deviations.md holds the same for every paper and profile).

# %%
from replication.report import deviations
deviations_md = deviations.to_markdown(section, pr.profile, params_file)
display(Markdown(deviations_md))

# %% [markdown]
# ## mean@k per held-out set and pooled pass@k (paper Table 1)

# %%
display(Markdown("**Held-out accuracy after training** (mean ± 95 % CI over seeds)"))
table = tables.arm_table(pr.ev, phase="after")
display(table)
before = tables.arm_table(pr.ev, phase="before")
show(plots.arm_comparison(pr.ev, pr.figures / "heldout.png", phase="after"))

# %%
cmp = pipeline.comparisons(pr)
display(Markdown("**Each method against its baseline** (paired over seeds; *not significant* means the CI covers 0)"))
view = cmp[cmp["set"].isin(["average", "pooled"])][["arm", "baseline", "set", "metric", "text"]]
display(view)


# %%
shares = pipeline.oracle_shares(pr)
display(Markdown("**Share of the true-p oracle's gain** (method − baseline) / (oracle − baseline), held-out "
                 "average after training, bootstrap 95 % CI over seeds; only where the oracle's own gain has "
                 "a 95 % interval above 0 (docs/positive_control.md)"))
display(shares)
# %%
pvo = paper_tables.paper_vs_ours("gdro", pr.ev, {"GRPO": "GRPO", "Prompt-GDRO": "Prompt-GDRO", "Rollout-GDRO": "Rollout-GDRO"})
display(Markdown("**The paper's change beside ours** (small-scale analogue; ours in points with a 95 % CI)"))
display(paper_tables.compact_paper_vs_ours(pvo))
show(plots.paper_vs_ours_scatter(pvo, pr.figures / "paper_vs_ours.png",
                                 title="GDRO: the paper's change against ours (small-scale analogue)"))

# %% [markdown]
# ## Weighted-standard-error proxy against compute-matched uniform

# %%
from replication.report import gdro_diagnostics as gd
wse_frames = []
for arm in ["Rollout-GDRO", "Rollout-GDRO-sqrt"]:
    rec = pipeline.runs_of(pr, arm)
    if len(rec):
        wse_frames.append(gd.wse_reduction(gd.wse(rec)))
import pandas as pd
wse_table = pd.concat(wse_frames, ignore_index=True) if wse_frames else pd.DataFrame()
display(wse_table)

# %% [markdown]
# ## Overhead: allocator plan + observe and Prompt-GDRO weights + observe, beside the paper's per-step table

# %%
overhead = paper_tables.overhead_vs_paper(runs, paper="gdro")
display(overhead)

# %% [markdown]
# ## Rollout share per difficulty bin over time, and Prompt-GDRO weight mass per bin

# %%
show(plots.bin_share_heatmap(pr.prompts, pr.figures / "bin_share.png"))
if "weight_mass_per_bin" in pr.steps:
    show(plots.weight_mass_heatmap(pr.steps, pr.figures / "weight_mass.png"))

# %% [markdown]
# ## Training dynamics

# %%
show(plots.training_curves(pr.steps, pr.figures / "training_curves.png", smooth=5))

# %% [markdown]
# ## Allocation lab

# %%
# Allocation lab: simulated prompts with known success probabilities that drift as the policy
# learns; drift fitted to the per-prompt records of this paper's baseline runs.
drift = lab.fit_drift(pipeline.runs_of(pr, "GRPO"))
print(drift.describe())
lab_df = lab.run_lab(drift, lab.LabConfig(), seed=0)
lab_summary = lab.summarise_lab(lab_df)
display(lab_summary)
show(lab.plot_lab(lab_df, pr.figures / "allocation_lab.png"))

# %% [markdown]
# ## Gradient variance on the real model (issue 10)
#
# At three checkpoints of a uniform GRPO run (steps 0, ⅓ and all of the profile's) and one fixed
# batch of training prompts, every allocator plans the same budget 30 times (the quick profile: 6 times, on 16 prompts, at the first and last step); each plan gets fresh
# rollouts and gives one policy-gradient vector (the trainer's loss at ratio 1, token-mean over the
# set). Ratios to uniform with bootstrap 95 % CIs: total variance tr Cov(g), noise-to-signal
# tr Cov(g)/‖E g‖² (with token-mean the allocation also changes E g, so this is the scale-free
# comparison) and the share of rollouts with a non-zero advantage. Stateful allocators are warmed
# by replaying the uniform run's per-prompt records; vip-oracle is told p from 64 rollouts per prompt
# (replication/analysis/gradient_variance.py). The allocation lab's simulated ratios stand beside them.

# %%
from replication.analysis import gradient_variance as gva
from replication.report import gradient_variance as gvr
from replication.arms import gradvar_settings
from replication.orchestration.grid import load_section
# vip-gp with the VIP arm's GP settings and encoder (params.yaml, section vip)
vip_arm_options = load_section("vip", params_file)["arms"]["RLOO+VIP"].get("allocator.options") or {}
gv_df = gva.measure(pr.profile, gva.baseline_overrides(section, "GRPO", params_file, overrides),
                    pr.out / "gradient_variance", **gradvar_settings(pr.profile, gradvar_draws,
                                                          method_options={"vip-gp": vip_arm_options}))  # vip-gp as VIP's RLOO+VIP arm runs it
gv_table, gv_lab = gvr.variance_table(gv_df), gvr.lab_comparison(gv_df, lab_summary, estimator="grpo")
display(gv_table)
display(gv_lab)
tables.write_tables({"gradient_variance": gv_table, "gradient_variance_vs_lab": gv_lab}, pr.tables)
show(gvr.plot_gradient_variance(gv_df, pr.figures / "gradient_variance.png"))

# %% [markdown]
# ## Is each mechanism engaged? Sample efficiency and the regime diagnostics (issue 10)
#
# Training score = mean over prompts of per-prompt success (independent of the allocation).

# %%
from replication.report import diagnostics
issue10 = diagnostics.mechanism_report(pr, "GRPO", prompt_gdro="Prompt-GDRO", rollout_gdro="Rollout-GDRO")

# %% [markdown]
# ## Does Prompt-GDRO's loss give its adversary a signal? (issue 10)
#
# The paper's prompt loss is exactly 0 at ratio 1 with group-centred advantages and for
# all-equal groups at any ratio (tests/rl/test_ppo.py); only the drift across PPO mini-batches
# remains. The table measures how large that signal is beside the score spread ln(1.2)/η that a
# max/min weight of 1.2 needs, for the paper's arm and the official code's (q mean 1 + the focus
# schedule of its `softf` run case, the case the `Prompt-GDRO-code` arm runs; docs/fidelity/gdro.md #11a).

# %%
from replication.report import gdro_signal
signal_df = gdro_signal.signal_table(pr.prompts, ["Prompt-GDRO", "Prompt-GDRO-code"], runs=pr.runs)  # each arm under its own options
display(signal_df)
print(gdro_signal.signal_conclusion(signal_df))

# %%
# issue 20.2 and 20.8, per run: steps on which every weight is 0 (the step trains on nothing but β·KL),
# and what the adversary sees under the paper's loss with β·KL (zero share, bin-mean spread, weight spread)
weighted = pr.prompts[pr.prompts["arm"].isin(["Prompt-GDRO", "Prompt-GDRO-code"])]
zero_steps = gd.all_zero_weight_steps(weighted)
loss_sig = gd.loss_signal(weighted)
weight_signal = gd.weight_signal_by_arm(zero_steps, loss_sig)
display(weight_signal)

# %% [markdown]
# ## Does Rollout-GDRO's loss give its bandits a signal? (issue 10)
#
# Each bin's bandit minimises ℓ̄_b + μ·n with the same prompt loss ℓ(x), so the same finding is
# expected. Measured by replay: the run's per-prompt records go step by step through a fresh
# allocator with the arm's options, once with the logged losses (it must reproduce the run's
# counts) and once with every loss set to 0. If the blind allocator plans the same counts, the
# departures from n̄ come from the price μ·n and the bins' sizes, not from the loss
# (replication/report/rollout_gdro_signal.py).

# %%
from replication.report import rollout_gdro_signal
from replication.config import load_profile
rollout_signal_df = None
if "Rollout-GDRO" in pr.arm_names():
    rg_cfg = load_profile(pr.profile, gva.baseline_overrides(section, "Rollout-GDRO", params_file, overrides))
    rollout_signal_df = rollout_gdro_signal.signal_table(
        pr.prompts[pr.prompts["arm"] == "Rollout-GDRO"], rg_cfg.allocator.options,
        list(pipeline.prompt_texts(pr.profile, overrides)),
        rg_cfg.rollout.lower, rg_cfg.rollout.upper, rg_cfg.rl.reward_positive, rg_cfg.rl.reward_negative)
    display(rollout_gdro_signal.summary(rollout_signal_df))
    print(rollout_gdro_signal.signal_conclusion(rollout_signal_df))

# %% [markdown]
# ## Conclusion (generated from the numbers above)

# %%
extra = {"wse": wse_table, "overhead": overhead, "prompt_gdro_signal": signal_df,
         "prompt_gdro_weight_signal": weight_signal, "prompt_gdro_zero_weight_steps": zero_steps,
         "prompt_gdro_loss_signal": loss_sig}
if rollout_signal_df is not None:
    extra["rollout_gdro_signal"] = rollout_gdro_signal.summary(rollout_signal_df)
tables.write_tables({"heldout_after": table, "heldout_before": before, "comparisons": cmp, "oracle_share": shares,
                     "allocation_lab": lab_summary, **extra}, pr.tables)
paper_tables.write_paper_vs_ours(pvo, pr.tables)  # wide CSV, compact .md
tables.write_summary_json(cmp, pr.out / "summary.json", profile=pr.profile, seeds=pr.seeds)
from replication.report.positive_control import verdict_text  # the declared positive control first
text = conclusions.conclusions(positive_control=verdict_text(".", pr.profile), comparisons=cmp, evals=pr.ev, runs=runs, lab=lab_summary, paper=pvo, wse=wse_table,
                               gdro_signal=signal_df, rollout_gdro_signal=rollout_signal_df,
                               gradient_vs_lab=gv_lab, oracle_share=shares)
(pr.out / "conclusions.md").write_text(text)
(pr.tables / "deviations.md").write_text(deviations_md)
display(Markdown(text))
