"""float32 or bfloat16 for the rehearsals' policy on this CPU? (docs/rehearsal.md, "The dtype")

Times, on one thread per process (what each of a rehearsal's two processes has), the two passes a rehearsal
step spends its time in, with SmolLM2-135M-Instruct (the rehearsal policy, converted by the base
stage into .cache/smollm2-135m-instruct) loaded in each dtype:

- **update**: one forward and backward pass over one row of ``--tokens`` tokens (VIP's 4-shot
  prompts are 517–576 tokens in the chat template; the paper profiles' ``rl.micro_batch_rows`` is 1),
  the loss a mean of the last 32 positions' log-probabilities;
- **generate**: the trainer's HF engine (``HFRolloutEngine.generate``) sampling ``--rows``
  rollouts of ``--new-tokens`` tokens (temperature 1, no early stop) from one prompt of about
  ``--tokens`` tokens: one prefill, then KV-cached decoding (a group's rollouts).

Each is repeated ``--repeats`` times after one warm-up, in ``--processes`` processes at once (2:
as a rehearsal's two ranks share the cores and the memory bandwidth; decoding reads every weight
once per token, so it is bound by that bandwidth and bfloat16 halves what it reads); the median
over processes and repeats is printed, with the ratio float32 / bfloat16 (above 1: bfloat16 is
faster). ``--json`` keeps the record, with the CPU's
model name and its bf16 vector flags (``avx512_bf16``, ``amx_bf16``): on a CPU without them torch
computes bfloat16 through float32 and the ratio falls below 1.

    python benchmarks/bench_cpu_dtype.py --json benchmarks/records/cpu-dtype/2026-12-07.json
    python benchmarks/bench_cpu_dtype.py --processes 1 --repeats 2    # one idle core
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".cache" / "smollm2-135m-instruct"
DTYPES = ("float32", "bfloat16")


def cpu_info() -> dict:
    """The CPU's model name and which bf16 vector instructions it has (Linux /proc/cpuinfo)."""
    name, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"model": name, "bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})}


def time_dtype(dtype: str, tokens: int, rows: int, new_tokens: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from replication.config.rollout_sections import SamplingConfig
    from replication.models import load_policy
    from replication.rollout.hf_engine import HFRolloutEngine

    torch.manual_seed(0)
    model, tokenizer = load_policy(str(MODEL), device="cpu", dtype=dtype)
    ids = torch.randint(0, model.config.vocab_size - 1, (1, tokens))

    def update() -> None:
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits[:, -32:].float()
        torch.log_softmax(logits, -1).mean().backward()

    # no EOS can end a row early: every row decodes new_tokens steps
    engine = HFRolloutEngine(model, tokenizer, add_special_tokens=False, eos_token_ids=[-1])
    prompt = tokenizer.decode(ids[0])
    sampling = SamplingConfig(max_new_tokens=new_tokens, temperature=1.0)

    def generate() -> None:
        engine.generate(["p"], [prompt], ["0"], np.array([rows]), sampling,
                        generator=torch.Generator().manual_seed(0))

    result = {}
    for name, fn in (("update", update), ("generate", generate)):
        fn()  # warm-up: first-call allocations and kernel selection
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        result[name] = {"seconds": times, "median": statistics.median(times)}
    return result


def _one_process(job: tuple) -> dict:
    """One process's timings, on one thread (a rehearsal rank's ``model.threads``)."""
    import torch

    torch.set_num_threads(1)
    return time_dtype(*job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=576, help="prompt tokens of the row (VIP's longest 4-shot prompt)")
    ap.add_argument("--rows", type=int, default=8, help="rollouts of the prompt (a group)")
    ap.add_argument("--new-tokens", type=int, default=32, help="new tokens per rollout (the rehearsals' max_new_tokens)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2, help="processes timed at once (a rehearsal's ranks)")
    ap.add_argument("--json", type=Path, help="write the record here")
    args = ap.parse_args(argv)
    for name in ("tokens", "rows", "new_tokens", "repeats", "processes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if not (MODEL / "config.json").exists():
        ap.error(f"{MODEL} is missing: python -m replication prepare-model --profile rehearsal-vip")

    import torch

    timings = {}
    for dtype in DTYPES:
        jobs = [(dtype, args.tokens, args.rows, args.new_tokens, args.repeats)] * args.processes
        with cf.ProcessPoolExecutor(args.processes, mp_context=mp.get_context("spawn")) as pool:
            per_process = list(pool.map(_one_process, jobs))
        timings[dtype] = {name: {"seconds": [t for p in per_process for t in p[name]["seconds"]]}
                          for name in ("update", "generate")}
        for entry in timings[dtype].values():
            entry["median"] = statistics.median(entry["seconds"])
    ratios = {name: timings["float32"][name]["median"] / timings["bfloat16"][name]["median"]
              for name in ("update", "generate")}
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "cpu": cpu_info(), "torch": torch.__version__, "timings": timings, "ratios": ratios}
    print("\n".join(table_lines(record)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


def table_lines(record: dict) -> list[str]:
    """The printed table of a record (docs/rehearsal.md quotes it; its test compares)."""
    cpu, t = record["cpu"], record["timings"]
    lines = [f"CPU: {cpu['model']} (bf16 flags: {', '.join(cpu['bf16_flags']) or 'none'}); torch {record['torch']}, "
             f"{record['args']['processes']} process(es) of 1 thread at once",
             f"{'pass':<8}{'float32 s':>11}{'bfloat16 s':>12}{'ratio':>8}"]
    for name in ("update", "generate"):
        lines.append(f"{name:<8}{t['float32'][name]['median']:>11.2f}{t['bfloat16'][name]['median']:>12.2f}"
                     f"{record['ratios'][name]:>8.2f}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
