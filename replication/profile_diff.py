"""``python -m replication diff-profiles A B``: how two profiles differ where it matters — in the
configuration each paper ARM resolves to under them, not in the YAML files.

An arm's configuration is its profile plus the paper section's ``base`` and the arm's own
overrides *at the scale the profile belongs to* (``stage_params.section_at_scale``: paper-vip is
VIP's profile at scale ``paper``, rehearsal-vip at ``rehearsal``; any other profile is read with
the small-scale section). For each paper and arm that both profiles train, the flattened configs
are compared key by key:

    python -m replication diff-profiles paper-vip rehearsal-vip
    vip / RLOO+VIP (paper-vip at scale paper, rehearsal-vip at scale rehearsal): 14 keys differ
      model.path: "Qwen/Qwen2.5-Math-1.5B" -> ".cache/smollm2-135m-instruct"   [rehearsal: the policy]
      ...

A rehearsal replaces only what 2 CPU cores cannot run; ``REHEARSAL_REPLACES`` lists those keys,
each with its reason, and ``unexplained`` returns every other difference (a test keeps it empty,
so a rehearsal can never drift from its paper profile unnoticed).
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

REHEARSAL_REPLACES: dict[str, str] = {
    "profile": "the profile's name",
    "steps": "the sizes: 2-3 steps instead of the paper's run (GDRO's weights move from the third)",
    "checkpoint_every": "the sizes: a checkpoint every step of the short run",
    "model.*": ("the policy: SmolLM2-135M-Instruct on CPU (no GPU, no hub here), in the paper's bfloat16 "
                "where the CPU computes it natively, else float32 (model.dtype_without_bf16)"),
    "task.options.train_path": "the data: local files in the training set's schema (no hub here)",
    "task.options.eval_paths.*": "the data: local files in each evaluation set's schema (no hub here)",
    "task.options.limit": "the data: the rehearsal pool's size",
    "task.options.formatter": "the policy: an instruct model reads the paper's prompt inside its chat template",
    "rollout.prompts_per_step": "the sizes: a handful of prompts per step",
    "rollout.mean_rollouts": "the sizes: fewer rollouts per prompt (the budget C = Q n)",
    "rollout.lower": "the sizes: allocation bounds scaled with the rollouts per prompt",
    "rollout.upper": "the sizes: allocation bounds scaled with the rollouts per prompt",
    "rollout.sampling.max_new_tokens": "the sizes: ~32 new tokens instead of 3,072",
    "rollout.engine": "the engine: the HF engine on CPU (a vLLM rehearsal is scripts/vllm_cpu_env.sh's)",
    "rollout.vllm.*": "the engine: vLLM settings unused by the HF engine",
    "rl.mini_batches": "the sizes: one PPO mini-batch of the few prompts",
    "rl.micro_batch_rows": ("the sizes: 4 short rows a pass instead of one 3-4k-token row (on 2 CPU cores a "
                            "pass over the FSDP-sharded policy pays its gloo collectives each time: "
                            "benchmarks/bench_fsdp_pass.py)"),
    "optim.fused": "the engine: the fused AdamW kernel is a CUDA kernel",
    "eval.k": "the sizes: fewer samples per evaluation problem (the metrics are computed the same way)",
    "eval.prompts_per_set": "the sizes: 1-2 problems per evaluation set",
    "allocator.options.embedder_options.*": "the data: the encoder's local folder",
    "gradvar.*": "the sizes: the notebook's gradient-variance section cut to its mechanics (not training)",
}
"""Config keys (fnmatch patterns on the flattened config) a rehearsal may change, with why."""


def arm_configs(profile: str, params: dict, params_file: str | Path = "params.yaml") -> tuple[str, dict]:
    """(the scale ``profile`` is read at, {(paper, arm): flattened config}) for every arm each paper
    trains at that scale (its ``run`` list)."""
    from replication.arms import select_arms
    from replication.cli_defaults import _section_for, flatten
    from replication.config import load_profile, to_dict
    from replication.stage_params import PAPER_STAGES

    out, scale = {}, "small"
    sections = {paper: _section_for(params, paper, profile) for paper in PAPER_STAGES}
    # a paper or rehearsal profile belongs to the papers whose scale entry names it (paper-vip is
    # VIP's, not DynaMO's); a small-scale profile runs every paper
    own = [p for p, sec in sections.items() if sec.get("profile") == profile]
    for paper in own or PAPER_STAGES:
        sec = sections[paper]
        scale = sec.get("scale", scale) if sec.get("profile") == profile else scale
        arms, _ = select_arms({**sec, "profile": profile})
        for arm in arms:
            out[paper, arm.name] = flatten(to_dict(load_profile(profile, {**arm.overrides, "seed": 0})))
    return scale, out


def differences(a: dict, b: dict) -> dict[str, tuple[Any, Any]]:
    """{key: (a's value, b's value)} of every flattened key whose values differ."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def reason(key: str) -> str | None:
    """Why a rehearsal may change ``key`` (REHEARSAL_REPLACES), or None."""
    return next((why for pat, why in REHEARSAL_REPLACES.items() if fnmatch.fnmatchcase(key, pat)), None)


def unexplained(diff: dict[str, tuple[Any, Any]]) -> dict[str, tuple[Any, Any]]:
    return {k: v for k, v in diff.items() if reason(k) is None}


def compare(a: str, b: str, params_file: str | Path | None = None) -> list[tuple[str, str, dict]]:
    """[(paper, arm, differences)] for every paper arm both profiles train."""
    from replication.stage_params import load_params

    params = load_params(params_file)
    _, arms_a = arm_configs(a, params)
    _, arms_b = arm_configs(b, params)
    return [(paper, arm, differences(arms_a[paper, arm], arms_b[paper, arm]))
            for paper, arm in arms_a if (paper, arm) in arms_b]


def main(argv: list[str] | None = None) -> int:
    import argparse

    from replication.config import ConfigError

    ap = argparse.ArgumentParser(prog="python -m replication diff-profiles", description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--params", default=None, help="params.yaml (default: the repository's)")
    args = ap.parse_args(argv)
    try:
        rows = compare(args.a, args.b, args.params)
    except ConfigError as e:
        print(f"error: {e}")
        return 2
    if not rows:
        print(f"no paper arm is trained under both {args.a} and {args.b}")
        return 1
    for paper, arm, diff in rows:
        print(f"{paper} / {arm}: {len(diff)} keys differ ({args.a} -> {args.b})")
        for k, (va, vb) in diff.items():
            why = reason(k)
            print(f"  {k}: {json.dumps(va, default=str)} -> {json.dumps(vb, default=str)}"
                  + (f"   [{why}]" if why else "   [NOT A LISTED REHEARSAL CHANGE]"))
    return 0
