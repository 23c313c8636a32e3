"""The regime studies' stages (dvc.yaml ``regime-gp-settings``, ``regime-task-mix``): train the
fresh uniform runs a study reads, then run the study into results/regime/ (docs/regime.md,
"Choices made on seeds the reported results do not use").

The studies once read runs trained by hand under /tmp, so their evidence could not be rebuilt
from the repository. Here each study's runs are trained into the git-ignored workspace/regime/
(a run whose export verifies is kept, so a stopped stage resumes where it was) by the commands
docs/regime.md gives, and the study script writes its file whole:

    python scripts/regime_runs.py gp-settings   # uniform RLOO, seed 100 -> gp_settings_seed100.json
    python scripts/regime_runs.py task-mix      # uniform GRPO, two mixes x seeds 100-103 -> task_mix_...csv
    python scripts/regime_runs.py task-mix --dry-run   # print the commands only

Only DVC runs it with an output under results/ (replication.report.study_output).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

RUNS = Path("workspace/regime")
TRAIN = [sys.executable, "-m", "replication", "train", "--profile", "default", "--allocator", "uniform", "--no-progress"]

# The GP settings the rule compares (docs/regime.md, "VIP's GP settings"), in the study's order.
GP_SETTINGS = json.loads('{"median": {}, "bw=1.0": {"bandwidth": 1.0}, "bw=0.7": {"bandwidth": 0.7}, "bw=0.5": {"bandwidth": 0.5}, "bw=0.4": {"bandwidth": 0.4}, "bw=0.3": {"bandwidth": 0.3}, "bw=0.25": {"bandwidth": 0.25}, "bw=0.2": {"bandwidth": 0.2}, "bw=0.15": {"bandwidth": 0.15}, "bw=0.1": {"bandwidth": 0.1}, "bw=0.5,noise=0.25": {"bandwidth": 0.5, "noise": 0.25}, "bw=0.3,noise=0.25": {"bandwidth": 0.3, "noise": 0.25}, "bw=0.25,noise=0.25": {"bandwidth": 0.25, "noise": 0.25}, "bw=0.25,noise=4.0": {"bandwidth": 0.25, "noise": 4.0}, "bw=0.2,noise=0.25": {"bandwidth": 0.2, "noise": 0.25}, "bw=0.2,noise=4.0": {"bandwidth": 0.2, "noise": 4.0}, "bw=0.15,noise=0.25": {"bandwidth": 0.15, "noise": 0.25}, "bw=0.15,noise=4.0": {"bandwidth": 0.15, "noise": 4.0}, "bw=0.1,noise=0.25": {"bandwidth": 0.1, "noise": 0.25}, "bw=0.1,noise=4.0": {"bandwidth": 0.1, "noise": 4.0}}')
# VIP's base settings with the RLOO arm (params.yaml vip.base, vip.arms.RLOO): n = 8, L = 4, U = 16.
GP_RUN = ["--estimator", "rloo", "--seed", "100", "--set", "rollout.mean_rollouts=8", "--set", "rollout.lower=4",
          "--set", "rollout.upper=16", "--set", "rl.dual_clip=10.0"]
GP_OUT = Path("results/regime/gp_settings_seed100.json")

MIXES = {"frontier": {"add1t3": 1000, "add2": 3000, "add2t3": 1500},
         "addition": {"add1": 200, "add1t3": 1000, "add2": 3000, "add2t3": 1500, "add3": 1000}}
MIX_SEEDS = (100, 101, 102, 103)
MIX_OUT = Path("results/regime/task_mix_seeds_100-103.csv")


def plan(study: str) -> tuple[list[tuple[Path, list[str]]], list[str]]:
    """([(run folder, its train command)], the study's command)."""
    if study == "gp-settings":
        run = RUNS / "rloo" / "s100"
        study_cmd = [sys.executable, "scripts/gp_settings_study.py", str(run / "prompts.jsonl"),
                     json.dumps(GP_SETTINGS), "--encoder", "results/encoder", "--references", "--out", str(GP_OUT)]
        return [(run, [*TRAIN, *GP_RUN, "--out", str(run)])], study_cmd
    runs = []
    for mix, sizes in MIXES.items():
        for seed in MIX_SEEDS:
            run = RUNS / "mix" / mix / f"s{seed}"
            opts = json.dumps({"train_sizes": sizes})
            runs.append((run, [*TRAIN, "--seed", str(seed), "--out", str(run), "--set", f"task.options={opts}"]))
    study_cmd = [sys.executable, "scripts/task_mix_study.py",
                 *[a for mix in MIXES for a in ("--mix", f"{mix}={RUNS / 'mix' / mix}")], "--out", str(MIX_OUT)]
    return runs, study_cmd


def _finished(run: Path) -> bool:
    from replication.store import DamagedArtifact, verify_manifest

    try:
        verify_manifest(run)
    except (DamagedArtifact, OSError):
        return False
    return (run / "metrics.json").is_file()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["gp-settings", "task-mix"])
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    runs, study_cmd = plan(args.study)
    if args.dry_run:
        for run, cmd in runs:
            print(("# kept: " if _finished(run) else "") + shlex.join(cmd))
        print(shlex.join(study_cmd))
        return 0
    from replication.report.study_output import check_study_out

    check_study_out(study_cmd[-1])  # results/ only from its dvc.yaml stage
    for run, cmd in runs:
        if _finished(run):
            print(f"{run}: finished earlier, kept", flush=True)
            continue
        resume = ["--resume"] if (run / "checkpoint").exists() else []
        print(shlex.join(cmd + resume), flush=True)
        subprocess.run(cmd + resume, check=True)
    print(shlex.join(study_cmd), flush=True)
    return subprocess.run(study_cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
