"""A paper's grid at a scale, planned like a cluster user would before asking for GPUs:
``python -m replication dry-run --paper vip --scale paper --launcher local --gpus 0,...,15``.

    plan = plan_grid("vip", scale="paper", launcher="local", gpus="0,1,2,3,4,5,6,7")
    plan.runs[0].command, plan.runs[0].wave, plan.totals()

Nothing is resolved here that the stage resolves elsewhere: the section at the scale is
``stage_params.section_at_scale`` (validated by ``validate_section`` first, as ``load_section``
does), the arms and seeds ``arms.select_arms``, each run's key and command ``run_cache.run_key``
and ``train_command`` (into the run cache, as ``ensure_run`` starts a fresh run), its shape
``RunShape.of`` with the section's ``shape``, the runs at once ``placement.runs_at_once`` (params.yaml's
``workers``, as ``run_paper`` passes it), and the placement the backend's own code
(``launch.placement``). Before any placement, every run's memory per GPU is checked
(``launch.memory``): a run that does not fit stops the plan with one line (exit 2). GPU-hours:
``launch.gpu_hours``. The grid itself later skips runs already exported, published or cached;
the plan lists them all.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from replication.config import ConfigError, load_profile
from replication.launch.backend import Job, make_backend
from replication.launch.config import LauncherConfig
from replication.launch.gpu_hours import gpu_hours
from replication.launch.memory import GpuMemory, check_gpu_gib, gpu_memory
from replication.launch.placement import place_local, runs_at_once, sbatch_flags
from replication.launch.shape import RunShape


@dataclasses.dataclass
class PlannedRun:
    """One (arm, seed) of the grid and where it would go."""

    arm: str
    """The arm's name."""
    seed: int
    """The run's seed."""
    key: str
    """Its run key (its folder in the run cache)."""
    shape: RunShape
    """What it computes on."""
    command: list[str]
    """Local: the command the backend starts (torchrun prefix included); slurm: the trainer's
    command each job runs (its torchrun prefix is made in the job, on a port free there)."""
    gpu_hours: float | None
    """The estimate for this run (None on CPU, or for a model of unknown size)."""
    memory: GpuMemory | None
    """Its memory per GPU (None on CPU)."""
    wave: int | None = None
    """Local: 1 for the runs that start at once, n when wave n-1 has ended; slurm: None."""
    devices: tuple[str, ...] = ()
    """Local: its GPU slice."""
    visible: str | None = None
    """Local: ``CUDA_VISIBLE_DEVICES`` as the run sees it (None: not set)."""
    cores: int = 0
    """Local, on CPU: the cores it counts against."""
    port: int | None = None
    """Local: its torchrun rendezvous port (free on this host now; a launch takes its own)."""
    sbatch: list[str] = dataclasses.field(default_factory=list)
    """Slurm: the sbatch resources of its job (``SlurmBackend.parameters``)."""


@dataclasses.dataclass
class GridPlan:
    """A paper's grid, resolved and placed."""

    paper: str
    """The params.yaml section (vip, dynamo, gdro)."""
    scale: str
    """small, rehearsal or paper."""
    profile: str
    """The profile the grid trains (as ``load_profile`` takes it)."""
    params_file: str
    """Where it was read from."""
    backend: str
    """The launcher backend's name."""
    workers: int
    """params.yaml's ``workers`` (the grid's cap on runs at once)."""
    at_once: int
    """Runs going at once (local: the largest wave, as the slices or cores and ``workers`` allow;
    slurm: every run, submitted together)."""
    gpu_gib: float
    """Memory of one GPU the check assumed."""
    runs: list[PlannedRun]
    """In the grid's order (seeds outer, arms inner)."""
    array_parallelism: int | None = None
    """Slurm: at most this many jobs of the array at once."""
    gpus: tuple[str, ...] = ()
    """Local: the GPU ids cut into slices."""
    cores: int = 0
    """Local: the cores CPU runs are counted against (``launcher.cpus``, else this machine's)."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """Lines to read before launching (the trainer's largest pass, a time limit short of the estimate)."""

    @property
    def waves(self) -> int:
        if self.backend == "local":
            return max((r.wave or 1 for r in self.runs), default=0)
        return math.ceil(len(self.runs) / max(1, self.array_parallelism or len(self.runs)))

    def totals(self) -> dict[str, Any]:
        """Runs, GPUs per run, runs at once, waves, and the GPU-hours estimate (total, per run,
        wall-clock per run and, for waves of equal runs, of the grid)."""
        gpus = sorted({r.shape.nodes * r.shape.gpus_per_node for r in self.runs})
        hours = [r.gpu_hours for r in self.runs]
        out: dict[str, Any] = {"runs": len(self.runs), "gpus_per_run": gpus[0] if len(gpus) == 1 else gpus,
                               "at_once": self.at_once, "waves": self.waves}
        if hours and all(h is not None for h in hours):
            walls = [h / (r.shape.nodes * r.shape.gpus_per_node) for h, r in zip(hours, self.runs)]
            out.update(gpu_hours=round(sum(hours), 1), gpu_hours_per_run=round(max(hours), 1),
                       wall_hours_per_run=round(max(walls), 1))
            if self.backend == "local":
                out["wall_hours_grid"] = round(sum(max(w for w, r in zip(walls, self.runs) if r.wave == n)
                                                   for n in range(1, self.waves + 1)), 1)
        return out

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "runs"}
        d["runs"] = []
        for r in self.runs:
            row = {k: v for k, v in dataclasses.asdict(r).items() if k not in ("memory", "shape")}
            row["shape"] = dataclasses.asdict(r.shape)
            row["memory"] = r.memory.as_dict() if r.memory else None
            d["runs"].append(row)
        d["totals"] = self.totals()
        from replication.launch.gpu_hours import FORMULA, VIP_1_5B

        d["gpu_hours_estimate"] = {"formula": FORMULA, "anchor": VIP_1_5B.source,
                                   "note": "first-order estimate (launch/gpu_hours.py), not a budget"}
        return d


def _launcher(params: dict, backend: str | None, gpus: str | None) -> LauncherConfig:
    """params.yaml's ``launcher:`` with the command line's backend and GPUs over it."""
    m = dict(params.get("launcher") or {})
    if backend is not None:
        if backend != m.get("backend", "local"):
            m["options"] = {} if backend == "local" else m.get("options") or {}
        m["backend"] = backend
    if gpus is not None:
        m["gpus"] = gpus
    try:
        return LauncherConfig.from_mapping(m)
    except TypeError as e:
        raise ConfigError(f"launcher: {e}") from None


def plan_grid(paper: str, scale: str | None = None, params_file: str | Path | None = None,
              launcher: str | None = None, gpus: str | None = None, gpu_gib: float = 80.0,
              cache: str | Path | None = None) -> GridPlan:
    """The grid ``dvc repro <paper>`` trains at ``scale`` (None: params.yaml's), placed by
    ``launcher`` (None: params.yaml's) on ``gpus`` (local; None: params.yaml's, else the visible
    ones). A ConfigError (one line) for a bad section, a run that does not fit ``gpu_gib`` per GPU,
    or a shape the backend can never place."""
    from replication.arms import select_arms
    from replication.orchestration.run_cache import DEFAULT_CACHE, run_key, train_command
    from replication.paths import params_path
    from replication.stage_params import PAPER_STAGES, load_params, section_at_scale, validate_section
    from replication.store.run_key import FileDigests

    if paper not in PAPER_STAGES:
        raise ConfigError(f"--paper: {paper!r} is not a paper; one of {list(PAPER_STAGES)}")
    gpu_gib = check_gpu_gib(gpu_gib)
    path = params_path(params_file)
    params = load_params(path)
    if scale is not None:
        params = {**params, "scale": scale}
    validate_section(params, paper, path)
    sec = section_at_scale(params, paper, path)
    sec["workers"] = int(params.get("workers", 2))
    arms, seeds = select_arms(sec)
    profile, steps, shape = sec["profile"], sec.get("steps"), dict(sec.get("shape") or {})
    cache = Path(cache if cache is not None else DEFAULT_CACHE)
    config = _launcher(params, launcher, gpus)

    runs, jobs, digests = [], [], FileDigests()
    base = load_profile(profile)
    base_mem = gpu_memory(base, RunShape.of(base, shape).world_size, gpu_gib)
    for seed in seeds:  # run_grid's order
        for arm in arms:
            cfg = load_profile(profile, {**arm.overrides, "seed": seed})
            run = RunShape.of(cfg, shape)
            mem = gpu_memory(cfg, run.world_size, gpu_gib) if run.gpus_per_process else None
            why = mem.shortfall(cfg.profile if mem == base_mem else f"{cfg.profile} (arm {arm.name})") if mem else None
            if why:  # before any placement: the grid would refuse it
                raise ConfigError(why)
            key = run_key(profile, arm.overrides, seed, steps, digests, shape)[0]
            command = train_command(profile, arm.overrides, seed, steps, cache / key, resume=False, overwrite=True)
            runs.append(PlannedRun(arm=arm.name, seed=seed, key=key, shape=run, command=command, memory=mem,
                                   gpu_hours=gpu_hours(cfg, steps) if run.gpus_per_process else None))
            jobs.append(Job(name=f"{arm.name} seed {seed}", command=command, env={}, shape=run,
                            log=cache / f"{key}.log"))

    backend = make_backend(config)
    at_once = runs_at_once(backend, [j.shape for j in jobs], len(jobs), sec["workers"])
    plan = GridPlan(paper=paper, scale=sec["scale"], profile=profile, params_file=str(path),
                    backend=backend.name, workers=sec["workers"], at_once=at_once, gpu_gib=gpu_gib, runs=runs)
    if backend.name == "local":
        plan.gpus = tuple(backend.gpus.gpus)
        plan.cores = backend.cpus.cores
        for run, placed in zip(runs, place_local(backend, jobs, at_once)):
            run.wave, run.devices, run.visible = placed.wave, placed.devices, placed.visible
            run.cores, run.port, run.command = placed.cores, placed.port, placed.command
        plan.at_once = max(sum(r.wave == w for r in runs) for w in range(1, plan.waves + 1))
    else:
        for one in {j.shape for j in jobs}:
            backend.check(one)
        for run in runs:
            params_ = backend.parameters(run.shape)
            run.sbatch = sbatch_flags(params_)
            plan.array_parallelism = params_.get("array_parallelism")
    plan.warnings = _warnings(plan)
    return plan


def _warnings(plan: GridPlan) -> list[str]:
    """The trainer's largest pass (once per distinct line) and, under a scheduler, a time limit
    below the estimated wall-clock."""
    out: list[str] = []
    for r in plan.runs:
        line = r.memory.pass_warning(plan.profile) if r.memory else None
        if line and line not in out:
            out.append(line)
    for r in plan.runs if plan.backend != "local" else ():  # only a scheduler enforces the limit
        limit = r.shape.time_limit_min
        if limit and r.gpu_hours is not None:
            wall_min = r.gpu_hours / (r.shape.nodes * r.shape.gpus_per_node) * 60
            if wall_min > limit:
                out.append(f"{plan.profile}: a run is estimated at {wall_min / 60:.0f} h of wall-clock on "
                           f"{r.shape.nodes * r.shape.gpus_per_node} GPUs, beyond its shape's time_limit_min "
                           f"{limit} ({limit / 60:.0f} h) that a scheduler enforces: it will need to resume "
                           f"from its checkpoint")
                break
    return out
