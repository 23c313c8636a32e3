"""Rollouts per second of the HF engine: 32 train-pool prompts x 8 rollouts, T = 1, 8 new tokens.

    .venv/bin/python benchmarks/bench_hf_engine.py --model results/base-model [--threads 1] [--repeats 20]

Times ``HFRolloutEngine.generate`` only (no verification); prints the median over ``repeats``
calls after 5 warm-up calls, and the mean completion length (tokens including EOS). With an
untrained model completions run to the 8-token limit, so use the SFT model for real numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from replication.models import load_policy
from replication.rollout import HFRolloutEngine, SamplingConfig
from replication.tasks import TaskMixSpec, build_tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF folder of the policy")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--rollouts", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_policy(args.model)
    engine = HFRolloutEngine(model, tok)
    train = build_tasks(TaskMixSpec()).train
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8)
    counts = np.full(args.prompts, args.rollouts)
    times, lengths = [], []
    for i in range(5 + args.repeats):
        ps = [train[j] for j in rng.choice(len(train), args.prompts, replace=False)]
        t0 = time.perf_counter()
        batch = engine.generate([p.id for p in ps], [p.text for p in ps], [p.answer for p in ps], counts, sampling, gen)
        if i >= 5:
            times.append(time.perf_counter() - t0)
            lengths.append(float(batch.completion_mask.sum(1).float().mean()))
    med = statistics.median(times)
    n = int(counts.sum())
    print(f"threads={args.threads}: {med * 1000:.1f} ms per {n} rollouts (median of {args.repeats}) "
          f"-> {n / med:.0f} rollouts/s; mean completion {np.mean(lengths):.2f} tokens incl. EOS")


if __name__ == "__main__":
    main()
