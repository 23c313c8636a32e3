"""Command line: ``python -m replication {train,eval,sft,grad-variance,profiles} ...``.

    python -m replication sft   --profile default --out runs/base-model
    python -m replication train --profile default --allocator vip --estimator rloo --seed 0 \
        --max-steps 50 --out runs/vip-s0 [--resume]
    python -m replication eval  --profile default --checkpoint runs/vip-s0 --out runs/vip-eval
    python -m replication prepare-model --profile smollm2       # converts into .cache/ (git-ignored)
    python -m replication prefetch --scale paper               # login node: hub repos -> hub.lock.json

    python -m replication seal   results/vip/runs     # check old exports, write their manifests
    python -m replication verify results/              # everything the pipeline wrote, one line each

Every argument is checked (and the profile validated) before any model is loaded. A user-facing
error is one line on stderr naming the bad key, file or value, with exit code 2; a run that
diverges (NaN/inf) exits 3; a damaged run or export, or a write that fails (disk full, quota,
file-size limit, read-only disk, permission, I/O error), exits 1 with one line naming the file
and the free space; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import sys
from pathlib import Path

from replication.config import ConfigError, available_profiles, load_profile, yaml_problem

PARENT_ENV = "REPLICATION_PARENT_PID"
"""Set by the grid: the training subprocess exits when that process dies."""


_EXPONENT_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _numbers(val):
    """YAML 1.1 reads "6e-5" (no dot) as a string, at any depth; users mean the number."""
    if isinstance(val, str) and _EXPONENT_FLOAT.match(val):
        return float(val)
    if isinstance(val, dict):
        return {k: _numbers(x) for k, x in val.items()}
    if isinstance(val, list):
        return [_numbers(x) for x in val]
    return val


def _parse_value(k: str, v: str):
    """A --set value: JSON first (what the grid writes; json.dumps(1e-6) is "1e-06", which YAML
    reads as a string inside {share_floor: 1e-06}), else YAML with exponent floats at any depth."""
    import yaml

    try:
        return json.loads(v)
    except ValueError:
        pass
    try:
        return _numbers(yaml.safe_load(v))
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {k}: cannot parse value {v!r} ({yaml_problem(e)})") from None


def _overrides(args: argparse.Namespace) -> dict:
    o: dict = {}
    for kv in args.set or []:
        if "=" not in kv:
            raise ConfigError(f"--set expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        if not k.strip():
            raise ConfigError(f"--set {kv!r}: empty key")
        o[k] = _parse_value(k, v)
    if getattr(args, "allocator", None):
        o["allocator.name"] = args.allocator
    if getattr(args, "estimator", None):
        o["rl.estimator"] = args.estimator
    if getattr(args, "modulation", None):
        o["rl.modulation"] = None if args.modulation == "none" else args.modulation
    if getattr(args, "prompt_weights", None):
        o["rl.prompt_weights"] = None if args.prompt_weights == "none" else args.prompt_weights
    if getattr(args, "seed", None) is not None and getattr(args, "cmd", None) != "grad-variance":
        o["seed"] = args.seed
    if getattr(args, "model", None):
        o["model.path"] = args.model
    return o


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default",
                   help=f"one of {available_profiles()}, or a YAML file (the profile named by its stem)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. --set rollout.mean_rollouts=8 (repeatable)")
    p.add_argument("--model", help="policy folder (overrides model.path)")


def build_parser() -> argparse.ArgumentParser:
    # Choices come from the registries: a new method is one decorated class plus its config.
    from replication.allocation import ALLOCATORS, PROMPT_WEIGHTS
    from replication.rl.advantages import ADVANTAGE_ESTIMATORS
    from replication.rl.modulation import MODULATIONS

    ap = argparse.ArgumentParser(prog="python -m replication", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("train", help="online RL with a rollout allocator")
    _common(t)
    t.add_argument("--allocator", metavar="NAME",  # checked by config validation (names the key)
                   help=f"registered allocator: {', '.join(ALLOCATORS.names())}")
    t.add_argument("--estimator", choices=ADVANTAGE_ESTIMATORS.names())
    t.add_argument("--modulation", choices=[*MODULATIONS.names(), "none"])
    t.add_argument("--prompt-weights", choices=[*PROMPT_WEIGHTS.names(), "none"])
    t.add_argument("--seed", type=int, required=True)
    t.add_argument("--max-steps", type=int, help="stop after N steps (default: the profile's)")
    t.add_argument("--out", required=True, type=Path)
    t.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    t.add_argument("--overwrite", action="store_true",
                   help="replace a run already in OUT (never done without this flag)")
    t.add_argument("--no-progress", action="store_true")

    e = sub.add_parser("eval", help="held-out evaluation of a saved model")
    _common(e)
    e.add_argument("--checkpoint", required=True, type=Path,
                   help="HF folder of the model, or a run folder (its model/ or latest checkpoint)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", required=True, type=Path)

    s = sub.add_parser("sft", help="supervised warm start of the tiny base model")
    _common(s)
    s.add_argument("--out", required=True, type=Path)
    s.add_argument("--steps", type=int, help="override the SFT step count (smoke runs)")
    s.add_argument("--seed", type=int)

    pm = sub.add_parser("prepare-model", help="build the profile's base model (SFT / convert / note)")
    _common(pm)
    pm.add_argument("--out", type=Path, help="folder of the model (required for model.source sft; "
                    "smollm2 converts into model.path, --out only records where)")
    pm.add_argument("--steps", type=int, help="override the SFT step count (smoke runs)")

    r = sub.add_parser("report", help="cross-paper summary from results/<paper>/summary.json")
    r.add_argument("--results", default=Path("results"), type=Path)
    r.add_argument("--out", default=Path("results/summary.md"), type=Path)
    r.add_argument("--readme", type=Path, help="also refresh the results block of this README "
                   "(published default only: refused for summaries of any other profile)")
    r.add_argument("--beside", type=Path, metavar="RESULTS",
                   help="also list this folder's papers (e.g. a trial's workspace/quick beside results)")

    st = sub.add_parser("stage", help="run one DVC stage (dvc.yaml's cmd): validate, lock, run, swap in")
    st.add_argument("stage", help="base, vip, dynamo, gdro or report")
    st.add_argument("--params", default=Path("params.yaml"), type=Path)

    from replication.prefetch import configure_parser

    configure_parser(sub.add_parser("prefetch", help="on a machine that reaches the hub: fetch a scale's hub "
                                                      "models and datasets and pin them in hub.lock.json"))

    g = sub.add_parser("grad-variance", help="policy-gradient variance per allocator at checkpoints of a "
                       "uniform run (issue 10; replication/analysis/gradient_variance.py)")
    _common(g)
    g.add_argument("--run", required=True, type=Path,
                   help="uniform run folder: its checkpoints are trained there when missing")
    g.add_argument("--out", required=True, type=Path, help="folder for gradient_variance.csv")
    g.add_argument("--steps", default="0,100,300", help="checkpoint steps, comma-separated (default 0,100,300)")
    g.add_argument("--draws", type=int, default=30, help="rollout sets per allocator and checkpoint")
    g.add_argument("--reference-draws", type=int, default=30, help="uniform draws for the projection direction")
    g.add_argument("--oracle-samples", type=int, default=64, help="rollouts per prompt estimating the true p")
    g.add_argument("--prompts", type=int, help="fixed batch size Q (default: the profile's prompts_per_step)")
    g.add_argument("--methods", help="comma-separated subset of the methods (default: all)")
    g.add_argument("--estimator", choices=ADVANTAGE_ESTIMATORS.names())
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the measurement (batch, rollouts, bootstrap); the run uses the profile's")
    g.add_argument("--bootstrap", type=int, default=2000)

    v = sub.add_parser("validate", help="check a DVC stage's parameters (run before the stage "
                                         "touches any output)")
    v.add_argument("--params", default=Path("params.yaml"), type=Path)
    v.add_argument("--stage", required=True, help="base, vip, dynamo, gdro or report")
    v.add_argument("--clear", nargs="*", type=Path, default=[], metavar="PATH",
                   help="after a successful check, remove these old outputs (what DVC does to "
                        "non-persistent outputs, done only once the parameters are known good)")

    sl = sub.add_parser("seal", help="check exports or paper products made before manifests (every file "
                                     "parsed, summary vs tables, runs verified) and write their "
                                     "MANIFEST.json once; sealed ones are verified")
    sl.add_argument("folders", nargs="+", type=Path, metavar="FOLDER",
                    help="a run folder, a results/<paper>/runs folder of <arm>/s<seed> exports, or results/<paper>")
    vf = sub.add_parser("verify", help="verify anything the pipeline writes (runs, exports, paper products, "
                                       "measurements, base model, summary.json, results/): exit 0 verified, "
                                       "1 damage, 2 bad input")
    vf.add_argument("folders", nargs="+", type=Path, metavar="PATH")

    from replication.launch.status import DESCRIPTION, configure_parser as status_parser

    status_parser(sub.add_parser("status", help=DESCRIPTION))  # replication/launch/status.py
    sub.add_parser("profiles", help="list the available profiles")
    dp = sub.add_parser("diff-profiles", help="how two profiles differ in the configuration each paper arm "
                                              "resolves to (replication/profile_diff.py)")
    dp.add_argument("profiles", nargs=2, metavar="PROFILE")
    dp.add_argument("--params", type=Path, metavar="FILE", help="the params file (default: params.yaml)")
    d = sub.add_parser("dry-run", help="validate a profile and print its plan, or plan a paper's grid "
                                        "(--paper); no GPU needed")
    _common(d)
    d.add_argument("--accelerate-config", type=Path, metavar="PATH",
                   help="accelerate config the run will be launched with (world size from num_processes)")
    d.add_argument("--world-size", type=int, metavar="N", help="number of training processes (GPUs)")
    d.add_argument("--gpu-memory-gib", type=float, default=80.0, metavar="GIB",
                   help="memory of one GPU the plan must fit (default 80: A100/H100 80GB)")
    d.add_argument("--paper", metavar="NAME", help="plan the grid of a paper (vip, dynamo, gdro) as params.yaml "
                   "resolves it: profile, arms, seeds, shape, placement, GPU-hours (replication/launch/grid_plan.py)")
    d.add_argument("--scale", metavar="SCALE", help="--paper: small, rehearsal or paper (default: params.yaml's)")
    d.add_argument("--params", type=Path, metavar="FILE", help="--paper: the params file (default: params.yaml)")
    d.add_argument("--launcher", metavar="BACKEND", help="--paper: local or slurm (default: params.yaml's launcher)")
    d.add_argument("--gpus", metavar="IDS", help="--paper, local: GPU ids to cut into slices, e.g. 0,1,2,3 "
                   "(default: params.yaml's launcher.gpus, else the visible GPUs)")
    d.add_argument("--json", action="store_true", help="--paper: print the plan as JSON")
    return ap


def _check_args(args: argparse.Namespace) -> None:
    """Cheap argument checks, before any data or model is loaded."""
    for name in ("seed", "max_steps", "steps"):
        value = getattr(args, name, None)
        if isinstance(value, int) and value < (0 if name == "seed" else 1):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag}: must be >= {0 if name == 'seed' else 1}, got {value}")
    out = getattr(args, "out", None)
    if out is not None and args.cmd in ("train", "eval", "sft", "prepare-model", "grad-variance"):
        from replication.cli_checks import refuse_results
        from replication.train.run_folder import check_out_dir

        refuse_results(out)
        check_out_dir(out)


def _is_lazy_error(e: BaseException, *kinds: tuple[str, str]) -> bool:
    """Whether ``e`` is one of the (module, class) errors, among the modules already imported."""
    return any(isinstance(e, getattr(sys.modules[m], cls)) for m, cls in kinds if m in sys.modules)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from replication.store import DamagedArtifact, DiskFull, ignore_file_size_signal
    from replication.train.run_folder import NonFiniteError

    ignore_file_size_signal()  # past RLIMIT_FSIZE a write fails (EFBIG, one line), no SIGXFSZ kill
    try:
        return _main(args)
    except (DamagedArtifact, DiskFull) as e:  # one line naming the file (and the free space)
        print(f"error: {e.strerror if isinstance(e, DiskFull) else e}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NonFiniteError as e:
        from replication.train.checkpoint import checkpoint_path

        last = checkpoint_path(args.out)
        kept = f"last good checkpoint kept: {last.parent}" if last else "no checkpoint was written yet"
        print(f"error: training diverged at {e}; run stopped, {kept}", file=sys.stderr)
        return 3
    except (ValueError, RuntimeError) as e:  # NonFiniteError (a RuntimeError) is above
        # a DataError (bad dataset file) or a dataset neither local nor in the hub cache: looked
        # up lazily, since importing replication.tasks here would load the task generators for
        # every command
        if not _is_lazy_error(e, ("replication.tasks.data_errors", "DataError"),
                              ("replication.tasks.math_hub", "DatasetUnavailableError"),
                              ("replication.store.hub_snapshot", "HubSnapshotMissing")):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    if args.cmd == "validate":
        from replication.stage_params import clear_outputs, validate_stage

        print(validate_stage(args.params, args.stage))
        clear_outputs(args.clear)
        return 0
    if args.cmd == "diff-profiles":
        from replication.profile_diff import main as diff_profiles

        return diff_profiles([*args.profiles] + (["--params", str(args.params)] if args.params else []))
    if args.cmd == "profiles":
        print("\n".join(available_profiles()))
        return 0
    if args.cmd == "status":
        from replication.launch.status import run_command as status

        return status(args)
    if args.cmd in ("seal", "verify"):
        return _seal_or_verify(args.cmd, args.folders)
    if args.cmd == "report":
        from replication.cli_checks import check_summaries
        from replication.report.summary import check_published, update_readme, write_summary

        check_summaries("--results", args.results)
        if args.beside is not None:
            check_summaries("--beside", args.beside)
        if args.readme:  # before writing anything: the README shows only the published default
            check_published(args.results, args.beside)
        text = write_summary(args.results, args.out, beside=args.beside)
        if args.readme:
            update_readme(args.readme, text)
        print(text)
        return 0
    if args.cmd == "prefetch":
        from replication.prefetch import run_command

        return run_command(args)
    if args.cmd == "stage":
        from replication.orchestration.stage import run_stage

        return run_stage(args.stage, args.params)
    if args.cmd == "dry-run":
        if args.paper is not None:
            return _dry_run_grid(args)
        _single_profile_flags(args)
    _check_args(args)
    cfg = load_profile(args.profile, _overrides(args))
    arm_note = None
    if args.cmd in ("train", "dry-run") and os.environ.get("RANK", "0") == "0" and not os.environ.get(PARENT_ENV):
        from replication.cli_defaults import note  # a user's run: say where it is not the pipeline's arm

        arm_note = note(cfg)
        if arm_note and args.cmd == "train":  # information: stdout for train (stderr stays the one
            # error line); dry-run prints it on stderr once its plan passed (a refusal: one line)
            print(arm_note, flush=True)
    if args.cmd == "train":
        from replication.interrupts import die_with_parent
        from replication.train.loop import train
        from replication.train.run_folder import unlock_run

        if os.environ.get(PARENT_ENV):  # a grid's run: never outlive the grid (kill -9 included)
            die_with_parent(int(os.environ[PARENT_ENV]))
        try:
            m = train(cfg, args.out, max_steps=args.max_steps, resume=args.resume,
                      overwrite=args.overwrite, progress=not args.no_progress)
        finally:
            unlock_run(args.out)
        if os.environ.get("RANK", "0") == "0":  # under torchrun/accelerate: rank 0 reports
            print(json.dumps({"eval_before": m["eval_before"]["average"],
                          "eval_after": m["eval_after"]["average"],
                          "wall_seconds": round(m["wall_seconds"], 1)}, indent=1))
    elif args.cmd == "eval":
        from replication.train.standalone_eval import evaluate_checkpoint

        res = evaluate_checkpoint(cfg, args.checkpoint, args.out, seed=args.seed)
        print(json.dumps(res["eval"]["average"], indent=1))
    elif args.cmd == "sft":
        from replication.sft import run_sft_from_profile

        run_sft_from_profile(cfg, args.out, steps=args.steps, seed=args.seed)
    elif args.cmd == "prepare-model":
        from replication.train.prepare import prepare_model

        print(prepare_model(cfg, args.out, steps=args.steps))
    elif args.cmd == "grad-variance":
        from replication.analysis.gradient_variance import GradVarConfig, run_grad_variance

        try:
            steps = tuple(int(x) for x in args.steps.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"--steps: comma-separated integers, got {args.steps!r}") from None
        if max(steps, default=0) > cfg.steps:
            raise ConfigError(f"--steps: {max(steps)} exceeds the profile's steps={cfg.steps}")
        kw = {} if not args.methods else {"methods": tuple(m.strip() for m in args.methods.split(","))}
        try:
            gv = GradVarConfig(steps=steps, draws=args.draws, reference_draws=args.reference_draws,
                               oracle_samples=args.oracle_samples, prompts=args.prompts, seed=args.seed,
                               bootstrap=args.bootstrap, **kw)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        df = run_grad_variance(cfg, args.run, args.out, gv, log=lambda m: print(m, file=sys.stderr))
        from replication.report.gradient_variance import variance_table

        print(variance_table(df).to_string(index=False))
    elif args.cmd == "dry-run":
        from replication.train.plan import profile_plan

        plan = profile_plan(cfg, gpus=args.world_size, accelerate_config=args.accelerate_config,
                            gpu_gib=args.gpu_memory_gib)
        print(json.dumps(plan, indent=1))
        for line in ([arm_note] if arm_note else []) + [f"warning: {w}" for w in plan.get("warnings", [])]:
            print(line, file=sys.stderr, flush=True)
    return 0


GRID_FLAGS = ("scale", "params", "launcher", "gpus", "json")
"""dry-run flags that only plan a paper's grid (``--paper``)."""


def _single_profile_flags(args: argparse.Namespace) -> None:
    """A single-profile dry-run refuses the grid's flags (they would be ignored)."""
    given = [f"--{n}" for n in GRID_FLAGS if getattr(args, n) not in (None, False)]
    if given:
        raise ConfigError(f"dry-run: {', '.join(given)} plan a paper's grid; add --paper vip|dynamo|gdro")


def _dry_run_grid(args: argparse.Namespace) -> int:
    """``dry-run --paper NAME``: the grid params.yaml resolves at a scale, placed and checked
    (replication/launch/grid_plan.py); the plan on stdout, its warnings on stderr."""
    one = [flag for flag, given in (("--profile", args.profile != "default"), ("--set", args.set),
                                   ("--model", args.model), ("--world-size", args.world_size is not None),
                                   ("--accelerate-config", args.accelerate_config)) if given]
    if one:
        raise ConfigError(f"dry-run --paper: {', '.join(one)} set(s) one profile; the grid takes its profile, "
                          f"arms, seeds and shape from params.yaml (--scale, --params)")
    from replication.launch.grid_plan import plan_grid
    from replication.launch.grid_plan_text import render

    plan = plan_grid(args.paper, scale=args.scale, params_file=args.params, launcher=args.launcher,
                     gpus=args.gpus, gpu_gib=args.gpu_memory_gib)
    print(json.dumps(plan.as_dict(), indent=1) if args.json else render(plan))
    for line in plan.warnings:
        print(f"warning: {line}", file=sys.stderr)
    return 0


def _seal_or_verify(cmd: str, roots: list[Path]) -> int:
    """Every kind of folder the pipeline writes, sealed once (``seal``) or verified; one line per
    item saying what was checked; exit 0 verified, 1 damage found, 2 bad input
    (replication/store/verify_all.py)."""
    from replication.store.verify_all import seal_paths, verify_paths

    return seal_paths(roots) if cmd == "seal" else verify_paths(roots)


if __name__ == "__main__":
    sys.exit(main())
