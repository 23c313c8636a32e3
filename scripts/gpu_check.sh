#!/usr/bin/env bash
# The first hour on GPUs: run this first on a GPU box. One table at the end, ~5-10 min on one GPU.
#
#     bash scripts/gpu_check.sh                           # every check on the visible GPUs
#     bash scripts/gpu_check.sh --steps 20 --out runs/gpu-check
#     bash scripts/gpu_check.sh --device cpu              # checks the script itself on a CPU box
#
# On the committed tiny model, offline (HF_HUB_OFFLINE=1), the default profile: one short run per
# GPU slice through the launch layer (disjoint CUDA_VISIBLE_DEVICES, all at once), one 2-GPU
# torchrun run when two GPUs are visible, the trainer's rollouts/s with the HF engine (bf16, step
# split, held-out score, peak GPU memory), benchmarks/bench_processes.py --device cuda, and, where
# vllm is importable, benchmarks/bench_vllm_in_loop.py (the vLLM engine's rollouts/s inside the
# training loop against standalone vLLM generation of the same prompts and lengths); where it is
# not, a line says that check was skipped. Then one table: a row per check, ok / FAILED / skipped.
# Exit 1 without CUDA (unless --device cpu) before anything runs, 1 when a check failed, 2 on
# bad arguments. PYTHON selects the interpreter (default: python3); VLLM_PYTHON the one for the
# vLLM check (default: PYTHON). The checks themselves: scripts/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 DVC_NO_ANALYTICS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" scripts/gpu_check.py "$@"
