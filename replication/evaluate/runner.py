"""Held-out evaluation: k samples per prompt → mean@k, unbiased pass@k; plus greedy accuracy, and
with ``eval.bootstrap`` verl's bootstrapped best@k and maj@k (VIP's Pass@32 and Maj@32), from each
sample's correctness and extracted answer.

Sampling uses its own seeds derived from the run seed, the set and the prompt id, so evaluating
never disturbs the training RNG streams (a resumed run and an uninterrupted one evaluate
identically) and a prompt's samples do not depend on which process draws them: with several
processes each rank evaluates a contiguous share of every set and the counts are gathered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from replication.evaluate.metrics import best_at_k_bootstrap, headline_sets, maj_at_k, pass_at_k
from replication.rollout.base import SamplingConfig
from replication.train.distributed import World, rollout_seeds


class Evaluator:
    """``verifier``: a ``replication.tasks.verify.Verifier`` (batched ``is_correct``)."""

    def __init__(
        self,
        engine: Any,
        eval_sets: Mapping[str, Any],
        verifier: Any,
        cfg: Any,
        max_new_tokens: int | None = None,
        chunk_prompts: int = 64,
        world: World = World(),
        group_size: int = 1,
    ) -> None:
        """``group_size``: ranks sharing one engine (vLLM TP > 1 across training processes,
        train/distributed.py::engine_group_size): each group evaluates one share, every rank of
        the group sending the same requests."""
        self.engine = engine
        self.sets = eval_sets
        self.verifier = verifier
        self.cfg = cfg
        self.max_new_tokens = max_new_tokens
        self.chunk = chunk_prompts
        self.world = world
        if group_size < 1 or world.size % group_size:
            raise ValueError(f"engine group size {group_size} does not divide world size {world.size}")
        self.group_size = int(group_size)

    def shares(self) -> dict[str, range]:
        """This rank's prompts of each set (indices into the set), its engine group's share.

        The sets' prompts, in set order, form one list cut into contiguous shares, one per
        engine group: a share may span sets, so that a few sets of a few prompts each (a
        rehearsal's one problem per set) keep every group busy instead of the first alone; a
        set's part of a share stays contiguous and the groups come in order, so gathering a set
        in rank order gives it back in set order. With one group this is every set, whole."""
        groups = self.world.size // self.group_size
        sizes = [len(data.ids) for _, data in sorted(self.sets.items())]
        cuts = [len(a) for a in np.array_split(np.arange(sum(sizes)), groups)]
        lo = int(np.sum(cuts[: self.world.rank // self.group_size]))
        hi = lo + cuts[self.world.rank // self.group_size]
        out, start = {}, 0
        for (name, _), size in zip(sorted(self.sets.items()), sizes):
            a, b = min(max(lo - start, 0), size), min(max(hi - start, 0), size)
            out[name] = range(a, b)
            start += size
        return out

    def _correct_counts(
        self, data: Any, n: int, sampling: SamplingConfig, gen: torch.Generator, stream: str,
        samples: list | None = None, share: range | None = None,
    ) -> np.ndarray:
        """Successes per prompt of ``data`` (every rank gets all of them, in set order). This
        rank generates for ``share`` (its engine group's prompts of the set, ``shares``; default:
        the whole set). With ``samples`` (a list), it receives one (correctness [n] bool,
        extracted answers) pair per prompt, in set order, on every rank (answers None where the
        verifier extracts none)."""
        share = range(len(data.ids)) if share is None else share
        counts, mine = [np.zeros(0)], []
        for lo in range(share.start, share.stop, self.chunk):  # one engine call per chunk
            c, m = self._generate([(data, range(lo, min(lo + self.chunk, share.stop)), stream)], n, sampling, gen,
                                  samples is not None)
            counts += c
            mine += m[0]
        return self._gather(np.concatenate(counts), mine, samples)

    def _generate(self, parts: list, n: int, sampling: SamplingConfig, gen: torch.Generator,
                  want_samples: bool) -> tuple[list[np.ndarray], list[list]]:
        """One engine call for the prompts of ``parts`` ((set, range of its prompts, stream)
        triples), n samples each, seeded by each prompt's stream and id: per part, this rank's
        successes per prompt and (with ``want_samples``) its (correctness, answers) pairs."""
        ids, inputs, answers, sources, seeds = [], [], [], [], []
        for data, rows, stream in parts:
            sl = slice(rows.start, rows.stop)
            ids += list(data.ids[sl])
            inputs += list(data.inputs[sl])
            answers += list(data.answers[sl])
            sources += list(data.sources[sl])
            seeds.append(rollout_seeds(self.seed, stream, 0, data.ids[sl]))
        if not ids:
            return [np.zeros(0) for _ in parts], [[] for _ in parts]
        counts = np.full(len(ids), n, dtype=np.int64)
        # completions only: no old-log-prob pass (vLLM's recompute would be thrown away)
        batch = self.engine.generate(ids, inputs, answers, counts, sampling, generator=gen,
                                     seeds=np.concatenate(seeds), logprobs=False)
        ok = np.asarray(self.verifier.is_correct(batch.completions, batch.row_answers,
                                                 [sources[g] for g in batch.group_index]))
        succ = np.bincount(batch.group_index, weights=ok.astype(float), minlength=len(ids))
        mine: list = []
        if want_samples:
            extract = getattr(self.verifier, "extracted", None)
            answers_of = extract(batch.completions) if extract else [None] * len(ok)
            group = np.asarray(batch.group_index)
            for i in range(len(ids)):  # the prompt's samples in the engine's order
                rows = np.flatnonzero(group == i)
                mine.append((ok[rows].astype(bool), [answers_of[r] for r in rows]))
        cuts = np.cumsum([0] + [len(r) for _, r, _ in parts])
        return ([succ[a:b] for a, b in zip(cuts[:-1], cuts[1:])],
                [mine[a:b] if want_samples else [] for a, b in zip(cuts[:-1], cuts[1:])])

    def _gather(self, counts: np.ndarray, mine: list, samples: list | None) -> np.ndarray:
        """This rank's successes per prompt of one set (and its samples) gathered from every
        engine group, in set order, on every rank."""
        g = self.group_size
        if samples is not None:
            parts = self.world.gather(mine)
            samples.extend(x for part in parts[::g] for x in part)
        if g == 1:
            return self.world.concat(counts).astype(np.int64)
        parts = self.world.gather_arrays(counts)[::g]  # each group's share once
        return np.concatenate(parts).astype(np.int64)

    def _all_sets(self, shares: dict[str, range], n: int, sampling: SamplingConfig, kind: str,
                  seed: int, want_samples: bool) -> dict[str, tuple[np.ndarray, list]] | None:
        """Every set's share in ONE engine call when all of them fit one call (``chunk_prompts``)
        and more than one set has prompts here: a few small sets (a rehearsal's one problem per
        set) then decode their tokens together instead of one set after another. Each prompt's
        samples are seeded by its own stream and id, as set by set. None when the sets are
        larger (the paper and small scales: set by set, chunk by chunk)."""
        todo = [(name, r) for name, r in shares.items() if len(r)]
        if len(todo) < 2 or sum(len(r) for _, r in todo) > self.chunk:
            return None
        parts = [(self.sets[name], r, f"eval/{name}/{kind}") for name, r in todo]
        gen = torch.Generator().manual_seed(int(seed) * 1000 + 17)
        counts, mine = self._generate(parts, n, sampling, gen, want_samples)
        out = {name: (np.zeros(0), []) for name in shares}
        out.update({name: (c, m) for (name, _), c, m in zip(todo, counts, mine)})
        return out

    def __call__(self, model: torch.nn.Module, seed: int = 0) -> dict[str, dict[str, float]]:
        self.engine.sync_weights(model)
        was_training = model.training
        model.eval()
        c, k = self.cfg, self.cfg.k
        mnt = self.max_new_tokens or getattr(self.engine, "default_max_new_tokens", 16)
        sample = SamplingConfig(c.temperature, c.top_p, c.top_k, mnt)
        greedy = SamplingConfig(1.0, 1.0, 1, mnt)  # top-k = 1 is exactly greedy decoding
        results: dict[str, dict[str, float]] = {}
        pooled: list[np.ndarray] = []
        headline = set(headline_sets(self.sets))  # in-distribution sets stay out of average/pooled
        self.seed = int(seed)
        shares = self.shares()
        with torch.no_grad():  # a few small sets: one engine call for all of them (_all_sets)
            merged = self._all_sets(shares, k, sample, "sample", seed, bool(getattr(c, "bootstrap", 0)))
            merged_greedy = self._all_sets(shares, 1, greedy, "greedy", seed, False) if c.greedy else None
        for j, (name, data) in enumerate(sorted(self.sets.items())):
            gen = torch.Generator().manual_seed(int(seed) * 1000 + 17 + j)
            with torch.no_grad():
                per_sample: list | None = [] if getattr(c, "bootstrap", 0) else None
                if merged is not None:
                    succ = self._gather(*merged[name], per_sample)
                else:
                    succ = self._correct_counts(data, k, sample, gen, f"eval/{name}/sample", per_sample,
                                                share=shares[name])
                if name in headline:
                    pooled.append(succ)
                row = {
                    f"mean@{k}": float(np.mean(succ / k)),
                    f"pass@{k}": float(np.mean(pass_at_k(k, succ, k))),
                    "pass@1": float(np.mean(pass_at_k(k, succ, 1))),
                    "n_prompts": int(len(succ)),
                }
                if per_sample:
                    row.update(bootstrap_metrics(per_sample, k, c.bootstrap))
                if c.greedy:
                    g = (self._gather(merged_greedy[name][0], [], None) if merged_greedy is not None else
                         self._correct_counts(data, 1, greedy, gen, f"eval/{name}/greedy", share=shares[name]))
                    row["greedy"] = float(np.mean(g))
            results[name] = row
        results["average"] = {
            key: float(np.mean([results[s][key] for s in sorted(headline)]))
            for key in (f"mean@{k}", f"pass@{k}", "pass@1") + (("greedy",) if c.greedy else ())
            + ((f"best@{k}", f"maj@{k}") if getattr(c, "bootstrap", 0) else ())
        } if headline else {}
        # GDRO reports one pass@k pooled over every held-out prompt (gdro.md, Table 1).
        allp = np.concatenate(pooled) if pooled else np.zeros(0, dtype=np.int64)
        results["pooled"] = {} if not pooled else {
            f"mean@{k}": float(np.mean(allp / k)),
            f"pass@{k}": float(np.mean(pass_at_k(k, allp, k))),
            "pass@1": float(np.mean(pass_at_k(k, allp, 1))),
            "n_prompts": int(len(allp)),
        }
        if was_training:
            model.train()
        return results


def bootstrap_metrics(per_sample: list, k: int, n_bootstrap: int) -> dict[str, float]:
    """verl's ``best@k/mean`` and ``maj@k/mean`` of one evaluation set, averaged over its prompts:
    ``n_bootstrap`` resamples of k of each prompt's samples, with replacement, seed 42 (verl's).
    A vote counts extracted answers (no answer is a vote for None, as in verl); the voted answer's
    correctness is that of its first sample, as verl's ``calc_maj_val``."""
    best = best_at_k_bootstrap([ok for ok, _ in per_sample], k, n_bootstrap)
    maj = float(np.mean([maj_at_k(answers, ok.tolist(), k, n_bootstrap) for ok, answers in per_sample]))
    return {f"best@{k}": best, f"maj@{k}": maj}
