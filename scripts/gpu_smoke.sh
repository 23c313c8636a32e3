#!/usr/bin/env bash
# GPU smoke test: the trainer in bf16 on one CUDA GPU, on the committed tiny model, offline.
#
#     bash scripts/gpu_smoke.sh                          # ~50 steps + eval, HF engine, then vLLM
#     bash scripts/gpu_smoke.sh --steps 20 --out runs/gpu-smoke
#     bash scripts/gpu_smoke.sh --device cpu --steps 2   # checks the script itself on a CPU box
#
# Needs only torch (CUDA build), transformers, accelerate and gpytorch plus this package (and
# vllm, if importable, for the second run); no network (HF_HUB_OFFLINE=1). For each engine it
# prints rollouts/s, the mean step split (generate / old log-probs / update / weight sync /
# allocator), the held-out score before/after and peak GPU memory. Exit 1 without CUDA (unless
# --device cpu), non-zero if a run fails. PYTHON selects the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
device=cuda
steps=50
out=runs/gpu-smoke
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--device cuda|cpu] [--steps N] [--out DIR]" >&2; exit 2 ;;
    esac
done
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 DVC_NO_ANALYTICS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
exec "$PY" - "$device" "$steps" "$out" <<'PYEOF'
import importlib.util
import json
import resource
import sys
import time
from pathlib import Path

import torch

device, steps, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
if device not in ("cuda", "cpu"):
    sys.exit(f"gpu_smoke: --device must be cuda or cpu, got {device!r}")
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_smoke: no CUDA device (torch.cuda.is_available() is False, torch "
             f"{torch.__version__}); run it on a GPU machine, or check the script itself with "
             "`bash scripts/gpu_smoke.sh --device cpu --steps 2`")

from replication.config import load_profile
from replication.train.loop import train

overrides = {"model.path": "results/base-model", "model.device": device,
             # bf16 on the GPU as the papers train; float32 on CPU (bf16 matmuls are slow there)
             "model.dtype": "bfloat16" if device == "cuda" else "float32"}
if device == "cpu":  # the script's own check: a small eval keeps it to seconds
    overrides.update({"eval.prompts_per_set": 16, "eval.k": 2})
engines = ["hf"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
if len(engines) == 1:
    print("gpu_smoke: vllm is not importable here: only the HF engine runs")
failed = False
for engine in engines:
    over = dict(overrides, **{"rollout.engine": engine})
    if engine == "vllm":
        over["rollout.vllm.kv_cache_gib"] = 2.0  # not half the GPU for a 0.4M-parameter model
    cfg = load_profile("default", over)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        m = train(cfg, out / engine, max_steps=steps, overwrite=True, progress=False)
    except Exception as err:  # report and go on to the next engine
        print(f"gpu_smoke [{engine}]: FAILED: {type(err).__name__}: {err}")
        failed = True
        continue
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / engine / "steps.jsonl").read_text().splitlines()]
    step_s = sum(r["step_seconds"] for r in rows)
    split = {k: sum(r.get(f"{k}_seconds", 0.0) for r in rows) / len(rows)
             for k in ("generate", "old_logprob", "update", "sync", "allocator")}
    if device == "cuda":
        memory = (f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated by "
                  f"torch, {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved")
    else:
        memory = f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (CPU run)"
    print(f"gpu_smoke [{engine}] {device} {cfg.model.dtype}: {len(rows)} steps, "
          f"{sum(r['rollouts'] for r in rows) / step_s:.1f} rollouts/s over the steps, "
          f"wall {wall:.1f} s with eval")
    print(f"  step split (mean s): " + ", ".join(f"{k} {v:.4f}" for k, v in split.items())
          + f", whole step {step_s / len(rows):.4f}")
    print(f"  held-out pass@1 before {m['eval_before']['average']['pass@1']:.3f}, "
          f"after {m['eval_after']['average']['pass@1']:.3f}")
    print(f"  {memory}")
sys.exit(1 if failed else 0)
PYEOF
