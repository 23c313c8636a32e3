"""The positive-control regime study's stage (dvc.yaml ``regime-positive-control``; the rule:
replication/specs/positive_control.yaml, its prose: docs/positive_control.md).

    python scripts/positive_control.py --dry-run          # what is done, what each stage still asks for
    dvc repro regime-positive-control                     # run (restartable), write the study's files
    REPLICATION_PC_MAX_JOBS=4 dvc repro regime-positive-control   # at most 4 new jobs, then write

Stages, each from the one before: the screen (one uniform run per n̄ × prompts × mix × learning
rate at the declared seed, trained through ``python -m replication grad-variance`` so that its
checkpoints are kept and measured: uniform vs the oracle told p by 64 samples, for every L, U of
that n̄), the pilot (both arms, the declared seeds, the screen's best cells) and the confirmation
(both arms, fresh seeds, the pilot's pick). Full runs go to the git-ignored workspace/regime/
positive-control/; each finished run and measurement leaves a compact record under
results/regime/positive_control/ (config, metrics, a step summary with the oracle's probe cost,
the manifest with the declaration's git hash; no per-prompt log). A stopped study resumes: a
record that verifies is never redone. The study refuses to start while the declaration differs
from its committed version, and refuses records made under another declaration.
"""

from __future__ import annotations

import argparse
import os
import concurrent.futures as cf
import json
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replication.analysis import positive_control as pc  # noqa: E402

WORK = Path("workspace/regime/positive-control")
MAX_JOBS_ENV = "REPLICATION_PC_MAX_JOBS"
"""The DVC stage's command takes no arguments: a session that has an hour runs
``REPLICATION_PC_MAX_JOBS=8 dvc repro regime-positive-control`` and commits what it kept."""
OUT = Path("results/regime")
RUN_KIND, GRADVAR_KIND = "regime-run", "regime-gradvar"
_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(msg, flush=True)


def check_declaration(spec: Path) -> None:
    """Exit 2 unless the declaration is tracked by git and equal to its committed version."""
    rel = spec.resolve()
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(rel)], cwd=ROOT, capture_output=True)
    same = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(rel)], cwd=ROOT)
    if tracked.returncode != 0 or same.returncode != 0:
        print(f"error: {spec} is not committed as it is: the positive-control study runs only under its "
              "committed declaration (commit the rule before any run; a new rule is a new study)", file=sys.stderr)
        raise SystemExit(2)


class Records:
    """The compact records under ``out/positive_control/``: one folder per run and per cell's
    gradient-variance measurement, each with a manifest carrying the declaration's hash."""

    def __init__(self, out: Path, blob: str):
        self.root, self.blob = out / "positive_control", blob

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / name

    def gradvar_dir(self, cell: str) -> Path:
        return self.root / "gradvar" / cell

    def done(self, folder: Path, kind: str) -> bool:
        from replication.store import DamagedArtifact, verify_manifest

        if not (folder / "MANIFEST.json").is_file():
            return False
        try:
            m = verify_manifest(folder, kind=kind)
        except (DamagedArtifact, OSError):
            return False
        made = (m.get("extra") or {}).get("declaration")
        if made != self.blob:
            raise SystemExit(f"error: {folder} was made under declaration {made}, not the "
                             f"committed one ({self.blob}): a new rule is a new study, with its own output")
        return True

    def keep_run(self, name: str, run: Path) -> None:
        """The run's config, metrics and a summary of its steps (zero-variance share, probe cost)."""
        from replication.store import staged_dir

        steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line.strip()]
        summary = {"steps": len(steps),
                   "zero_variance_frac_mean": float(np.mean([s["zero_variance_frac"] for s in steps])),
                   "rollouts": int(sum(s["rollouts"] for s in steps)),
                   "probe_rollouts": int(sum(s.get("probe_rollouts", 0) for s in steps)),
                   "probe_seconds": float(sum(s.get("probe_seconds", 0.0) for s in steps)),
                   "step_seconds": float(sum(s.get("step_seconds", 0.0) for s in steps))}
        with staged_dir(self.run_dir(name), kind=RUN_KIND, extra={"declaration": self.blob, "run": name}) as tmp:
            shutil.copy2(run / "config.json", tmp / "config.json")
            shutil.copy2(run / "metrics.json", tmp / "metrics.json")
            (tmp / "steps_summary.json").write_text(json.dumps(summary, indent=1))

    def keep_gradvar(self, cell: str, measured: Path) -> None:
        from replication.store import staged_dir

        with staged_dir(self.gradvar_dir(cell), kind=GRADVAR_KIND, extra={"declaration": self.blob, "cell": cell}) as tmp:
            for f in ("gradient_variance.csv", "gradient_variance.json"):
                shutil.copy2(measured / f, tmp / f)

    def metrics(self, name: str) -> dict:
        return json.loads((self.run_dir(name) / "metrics.json").read_text())

    def summary(self, name: str) -> dict:
        return json.loads((self.run_dir(name) / "steps_summary.json").read_text())


def _run(cmd: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {shlex.join(cmd)} (log: {log})")


class Study:
    def __init__(self, study: pc.Study, records: Records, work: Path, profile_steps: int):
        self.s, self.rec, self.work, self.steps = study, records, work, profile_steps

    # -- jobs: (name, callable) ------------------------------------------------------------------
    def screen_jobs(self) -> list[tuple[str, callable]]:
        seed = int(self.s.screen["seed"])
        jobs = []
        by_uniform: dict[str, list[pc.Cell]] = {}
        for c in self.s.cells():
            by_uniform.setdefault(c.uniform_name, []).append(c)
        for uname, cells in by_uniform.items():
            name = pc.run_name(cells[0], "uniform", seed)
            todo = [c for c in cells if not self.rec.done(self.rec.gradvar_dir(c.name), GRADVAR_KIND)]
            if todo or not self.rec.done(self.rec.run_dir(name), RUN_KIND):
                jobs.append((f"screen {uname}", lambda cells=cells, name=name: self._screen(cells, name, seed)))
        return jobs

    def _screen(self, cells: list[pc.Cell], name: str, seed: int) -> None:
        run = self.work / "runs" / name
        g = self.s.screen["gradvar"]
        steps = ",".join(str(int(x)) for x in self.s.screen["checkpoints"])
        for c in cells:
            if self.rec.done(self.rec.gradvar_dir(c.name), GRADVAR_KIND):
                continue
            # the uniform run's config with this cell's L, U: the oracle's bounds in the measurement
            over = {**pc.run_overrides(self.s, c, "uniform"), "rollout.lower": c.budget.lower,
                    "rollout.upper": c.budget.upper, "seed": seed}
            measured = self.work / "gradvar" / c.name
            cmd = [sys.executable, "-m", "replication", "grad-variance", "--profile", self.s.profile,
                   *pc.set_args(over), "--run", str(run), "--out", str(measured), "--steps", steps,
                   "--draws", str(g["draws"]), "--reference-draws", str(g["reference_draws"]),
                   "--oracle-samples", str(g["oracle_samples"]), "--methods", "uniform,vip-oracle",
                   "--seed", str(seed), "--bootstrap", str(g["bootstrap"])]
            _run(cmd, self.work / "logs" / f"gradvar-{c.name}.log")
            self.rec.keep_gradvar(c.name, measured)
        if not self.rec.done(self.rec.run_dir(name), RUN_KIND):
            self.rec.keep_run(name, run)

    def train_job(self, cell: pc.Cell, arm: str, seed: int) -> tuple[str, callable] | None:
        name = pc.run_name(cell, arm, seed)
        if self.rec.done(self.rec.run_dir(name), RUN_KIND):
            return None

        def job():
            run = self.work / "runs" / name
            cmd = [sys.executable, "-m", "replication", "train", "--profile", self.s.profile,
                   *pc.set_args(pc.run_overrides(self.s, cell, arm)), "--seed", str(seed), "--out", str(run),
                   "--no-progress"]
            if (run / "metrics.json").is_file():
                pass  # finished earlier, only its record is missing
            elif (run / "checkpoint").exists():
                _run(cmd + ["--resume"], self.work / "logs" / f"{name.replace('/', '_')}.log")
            else:
                _run(cmd + ["--overwrite"] if run.exists() else cmd, self.work / "logs" / f"{name.replace('/', '_')}.log")
            self.rec.keep_run(name, run)

        return (name, job)

    # -- reading the records ---------------------------------------------------------------------
    def screen_table(self) -> pd.DataFrame:
        rows = []
        seed = int(self.s.screen["seed"])
        for c in self.s.cells():
            name = pc.run_name(c, "uniform", seed)
            row = {"cell": c.name, "statistic": np.nan, "uniform_gain": np.nan, "zero_variance_share": np.nan,
                   "ratio_by_checkpoint": ""}
            if self.rec.done(self.rec.gradvar_dir(c.name), GRADVAR_KIND):
                df = pd.read_csv(self.rec.gradvar_dir(c.name) / "gradient_variance.csv")
                row["statistic"], per = pc.screen_statistic(df)
                row["ratio_by_checkpoint"] = json.dumps(per)
            if self.rec.done(self.rec.run_dir(name), RUN_KIND):
                row["uniform_gain"] = pc.gain(self.rec.metrics(name), self.s.primary)
                row["zero_variance_share"] = self.rec.summary(name)["zero_variance_frac_mean"]
            rows.append(row)
        return pd.DataFrame(rows)

    def pairs(self, cells: list[pc.Cell], seeds: list[int]) -> pd.DataFrame:
        rows = []
        sec = self.s.secondary[0] if self.s.secondary else None
        for c in cells:
            for seed in seeds:
                u, o = pc.run_name(c, "uniform", seed), pc.run_name(c, "oracle", seed)
                if not (self.rec.done(self.rec.run_dir(u), RUN_KIND) and self.rec.done(self.rec.run_dir(o), RUN_KIND)):
                    continue
                mu, mo = self.rec.metrics(u), self.rec.metrics(o)
                su, so = self.rec.summary(u), self.rec.summary(o)
                rows.append({"cell": c.name, "seed": seed,
                             "uniform_after": pc.metric(mu, "eval_after", self.s.primary),
                             "oracle_after": pc.metric(mo, "eval_after", self.s.primary),
                             "uniform_gain": pc.gain(mu, self.s.primary),
                             "secondary_diff": (pc.metric(mo, "eval_after", sec) - pc.metric(mu, "eval_after", sec))
                             if sec else np.nan,
                             "oracle_probe_rollouts": so["probe_rollouts"], "oracle_probe_seconds": so["probe_seconds"],
                             "oracle_wall_seconds": mo["wall_seconds"], "uniform_wall_seconds": mu["wall_seconds"]})
        return pd.DataFrame(rows)


def _run_jobs(jobs, workers: int, max_jobs: int | None) -> int:
    """Run jobs, ``workers`` at a time; returns how many ran. A failed job stops the study after the
    running ones finish (their records are kept). Jobs are named by their run: a uniform run two
    cells share is one job."""
    from tqdm import tqdm

    jobs = list(dict((label, fn) for label, fn in jobs).items())
    if max_jobs is not None:
        jobs = jobs[:max_jobs]
    if not jobs:
        return 0
    failed = []
    with cf.ThreadPoolExecutor(max_workers=workers) as ex, tqdm(total=len(jobs), desc="positive control") as bar:
        futs = {ex.submit(fn): label for label, fn in jobs}
        for fut in cf.as_completed(futs):
            try:
                fut.result()
                say(f"done: {futs[fut]}")
            except Exception as e:  # noqa: BLE001 - reported, then the study stops
                failed.append(f"{futs[fut]}: {e}")
            bar.update()
    if failed:
        raise SystemExit("error: " + "; ".join(failed))
    return len(jobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=pc.SPEC, help="the declaration (default: the committed one)")
    ap.add_argument("--out", type=Path, default=OUT, help="where positive_control.csv/.png and the records go")
    ap.add_argument("--work", type=Path, default=WORK, help="full runs (git-ignored)")
    ap.add_argument("--workers", type=int, default=2)
    env_max = os.environ.get(MAX_JOBS_ENV)
    ap.add_argument("--max-jobs", type=int, default=int(env_max) if env_max else None,
                    help=f"run at most this many new jobs, then write the outputs as far as they go (default: "
                         f"${MAX_JOBS_ENV}, else no limit; 0 writes them from the records alone)")
    ap.add_argument("--dry-run", action="store_true", help="say what is done and what is left; run nothing")
    ap.add_argument("--uncommitted-spec", action="store_true",
                    help="tests only: accept a declaration outside git (refused with an --out under results/)")
    args = ap.parse_args(argv)

    from replication.report.study_output import check_study_out

    if not args.dry_run:  # a dry run writes nothing: anyone may ask how far the study got
        check_study_out(args.out / "positive_control.csv")
    if args.uncommitted_spec:
        if "results" in args.out.resolve().relative_to(args.out.resolve().anchor).parts:
            print("error: --uncommitted-spec writes no evidence: give an --out outside results/", file=sys.stderr)
            return 2
    else:
        check_declaration(args.spec)
    spec = pc.load_study(args.spec)
    from replication.config import load_profile

    steps = int(load_profile(spec.profile).steps)
    st = Study(spec, Records(args.out, spec.blob), args.work, steps)
    left = args.max_jobs

    def budget_left():
        return None if left is None else max(left, 0)

    # 1. screen
    jobs = st.screen_jobs()
    say(f"screen: {len({c.uniform_name for c in spec.cells()}) - len(jobs)} of "
        f"{len({c.uniform_name for c in spec.cells()})} uniform runs measured")
    if args.dry_run:
        for label, _ in jobs:
            say(f"  to do: {label}")
    elif jobs:
        n = _run_jobs(jobs, args.workers, budget_left())
        left = None if left is None else left - n
    screen = pc.rank_screen(st.screen_table(), spec, steps)
    complete = screen["statistic"].notna().all() and screen["uniform_gain"].notna().all()
    pilot, pick, verdict, confirm = pd.DataFrame(), None, None, pd.DataFrame()
    status = "screen incomplete"
    if complete:
        piloted = [spec.cell(c) for c in screen.loc[screen["piloted"], "cell"]]
        seeds = [int(s) for s in spec.pilot["seeds"]]
        jobs = [j for c in piloted for seed in seeds for arm in pc.ARMS if (j := st.train_job(c, arm, seed))]
        say(f"pilot: {len(piloted)} cells ({', '.join(c.name for c in piloted)}) × {len(seeds)} seeds × 2 arms, "
            f"{len(dict(jobs))} runs to do")
        if not args.dry_run and jobs and budget_left() != 0:
            n = _run_jobs(jobs, args.workers, budget_left())
            left = None if left is None else left - n
            jobs = [j for c in piloted for seed in seeds for arm in pc.ARMS if (j := st.train_job(c, arm, seed))]
        pilot, pick = pc.pilot_table(st.pairs(piloted, seeds), spec, steps)
        status = "pilot incomplete" if jobs else ("no setting passed the pilot" if pick is None else "pilot picked")
        if not jobs and pick is not None:
            sd = float(pilot.set_index("cell").loc[pick, "diff_sd"])
            n_conf = pc.confirm_seeds(sd, spec)
            cseeds = pc.confirm_seed_list(n_conf, spec)
            cell = spec.cell(pick)
            jobs = [j for seed in cseeds for arm in pc.ARMS if (j := st.train_job(cell, arm, seed))]
            say(f"confirm: {pick}, {n_conf} seeds from {cseeds[0]}, {len(jobs)} runs to do")
            if not args.dry_run and jobs and budget_left() != 0:
                _run_jobs(jobs, args.workers, budget_left())
                jobs = [j for seed in cseeds for arm in pc.ARMS if (j := st.train_job(cell, arm, seed))]
            confirm = st.pairs([cell], cseeds)
            if not jobs:
                verdict = pc.confirm_verdict(confirm, spec)
                status = "confirmed" if verdict["confirmed"] else "not confirmed"
            else:
                status = "confirmation incomplete"
    say(f"status: {status}")
    if args.dry_run:
        return 0
    from replication.report.positive_control import write_outputs

    write_outputs(args.out, spec, screen, pilot, pick, confirm, verdict, status, st.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
