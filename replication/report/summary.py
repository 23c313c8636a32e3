"""The cross-paper summary (``dvc repro report``): one Markdown page from each paper's
``results/<paper>/summary.json`` — the comparisons against each paper's baseline, with CIs.

Each summary is read only once its paper's products manifest verifies (store/products.py): a
hand-edited or cut summary.json is one ``DamagedArtifact`` line naming it (``report`` exits 1),
never a page built on it. The published results/ must carry the manifest; a trial written by a
notebook outside a stage has none, and is read with a note saying it is unverified."""

from __future__ import annotations

import math
import sys
from pathlib import Path

PAPERS = {"vip": "VIP", "dynamo": "DynaMO", "gdro": "GDRO"}


def _published(results: Path) -> bool:
    """Whether ``results`` is the repository's results/ (whose summaries must be sealed)."""
    from replication.config import ConfigError
    from replication.paths import repo_root

    try:
        return Path(results).resolve() == (repo_root() / "results").resolve()
    except ConfigError:
        return False


def _summaries(results: Path) -> dict[str, tuple[Path, dict]]:
    from replication.store.products import read_summary

    found = {}
    required = _published(results)
    for key in PAPERS:
        path = Path(results) / key / "summary.json"
        if path.exists():
            summary, verified = read_summary(path.parent, required=required)
            if not verified:
                print(f"note: {path} read unverified: {path.parent} has no MANIFEST.json (written outside a "
                      f"stage)", file=sys.stderr)
            found[key] = (path, summary)
    return found


def summary_rows(results: Path, label: str | None = None) -> list[dict]:
    """One row per comparison of every paper's summary.json; ``label`` (a folder) is added to the
    profile column when two folders are listed side by side."""
    rows = []
    for key, (_, s) in _summaries(results).items():
        profile = s.get("profile") if label is None else f"{s.get('profile')} ({label})"
        for c in s.get("comparisons", []):
            rows.append({"paper": PAPERS[key], "profile": profile, "seeds": len(s.get("seeds", [])), **c})
    return rows


def _same_test_key(r: dict) -> tuple:
    """What makes two rows one test: the same paper, profile, arm, baseline and metric (without its
    set prefix), and the same difference, p and n."""
    metric = str(r.get("metric", "")).split(" ", 1)[-1]
    return (r["paper"], r["profile"], r["arm"], r["baseline"], metric, round(float(r.get("diff", 0.0)), 12),
            round(float(r.get("p_value", float("nan"))), 12), int(r.get("n", 0)))


def merge_same_tests(rows: list[dict]) -> list[dict]:
    """One row per test. "pooled" equals "average" when every held-out set has as many prompts
    (tables.add_holm already counts it once in the Holm family); the page listed it twice, as two
    identical rows. The first row stays, its metric labelled with both sets ("average = pooled
    mean@8"); a pooled row that differs from the average (sets of unequal size) stays its own row."""
    out: list[dict] = []
    first: dict[tuple, dict] = {}
    for r in rows:
        k = _same_test_key(r)
        if k in first and " " in str(r.get("metric", "")):
            kept = first[k]
            head, metric = kept["metric"].split(" ", 1)
            kept["metric"] = f"{head} = {r['metric'].split(' ', 1)[0]} {metric}"
            continue
        first[k] = r = dict(r)
        out.append(r)
    return out


def check_published(results: str | Path, beside: str | Path | None = None) -> None:
    """The README's results block shows only the published default: results/ itself, every paper
    of profile ``default``. Anything else (a trial's workspace, a quick run) is refused, one line."""
    from replication.config import ConfigError
    from replication.stage_params import PUBLISHED_PROFILE, RESULTS

    if beside is not None:
        raise ConfigError(f"--readme with --beside {beside}: the README shows only the published results/")
    if Path(results).resolve() != RESULTS.resolve():
        raise ConfigError(f"--readme with --results {results}: the README shows only the published "
                          f"{RESULTS}/ (trials stay in their workspace)")
    for path, s in _summaries(Path(results)).values():
        if s.get("profile") != PUBLISHED_PROFILE:
            raise ConfigError(f"{path}: profile {s.get('profile')!r}, not the published {PUBLISHED_PROFILE!r}: "
                              f"refusing to put it in the README; `git checkout results/` restores the "
                              f"committed results (README, \"Trying things\")")


BESIDE = "beside"
"""``write_summary``'s default study root: the folder that holds ``results`` when
``results/regime/positive_control/study.json`` exists (what ``python -m replication report
--results results`` run from the repository root reads, as the ``report`` stage does), else none."""


def write_summary(results: str | Path, out: str | Path, beside: str | Path | None = None,
                  positive_control_root: str | Path | None = BESIDE) -> str:
    """Write the summary page of ``results`` (and, after each paper's rows, those of ``beside``).
    ``positive_control_root``: the repository root whose results/regime holds the positive-control
    study; its verdict (report.positive_control.verdict_text) opens the page (issue 37). None: no
    verdict; ``BESIDE`` (default): the study beside ``results``, when there is one."""
    results, out = Path(results), Path(out)
    if isinstance(positive_control_root, str) and positive_control_root == BESIDE:
        study = results / "regime" / "positive_control" / "study.json"
        positive_control_root = results.resolve().parent if study.is_file() else None
    if beside is None:
        rows = summary_rows(results)
    else:
        ours, theirs = summary_rows(results, str(results)), summary_rows(Path(beside), str(beside))
        rows = [r for title in PAPERS.values() for r in theirs + ours if r["paper"] == title]
    rows = merge_same_tests(rows)
    lines = [
        "# Results summary (generated by `dvc repro report`; do not edit)",
        "",
        *_positive_control_lines(positive_control_root),
        "Held-out accuracy after training, each method against its paper's baseline at the same",
        "total rollout budget; difference in points with a paired 95 % CI over seeds, the raw p and",
        "the Holm-adjusted p over all of that paper's comparisons, and the minimum detectable",
        "effect (MDE at the raw α = 0.05, power 0.8, from the seeds' variance; the MDE at Holm's level is in",
        "each paper's conclusions.md). Sets whose",
        "problems are in the train pool (`*-indist`) are not part of average/pooled; where the pooled",
        "row is the same test as the average row (held-out sets of equal size) it is one row, \"average = pooled\".",
        "Small-scale analogue: tiny model, procedural arithmetic (profile in the table).",
        "",
        "| paper | profile | method | baseline | metric | method (%) | baseline (%) | difference, pts [95 % CI] | p (Holm p) | MDE, pts | Holm-significant |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = int(r.get("n", 0))
        holm_p = r.get("p_holm", float("nan"))
        if n < 2 or not math.isfinite(r.get("ci_low", float("nan"))):
            diff = f"{100 * r['diff']:+.1f} (one seed, no CI)" if n <= 1 else f"{100 * r['diff']:+.1f} (no CI)"
            ps, mde, sig = "–", "–", "no test"
        else:
            diff = f"{100 * r['diff']:+.1f} [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
            ps = f"{r['p_value']:.2g}" + (f" ({holm_p:.2g})" if math.isfinite(holm_p) else "")
            mde = f"{100 * r['mde']:.1f}" if math.isfinite(r.get("mde", float("nan"))) else "–"
            sig = "yes" if r.get("significant_holm", r.get("significant")) else "no"
        lines.append(
            f"| {r['paper']} | {r['profile']} | {r['arm']} | {r['baseline']} | {r['metric']} | "
            f"{100 * r['method_mean']:.1f} | {100 * r['baseline_mean']:.1f} | {diff} | {ps} (n={n}) | {mde} | {sig} |"
        )
    if not rows:
        lines.append("| (no paper summaries found) | | | | | | | | | | |")
    lines += ["", *significant_section(results, beside)]
    text = "\n".join(lines) + "\n"
    from replication.store import write_atomic

    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    return text


SIGNIFICANT = "## Every Holm-significant comparison"
"""The heading of the section results/summary.md adds after its table (README.md carries the same
block as its own generated block, ``gen:holm-significant``, so ``readme_body`` leaves it out)."""


def _positive_control_lines(root: str | Path | None) -> list[str]:
    if root is None:
        return []
    from replication.report.positive_control import verdict_text

    return [verdict_text(root), ""]


def significant_section(results: Path, beside: Path | None = None) -> list[str]:
    """Lines: the reading rules and every Holm-significant row (any held-out set, any metric, gains
    and losses) of each paper's tables/comparisons.csv (reading.significant_block)."""
    from replication.report import reading

    frames = {}
    for folder, tag in ((Path(results), None), *(((Path(beside), str(beside)),) if beside is not None else ())):
        for key in _summaries(folder):
            label = PAPERS[key] if tag is None else f"{PAPERS[key]} ({tag})"
            frames[label] = reading.read_comparisons(folder / key)
    if not frames:
        return []
    return [SIGNIFICANT, "", reading.definition(), "", reading.significant_block(frames)]


def readme_body(summary_md: str) -> str:
    """What README's results block holds of results/summary.md: the page without its title and
    without the significant-comparisons section (README renders that block itself)."""
    body = summary_md.split("\n", 2)[2] if summary_md.startswith("# ") else summary_md
    return body.split(SIGNIFICANT, 1)[0].strip()


BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def update_readme(readme: str | Path, table_md: str) -> None:
    """Replace the block between the results markers of README.md with the generated table."""
    path = Path(readme)
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = readme_body(table_md)  # no title; the significant rows are README's gen:holm-significant block
    from replication.store import write_atomic

    write_atomic(path, f"{head}{BEGIN}\n{body.strip()}\n{END}{tail}")
