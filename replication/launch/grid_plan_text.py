"""A ``GridPlan`` as the lines ``dry-run --paper`` prints on stdout: a header, the memory per
GPU, the launcher, one line per run, the totals with the GPU-hours estimate and its anchor (its
warnings go to stderr, ``warning: ...``)."""

from __future__ import annotations

import shlex

from replication.launch.gpu_hours import FORMULA, VIP_1_5B
from replication.launch.grid_plan import GridPlan, PlannedRun
from replication.launch.memory import GpuMemory


def memory_line(mem: GpuMemory) -> str:
    """``memory per GPU (80 GiB): 11.5 training state (...) + ... = 59.5 GiB: fits``."""
    how = "replicated" if mem.sharding == "replicate" else f"FSDP over {mem.world}"
    parts = [f"{mem.train_state_gib:.1f} training state ({mem.model} {how}, {mem.bytes_per_parameter} B/parameter)"]
    if mem.reference_gib:
        parts.append(f"{mem.reference_gib:.1f} reference policy")
    if mem.generation_copy_gib:
        parts.append(f"{mem.generation_copy_gib:.1f} generation copy")
    if mem.engine_share_gib:
        parts.append(f"{mem.engine_share_gib:.1f} vLLM share (holds {mem.engine_weights_gib:.1f} weights + "
                     f"{mem.engine_kv_one_sequence_gib:.1f} KV of one {mem.sequence_tokens}-token sequence)")
    parts.append(f"{mem.activation_margin_gib:.1f} activation margin")
    return (f"memory per GPU ({mem.gpu_gib:g} GiB): {' + '.join(parts)} = {mem.total_gib:.1f} GiB: "
            + ("fits" if mem.fits else "does not fit"))


def _ids(gpus: tuple[str, ...]) -> str:
    return ",".join(gpus) if gpus else "none"


def run_line(plan: GridPlan, r: PlannedRun) -> str:
    name = f"{r.arm} s{r.seed}"
    if plan.backend == "local":
        where = (f"CUDA_VISIBLE_DEVICES={r.visible}" if r.devices else
                 f"{r.cores} core(s)" + (f" CUDA_VISIBLE_DEVICES={r.visible}" if r.visible is not None else ""))
        return f"wave {r.wave:<3} {name:<22} {where}  {shlex.join(r.command)}"
    return f"{name:<22} sbatch {' '.join(r.sbatch)}  {shlex.join(r.command)}"


def render(plan: GridPlan) -> str:
    """The plan as text (``dry-run --paper``'s stdout)."""
    first = plan.runs[0]
    arms = list(dict.fromkeys(r.arm for r in plan.runs))
    seeds = list(dict.fromkeys(r.seed for r in plan.runs))
    s = first.shape
    per = (f"{s.nodes} node x {s.processes} process(es) x {s.gpus_per_process} GPU" if s.gpus_per_process
           else f"{s.processes} process(es) x {s.cpus_per_process} thread(s), CPU")
    lines = [f"dry-run: {plan.paper} at scale {plan.scale} ({plan.params_file}): profile {plan.profile}, "
             f"{len(arms)} arms x {len(seeds)} seeds = {len(plan.runs)} runs, each {per}"]
    mems = [r.memory for r in plan.runs if r.memory is not None]
    if mems:
        worst = max(mems, key=lambda m: m.total_gib)
        lines.append(memory_line(worst) + ("" if all(m == worst for m in mems) else " (the largest over the arms)"))
    t = plan.totals()
    if plan.backend == "local":
        size = s.gpus_per_node
        slots = (f"GPUs {_ids(plan.gpus)}: {len(plan.gpus) // size} slice(s) of {size}" if size
                 else f"{plan.cores} CPU core(s), {first.cores} per run")
        ports = "; torchrun ports are free here now, a launch takes its own" if s.processes > 1 else ""
        lines.append(f"launcher local: {slots}; {plan.at_once} run(s) at once (params.yaml workers: "
                     f"{plan.workers}); {t['waves']} wave(s){ports}")
    else:
        lines.append(f"launcher {plan.backend}: one job array of {len(plan.runs)} jobs, at most "
                     f"{plan.array_parallelism} at once; each job starts torchrun itself (a port free on its node)")
    lines += [run_line(plan, r) for r in plan.runs]
    each = f"{t['gpus_per_run']} GPU(s)" if s.gpus_per_process else f"{first.cores or s.cpus_per_node} core(s)"
    total = f"totals: {t['runs']} runs x {each}, {t['at_once']} at once, {t['waves']} wave(s)"
    if "gpu_hours" in t:
        total += (f"; GPU-hours ≈ {t['gpu_hours']:g} (≈ {t['gpu_hours_per_run']:g} per run, "
                  f"≈ {t['wall_hours_per_run']:g} h wall-clock per run"
                  + (f", ≈ {t['wall_hours_grid']:g} h for the grid" if "wall_hours_grid" in t else "") + ")")
        lines.append(total)
        lines.append(f"GPU-hours are an estimate: {FORMULA}, anchored on {VIP_1_5B.source} "
                     f"(launch/gpu_hours.py; an order of magnitude, not a budget)")
    else:
        lines.append(total + "; no GPU-hours (CPU runs)")
    return "\n".join(lines)
