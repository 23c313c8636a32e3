"""The probe: extra rollouts that tell an allocator each prompt's success probability (issue 20.9).

Before a step's allocation, an allocator with ``wants_probe = m`` (``vip-probe``) gets m samples
per prompt from the current policy, with the training sampling settings, verified like the
training rollouts; it is told the successes (``tell_probe``) and then plans the budget-C
rollouts as usual. The probe's rollouts never reach the loss, the advantages, the step's logged
reward or the allocator's ``observe``: they exist only in this file. What they cost is logged
beside the budget, never in it: ``probe_rollouts`` (m·Q) and ``probe_seconds`` (generation +
verification), next to ``rollouts`` (= C) and ``generate_seconds`` / ``update_seconds``.

Seeding: sample j of prompt q uses seed ``rollout_seeds(seed, "probe", step, ids)[q] + j`` —
the loop's helper with its own stream name, so a probe never shares a draw with the training
rollouts and the same seed gives the same probe. No generator state is consumed (the engines
draw from the per-prompt seeds alone), so the training stream is the one the run would draw
without the probe.

Several processes: like the training rollouts, each rank probes a contiguous share of whole
prompt groups (``split_groups``; vLLM tensor-parallel groups send their group's union) and the
successes are gathered in plan order, so every rank tells its allocator the same numbers
(train/distributed.py's contract).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

from replication.train.distributed import World, engine_group_size, generation_share, rollout_seeds, split_groups

if TYPE_CHECKING:
    from replication.config import TrainConfig
    from replication.train.components import Components

PROBE_STREAM = "probe"
"""``rollout_seeds`` stream of the probe (the loop's training rollouts use "train")."""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    successes: np.ndarray
    """Successful probe samples per prompt, in the step's prompt order (all ranks)."""
    samples_per_prompt: int
    seconds: float
    """Wall-clock time of the probe on this rank: generation + verification + gather."""

    def log_fields(self) -> dict:
        """The step-log fields: the probe's cost, kept apart from ``rollouts`` (the budget)."""
        total = int(self.samples_per_prompt * len(self.successes))
        return {
            "probe_rollouts": total,
            "probe_accuracy": float(self.successes.sum() / total),
            "probe_seconds": self.seconds,
        }


def run_probe(cfg: "TrainConfig", c: "Components", step: int, idx: np.ndarray, world: World = World()) -> ProbeResult:
    """Probe the step's prompts (pool rows ``idx``) with ``c.allocator.wants_probe`` samples each
    and tell the allocator the successes."""
    t0 = time.perf_counter()
    m = int(c.allocator.wants_probe)
    ids = [c.train.ids[i] for i in idx]
    counts = np.full(len(ids), m, dtype=np.int64)
    parts = split_groups(counts, world.size)
    mine, gen = parts[world.rank], generation_share(parts, world.rank, engine_group_size(cfg, world))
    gen_idx = idx[gen]
    batch = c.engine.generate(
        ids[gen],
        [c.train.inputs[i] for i in gen_idx],
        [c.train.answers[i] for i in gen_idx],
        counts[gen],
        cfg.rollout.sampling,
        seeds=rollout_seeds(cfg.seed, PROBE_STREAM, step, ids[gen]),
    )
    if gen != mine:
        batch = batch.select_groups(mine.start - gen.start, mine.stop - gen.start)
    sources = [c.train.sources[i] for i in idx[mine]]
    correct = np.asarray(c.verifier.is_correct(batch.completions, batch.row_answers,
                                               [sources[g] for g in batch.group_index]), dtype=bool)
    my_successes = np.bincount(batch.group_index, weights=correct, minlength=len(sources)).astype(np.int64)
    successes = world.concat(my_successes)
    c.allocator.tell_probe(ids, successes, m)
    return ProbeResult(successes=successes, samples_per_prompt=m, seconds=time.perf_counter() - t0)
