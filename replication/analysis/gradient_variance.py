"""Gradient variance on the real model: the papers' claim, measured directly (issue 10, point 2).

VIP, DynaMO and Rollout-GDRO all argue that their allocation lowers the variance of the policy
gradient at an equal rollout budget; none measures it. Here, at checkpoints of a uniform run and
for one fixed batch of Q training prompts, each allocator plans the same budget C = Q·n̄ many
times; every plan gets fresh rollouts, and each rollout set gives one flattened policy-gradient
vector g — the trainer's own loss (``rl.ppo_clip_loss``, token-mean over the whole set, one PPO
pass at ratio 1 = the on-policy policy gradient; the estimator's ``group_advantages``; the
trainer's rollout engine, verifier and model). Over the D draws of one allocator:

- total variance  tr Cov(g) = (1/(D−1)) Σ_d ‖g_d − ḡ‖²;
- variance along a fixed direction u (the mean gradient of a separate set of uniform draws, so
  every allocator is projected on the same, independent direction): Var(g·u);
- signal ‖E g‖², estimated without bias as ‖ḡ‖² − tr Cov/D, and the noise-to-signal ratio
  tr Cov / ‖E g‖². With token-mean aggregation over a fixed budget the step's target itself
  depends on the allocation (a prompt's weight is its rollout count), so an allocation that
  sends rollouts to informative prompts raises both the signal and the raw variance; the
  noise-to-signal ratio is the scale-free comparison, the raw variance the literal one;
- the share of rollouts with a non-zero advantage, and the share of prompts with n ≠ n̄.
Each is reported as a ratio to uniform with a bootstrap 95 % CI (draws resampled within each
allocator, independently).

Allocators with state are warmed on the run's own history: every per-prompt record of the
uniform run before the checkpoint's step is replayed in step order through ``plan`` (result
discarded, so plan counters such as VIP's cold start advance as in training) and ``observe``
(the logged n, successes as n rewards, and the logged per-prompt loss). GP, moving average,
DynaMO's cumulative counts, the GDRO classifier's bins and Rollout-GDRO's bandits therefore hold
what they would hold after the same prompt visits, with uniform counts (the uniform run's). The
oracle is told p estimated from ``oracle_samples`` separate rollouts per prompt at the checkpoint.
The warmed allocator is deep-copied before every draw, so the draws are independent given it.

Command (checkpoints are trained first when missing; ~1 min per checkpoint on 2 cores):
    python -m replication grad-variance --profile default --run runs/gradvar-uniform \
        --steps 0,100,300 --draws 30 --out results/gradvar

The parts, one concept per module (this module re-exports their public names):
- ``gradvar_config``: the methods and the settings (GradVarConfig);
- ``policy_gradient``: one draw's gradient (``flat_policy_gradient``, ``rollout_gradient``);
- ``gradient_draws``: D draws of one allocator (``draw_gradients`` → ``DrawSet``);
- ``variance_statistics``: the statistics with bootstrap CIs (``summarise_draws``);
- ``allocator_replay``: the allocators and their warm-up (``build_method``, ``replay_history``);
- ``uniform_checkpoints``: the uniform run's checkpoints (``train_uniform_checkpoints``);
- ``checkpoint_measurement``: every method at every checkpoint (``run_grad_variance``);
- ``measurement_cache``: the notebooks' cached call (``measure``, ``baseline_overrides``).
"""

from __future__ import annotations

from replication.analysis.allocator_replay import build_method, embedded_pool, load_records, replay_history
from replication.analysis.checkpoint_measurement import measure_checkpoint, run_grad_variance
from replication.analysis.gradient_draws import DrawSet, draw_gradients
from replication.analysis.gradvar_config import METHODS, GradVarConfig
from replication.analysis.measurement_cache import baseline_overrides, measure
from replication.analysis.policy_gradient import PromptBatch, flat_policy_gradient, rollout_gradient
from replication.analysis.uniform_checkpoints import checkpoint_dir, train_uniform_checkpoints
from replication.analysis.variance_statistics import METRICS, RATIO_METRICS, summarise_draws

__all__ = ["METHODS", "METRICS", "RATIO_METRICS", "DrawSet", "GradVarConfig", "PromptBatch", "baseline_overrides",
           "build_method", "checkpoint_dir", "draw_gradients", "embedded_pool", "flat_policy_gradient",
           "load_records", "measure", "measure_checkpoint", "replay_history", "rollout_gradient",
           "run_grad_variance", "summarise_draws", "train_uniform_checkpoints"]
