"""The generated block of docs/reproducibility.md that says which results survive another CPU.

``cpu-capability``: the latest record of ``benchmarks/cpu_capability.py`` (the same default-profile
runs trained with torch's native vector kernels and with ``ATEN_CPU_CAPABILITY=default``), one
row per run: bit-identical or not, the first step whose log differs and in which fields, and the
held-out differences after training, set beside the half-width of the paired 95 % CI of the
committed comparisons of the paper whose arm it is (results/<paper>/summary.json), so the block
says by measurement whether another machine's run lands within the interval the conclusions use.
"""

from __future__ import annotations

import json
from pathlib import Path

from replication.report.prose_registry import _summary, block

RECORDS = Path("benchmarks/records/cpu-capability")
METRICS = ("average mean@8", "average pass@8")


def latest_record(root: Path) -> tuple[Path, dict]:
    files = sorted((Path(root) / RECORDS).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no record in {RECORDS} (python benchmarks/cpu_capability.py --json ...)")
    return files[-1], json.loads(files[-1].read_text())


def _ci_half_width(root: Path, paper: str, metric: str) -> float:
    """The widest half-width of the paper's committed paired CIs on ``metric``, in points."""
    rows = [c for c in _summary(root, paper)["comparisons"] if c["metric"] == metric]
    return max(100 * (c["ci_high"] - c["ci_low"]) / 2 for c in rows)


@block("cpu-capability")
def cpu_capability(root: Path) -> str:
    path, rec = latest_record(root)
    lines = [f"Native `{rec['native_capability']}` against `ATEN_CPU_CAPABILITY=default` on "
             f"{rec['machine']['cpu']} ({path.relative_to(root).as_posix()}; `{rec['command']}`):", "",
             "| run | bit-identical | first step apart (fields) | held-out before | Δ average mean@8 after, pts "
             "| Δ average pass@8 after, pts | largest Δ on one set after, pts |",
             "|---|---|---|---|---|---|---|"]
    within = []
    for r in rec["runs"]:
        d = r["eval_differences_pts"]
        fields = ", ".join(r["fields_apart_at_first_step"][:4]) + (" …" if len(r["fields_apart_at_first_step"]) > 4 else "")
        apart = "—" if r["first_differing_step"] is None else f"{r['first_differing_step']} ({fields})"
        per_set = max(abs(v) for k, v in d.items() if k.startswith("eval_after/") and "/n_prompts" not in k
                      and not k.startswith(("eval_after/average/", "eval_after/pooled/")))
        lines.append(f"| {r['arm']} s{r['seed']} | {'yes' if r['bit_identical'] else 'no'} | {apart} | "
                     f"{'identical' if r['eval_before_identical'] else 'differs'} | "
                     f"{d['eval_after/average/mean@8']:+.2f} | {d['eval_after/average/pass@8']:+.2f} | {per_set:.2f} |")
        paper = r["arm"].split("/")[0]
        for metric in METRICS:
            half = _ci_half_width(root, paper, metric)
            within.append(abs(d[f"eval_after/{metric.replace(' ', '/')}"]) <= half)
    verdict = ("every average difference lies within the half-width of the paper's committed paired 95 % CI "
               "on that metric" if all(within) else
               "some average difference exceeds the half-width of the paper's committed paired 95 % CI")
    lines += ["", f"Held-out numbers after training: {verdict} (results/<paper>/summary.json); runs are "
              "comparable across machines within their CIs, not bit for bit."]
    return "\n".join(lines) + "\n"
