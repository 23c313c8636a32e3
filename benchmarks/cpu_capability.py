"""Are the default pipeline's numbers the same on a CPU with other vector instructions?

Trains the same runs twice, once with torch dispatching to this machine's native instruction set
and once with ``ATEN_CPU_CAPABILITY=default`` (no vector kernels: what an older or another CPU
may give), and compares what each run logs: the per-step rewards, the per-prompt success counts
and the held-out metrics before and after training. Prints, per run, whether the two are bit
for bit the same, the step at which they first part, and the largest difference in each
held-out metric in points; ``--json`` keeps the record (benchmarks/records/) that
docs/reproducibility.md cites.

    python benchmarks/cpu_capability.py --arms dynamo/GRPO dynamo/DynaMO --json benchmarks/records/cpu-capability/2026-12-03.json
    python benchmarks/cpu_capability.py --arms dynamo/GRPO --seeds 0 --steps 20   # a quick look

Each run is the real CLI (``python -m replication train``) on the default profile with the arm's
overrides from params.yaml (the arms need no encoder: uniform, DynaMO and Rollout-GDRO), one
thread each, two runs at a time. What this does not vary: MKL's own dispatch
(``MKL_ENABLE_INSTRUCTIONS``), which torch's BLAS calls follow whatever ATen does.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_ARMS = ("dynamo/GRPO", "dynamo/DynaMO", "gdro/Rollout-GDRO")
CAPABILITIES = ("native", "default")


def arm_overrides(spec: str) -> dict:
    """params.yaml's overrides of ``paper/arm`` (the section's base + the arm's own)."""
    from replication.orchestration.grid import load_section
    from replication.arms import select_arms

    paper, name = spec.split("/", 1)
    sec = load_section(paper, ROOT / "params.yaml")
    arms, _ = select_arms(sec, arms=[name])
    return arms[0].overrides


def train(spec: str, seed: int, steps: int | None, capability: str, out: Path) -> dict:
    from replication.orchestration.run_cache import train_command

    cmd = train_command("default", arm_overrides(spec), seed, steps, out, resume=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability != "native":
        env["ATEN_CPU_CAPABILITY"] = capability
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{spec} s{seed} ({capability}) failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {"seconds": time.perf_counter() - t0, "metrics": metrics,
            "steps": [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()],
            "prompts": [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]}


TIMING = ("seconds", "wall", "time")


def _numbers(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(t in k for t in TIMING)}


def compare(a: dict, b: dict) -> dict:
    """Where two runs of the same inputs part: first differing step, held-out differences."""
    first = next((i for i, (x, y) in enumerate(zip(a["steps"], b["steps"])) if _numbers(x) != _numbers(y)), None)
    fields = [] if first is None else sorted(k for k, v in _numbers(a["steps"][first]).items()
                                             if v != b["steps"][first].get(k))
    prompts_same = [_numbers(x) for x in a["prompts"]] == [_numbers(y) for y in b["prompts"]]
    evals = {}
    for when in ("eval_before", "eval_after"):
        for set_name, values in a["metrics"][when].items():
            for metric, v in values.items():
                w = b["metrics"][when][set_name][metric]
                evals[f"{when}/{set_name}/{metric}"] = round(100 * (w - v), 6)
    after = {k: v for k, v in evals.items() if k.startswith("eval_after")}
    return {"bit_identical": first is None and prompts_same and all(v == 0 for v in evals.values()),
            "first_differing_step": first, "fields_apart_at_first_step": fields,
            "prompt_records_identical": prompts_same,
            "eval_before_identical": all(v == 0 for k, v in evals.items() if k.startswith("eval_before")),
            "max_abs_eval_after_pts": max((abs(v) for v in after.values()), default=0.0),
            "eval_differences_pts": evals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), metavar="PAPER/ARM")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, help="steps per run (default: the profile's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the record here")
    args = ap.parse_args(argv)
    import torch

    native = torch.backends.cpu.get_cpu_capability()
    jobs = [(arm, seed, cap) for arm in args.arms for seed in args.seeds for cap in CAPABILITIES]
    from replication.provenance import machine_provenance

    record = {"args": {"arms": args.arms, "seeds": args.seeds, "steps": args.steps},
              "command": "python benchmarks/cpu_capability.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "native_capability": native, "machine": machine_provenance(), "runs": []}
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(args.workers) as pool:
        futures = {pool.submit(train, arm, seed, args.steps, cap, Path(tmp) / f"{arm.replace('/', '-')}-s{seed}-{cap}"):
                   (arm, seed, cap) for arm, seed, cap in jobs}
        for fut in cf.as_completed(futures):
            arm, seed, cap = futures[fut]
            results[arm, seed, cap] = fut.result()
            print(f"trained {arm} s{seed} under {cap} in {results[arm, seed, cap]['seconds']:.0f} s", flush=True)
            if all((arm, seed, c) in results for c in CAPABILITIES):  # a pair is complete: keep it now
                c = compare(results[arm, seed, "native"], results[arm, seed, "default"])
                c.update(arm=arm, seed=seed, seconds={k: round(results[arm, seed, k]["seconds"], 1)
                                                      for k in CAPABILITIES})
                record["runs"].append(c)
                if args.json:  # written after every pair: a stopped measurement keeps what it has
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"\nnative = {native} vs ATEN_CPU_CAPABILITY=default")
    print(f"{'run':<28} {'bit-identical':>13} {'first step apart':>17} {'max |Δ| held-out after (pts)':>30}")
    for c in record["runs"]:
        print(f"{c['arm'] + ' s' + str(c['seed']):<28} {str(c['bit_identical']):>13} {str(c['first_differing_step']):>17} "
              f"{c['max_abs_eval_after_pts']:>30.2f}  {', '.join(c['fields_apart_at_first_step'][:4])}")
    if args.json:
        print(f"record: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
