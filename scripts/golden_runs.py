"""Golden runs: one short deterministic training run per arm of params.yaml, kept as files, so a
refactor can prove it moves no logged number (issue 19, point 3).

Every arm of every paper section (vip, dynamo, gdro), with its section's ``base`` overrides applied
by the grid's own ``select_arms``, trains on the ``smoke`` profile (the committed
results/base-model) for ``STEPS`` steps on a pool of ``POOL`` prompts, ``PROMPTS_PER_STEP`` a step,
seed 0: steps 2.. revisit prompts and the sampler crosses an epoch boundary every
POOL / PROMPTS_PER_STEP steps (DynaMO's ``end_epoch`` runs). Each arm's per-step log, per-prompt
records and metrics (eval before and after), without timing fields, go to
``tests/golden/<paper>/<arm slug>/``.

    python scripts/golden_runs.py --update    # regenerate every golden file (a deliberate change)
    python scripts/golden_runs.py             # --check (the default): compare, list what moved
    python scripts/golden_runs.py --arms vip/RLOO dynamo/DynaMO   # a subset

``python -m pytest tests/golden`` runs the same comparison, one test per arm. Tolerance: a float
may move by ``REL_TOL`` relative (``ABS_TOL`` near 0); integers, strings, None and list lengths
must match exactly; a field of a golden file missing from a new run fails, a new field is allowed.

The VIP GP arms embed prompts with the paper's encoder (``embedder_options.model_path:
results/encoder``): it is exported once into a temporary folder by scripts/export_encoder.py
(needs the ``embeddings`` extra) and the arms point there instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = ROOT / "tests" / "golden"
PAPERS = ("vip", "dynamo", "gdro")
PROFILE = "smoke"
SEED = 0
STEPS = 6
PROMPTS_PER_STEP = 8
TRAIN_SIZES = {"add1": 6, "add2": 6, "mul1": 4}
POOL = sum(TRAIN_SIZES.values())
"""16 prompts, 8 a step: each epoch lasts 2 steps, so 6 steps cover 3 epochs and every prompt
is drawn 3 times."""
SHORT_RUN = {
    # `task.options` as a whole: the config merge replaces an `options` mapping, so the smoke
    # profile's larger pools do not leak in
    "task.options": {"train_sizes": TRAIN_SIZES, "heldout_size": 16, "heldout_levels": ["add2", "mul1"]},
    "rollout.prompts_per_step": PROMPTS_PER_STEP,
    "steps": STEPS,
    "checkpoint_every": STEPS,
}
ENCODER_PATH = "results/encoder"
"""The VIP GP arms' model_path in params.yaml; replaced by the freshly exported encoder."""

FILES = ("steps.json", "prompts.json", "metrics.json")
REL_TOL = 1e-6
ABS_TOL = 1e-9
TIMING_SUFFIXES = ("_seconds",)
"""Fields dropped from every file: wall-clock times differ between machines and runs."""
NOT_RESULTS = ("provenance",)
"""Dropped too: how the run ran (commit, code digest, versions: replication/provenance.py)."""
PACKAGES = ("torch", "transformers", "numpy", "sentence-transformers")
ENVIRONMENT = "ENVIRONMENT.json"
"""What the numbers depend on beyond the code (docs/reproducibility.md): package versions and the
CPU's vector instruction sets. Each golden set holds one; elsewhere a run is not comparable bit
for bit, so a set is kept per environment: ``tests/golden/`` (the first, made on AVX-512) and
``tests/golden/isa-<flags>/`` for each other instruction set the project's machines have had.
The set whose environment is this machine's is the one checked (``GOLDEN_SET``)."""


@dataclass(frozen=True)
class GoldenArm:
    paper: str
    name: str
    slug: str
    overrides: dict
    """Section base + the arm's own overrides + SHORT_RUN, as params.yaml gives them (model_path
    of the encoder still ``results/encoder``)."""

    @property
    def id(self) -> str:
        return f"{self.paper}/{self.name}"

    @property
    def dir(self) -> Path:
        return GOLDEN_SET / self.paper / self.slug

    @property
    def needs_encoder(self) -> bool:
        return _uses_encoder(self.overrides)


def _uses_encoder(overrides: dict) -> bool:
    opts = overrides.get("allocator.options") or {}
    return (opts.get("embedder_options") or {}).get("model_path") == ENCODER_PATH


def golden_arms(params_file: Path = ROOT / "params.yaml") -> list[GoldenArm]:
    """Every arm of every paper section, through the grid's own selection (base + arm + overrides).
    Paths in params.yaml are relative to the repository root, so it is read from there."""
    from replication.arms import _slug, select_arms
    from replication.orchestration.grid import load_section

    out = []
    with _cwd(ROOT):
        for paper in PAPERS:
            sec = load_section(paper, params_file)
            arms, _ = select_arms(sec, SHORT_RUN, seeds=[SEED], arms=list(sec["arms"]))
            out += [GoldenArm(paper, a.name, _slug(a.name), a.overrides) for a in arms]
    return out


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    import os

    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def export_encoder(dest: Path) -> Path:
    """The paper's encoder exported into ``dest`` by scripts/export_encoder.py; RuntimeError
    naming the cause when the ``embeddings`` extra is missing."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_encoder.py"), str(dest)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1])
    return dest


def _with_encoder(overrides: dict, encoder: Path | None) -> dict:
    if not _uses_encoder(overrides):
        return overrides
    if encoder is None:
        raise RuntimeError("this arm needs the VIP encoder (results/encoder) and none was exported")
    opts = dict(overrides["allocator.options"])
    opts["embedder_options"] = {**opts["embedder_options"], "model_path": str(encoder)}
    return {**overrides, "allocator.options": opts}


def environment() -> dict[str, Any]:
    """Package versions and CPU instruction-set families (AVX2 / AVX-512 / AMX pick different
    kernels that round differently), nothing else of the machine."""
    import importlib.metadata
    import platform

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    isa = sorted(f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if f in flags)
    return {"packages": versions, "machine": platform.machine(), "cpu_isa": isa}


def golden_sets() -> list[Path]:
    """Every golden set: the first (``GOLDEN_DIR``) and one ``isa-*`` folder per other environment."""
    return [GOLDEN_DIR, *sorted(p for p in GOLDEN_DIR.glob("isa-*") if p.is_dir())]


def matching_set(env: dict[str, Any] | None = None) -> Path | None:
    """The golden set made in this environment (same packages and instruction sets), or None."""
    env = env if env is not None else environment()
    for folder in golden_sets():
        f = folder / ENVIRONMENT
        if f.exists() and json.loads(f.read_text()) == env:
            return folder
    return None


def new_set_dir(env: dict[str, Any]) -> Path:
    """Where --update writes the set of an environment no set matches: ``isa-<flags>``."""
    return GOLDEN_DIR / ("isa-" + ("-".join(env["cpu_isa"]) or "none"))


def environment_differences() -> list[str]:
    """How this environment differs from the one that made the golden set in use (empty: the same)."""
    env_file = GOLDEN_SET / ENVIRONMENT
    if not env_file.exists():
        return [f"{env_file.relative_to(ROOT)} missing"]
    made, now = json.loads(env_file.read_text()), environment()
    out = [f"{k}={now['packages'].get(k)} (golden: {v})" for k, v in made["packages"].items()
           if now["packages"].get(k) != v]
    out += [f"{k}={now[k]} (golden: {made[k]})" for k in ("machine", "cpu_isa") if now[k] != made[k]]
    return out


def _drop_timings(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _drop_timings(v) for k, v in x.items()
                if not k.endswith(TIMING_SUFFIXES) and k not in NOT_RESULTS}
    if isinstance(x, list):
        return [_drop_timings(v) for v in x]
    return x


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_arm(arm: GoldenArm, encoder: Path | None, work: Path) -> dict[str, Any]:
    """Train the arm in this process (``train.loop.train``, the CLI's own call) into ``work`` and
    return the golden contents: {file name: rows or mapping}, timing fields dropped."""
    from replication.config import load_profile
    from replication.train.loop import train

    with _cwd(ROOT):  # the profile's model.path (results/base-model) is relative to the root
        cfg = load_profile(PROFILE, {**_with_encoder(arm.overrides, encoder), "seed": SEED})
        out = work / arm.paper / arm.slug
        train(cfg, out, overwrite=True, progress=False)
    return {
        "steps.json": _drop_timings(_read_jsonl(out / "steps.jsonl")),
        "prompts.json": _drop_timings(_read_jsonl(out / "prompts.jsonl")),
        "metrics.json": _drop_timings(json.loads((out / "metrics.json").read_text())),
    }


def coverage(prompts: list[dict]) -> dict[str, int]:
    """How far the run goes through its pool: distinct prompts, prompt visits beyond the first,
    and completed epochs (the sampler's epoch, from the per-prompt records: a pass over the pool
    draws each prompt once, so the number of passes is the fewest visits of any prompt)."""
    visits: dict[str, int] = {}
    for r in prompts:
        visits[r["prompt_id"]] = visits.get(r["prompt_id"], 0) + 1
    return {"distinct": len(visits), "revisits": sum(v - 1 for v in visits.values()),
            "epochs": min(visits.values()) if len(visits) == POOL else 0}


# ----------------------------------------------------------------------------- files


def dumps(data: Any) -> str:
    """Rows one per line (a changed step or prompt is one diff line); a mapping indented."""
    if isinstance(data, list):
        return "[\n" + ",\n".join(json.dumps(r, sort_keys=True) for r in data) + "\n]\n"
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def write_golden(arm: GoldenArm, contents: dict[str, Any]) -> None:
    arm.dir.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        (arm.dir / name).write_text(dumps(contents[name]))
    (arm.dir / "arm.json").write_text(json.dumps(
        {"paper": arm.paper, "arm": arm.name, "profile": PROFILE, "seed": SEED, "overrides": arm.overrides},
        indent=1, sort_keys=True) + "\n")


def read_golden(arm: GoldenArm) -> dict[str, Any]:
    missing = [n for n in FILES if not (arm.dir / n).exists()]
    if missing:
        raise FileNotFoundError(f"{arm.id}: golden file {arm.dir / missing[0]} missing; "
                                f"run python scripts/golden_runs.py --update")
    return {n: json.loads((arm.dir / n).read_text()) for n in FILES}


# ----------------------------------------------------------------------------- comparison


def _row_label(row: Any, i: int) -> str:
    if isinstance(row, dict) and "step" in row:
        return f"step {row['step']}" + (f" prompt {row['prompt_id']}" if "prompt_id" in row else "")
    return f"[{i}]"


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= max(REL_TOL * max(abs(a), abs(b)), ABS_TOL)


def compare(golden: Any, now: Any, where: str) -> list[str]:
    """Differences of ``now`` from ``golden``, one line each naming where (file, row, field)."""
    if isinstance(golden, dict):
        if not isinstance(now, dict):
            return [f"{where}: expected a mapping, got {now!r}"]
        out = []
        for k, v in golden.items():
            if k not in now:
                out.append(f"{where}.{k}: missing now (golden {v!r})")
            else:
                out += compare(v, now[k], f"{where}.{k}")
        return out
    if isinstance(golden, list):
        if not isinstance(now, list) or len(now) != len(golden):
            n = len(now) if isinstance(now, list) else now
            return [f"{where}: {len(golden)} entries in the golden, now {n!r}"]
        out = []
        for i, (g, x) in enumerate(zip(golden, now)):
            label = f"{where} {_row_label(g, i)}" if isinstance(g, dict) else f"{where}[{i}]"
            out += compare(g, x, label)
        return out
    numbers = (int, float)
    if isinstance(golden, float) and isinstance(now, numbers) and not isinstance(now, bool):
        return [] if _close(golden, float(now)) else [
            f"{where}: golden {golden!r}, now {now!r} (rel {abs(now - golden) / max(abs(golden), ABS_TOL):.2e})"]
    if type(golden) is not type(now) or golden != now:
        return [f"{where}: golden {golden!r}, now {now!r}"]
    return []


def compare_arm(arm: GoldenArm, now: dict[str, Any]) -> list[str]:
    golden = read_golden(arm)
    return [line for name in FILES for line in compare(golden[name], now[name], f"{arm.id} {name}")]


GOLDEN_SET = matching_set() or GOLDEN_DIR
"""The golden set checked here: the one made in this environment, else the first (whose arms the
test then skips, naming the difference)."""


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="rewrite the golden files from this code")
    mode.add_argument("--check", action="store_true", help="compare with the golden files (default)")
    ap.add_argument("--arms", nargs="*", metavar="PAPER/ARM", help="only these arms (default: all)")
    args = ap.parse_args(argv)

    arms = golden_arms()
    if args.arms:
        known = {a.id: a for a in arms}
        unknown = [a for a in args.arms if a not in known]
        if unknown:
            print(f"error: unknown arm {unknown[0]!r}; known: {sorted(known)}", file=sys.stderr)
            return 2
        arms = [known[a] for a in args.arms]
    if args.update:
        global GOLDEN_SET
        env = environment()
        GOLDEN_SET = matching_set(env) or new_set_dir(env)
        GOLDEN_SET.mkdir(parents=True, exist_ok=True)
        (GOLDEN_SET / ENVIRONMENT).write_text(json.dumps(env, indent=1, sort_keys=True) + "\n")
        print(f"golden set: {GOLDEN_SET.relative_to(ROOT)}")
    else:
        for line in environment_differences():
            print(f"warning: another environment than the golden files': {line}; numbers may move "
                  f"without a code change (docs/reproducibility.md)", file=sys.stderr)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        encoder = export_encoder(Path(tmp) / "encoder") if any(a.needs_encoder for a in arms) else None
        for arm in arms:
            now = run_arm(arm, encoder, Path(tmp) / "runs")
            cov = coverage(now["prompts.json"])
            if args.update:
                write_golden(arm, now)
                print(f"{arm.id}: written to {arm.dir.relative_to(ROOT)} ({cov})")
                continue
            diffs = compare_arm(arm, now)
            failed += bool(diffs)
            print(f"{arm.id}: {'FAIL' if diffs else 'ok'} ({cov})")
            for line in diffs[:20]:
                print("   ", line)
    if failed:
        print(f"{failed} of {len(arms)} arms moved; a deliberate change: python scripts/golden_runs.py --update")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
