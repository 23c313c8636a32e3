"""Each paper's settings as data, and the deviations of every arm from them, with their reasons.

The spec of a paper (``replication/specs/<paper>.yaml``) holds the paper's value and its source
for every setting the arms touch: budget and bounds, clip and dual clip, KL, estimator, training
and evaluation sampling, optimiser and steps, evaluation protocol, and each arm's own settings.
``deviations`` resolves every arm of the paper's params.yaml section under a profile exactly as the
grid does (``select_arms`` + ``load_profile``), compares, and gives for each difference the reason
the spec states for that profile (``why: {profile: reason}``); ``None`` means the difference has
no stated reason, which ``tests/report/test_deviations.py`` refuses.

    python -m replication.report.deviations                 # docs/deviations.md, all papers
    python -m replication.report.deviations --check         # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SPECS = Path(__file__).resolve().parents[1] / "specs"
PAPERS = ("vip", "dynamo", "gdro")
PAPER_PROFILE = {"vip": "paper-vip", "dynamo": "paper-dynamo", "gdro": "paper-gdro"}
DOC = Path("docs/deviations.md")
_MISSING = object()


@dataclass(frozen=True)
class Deviation:
    setting: str
    paper: Any
    source: str
    ours: Any
    arms: tuple[str, ...]
    reason: str | None


def load_spec(paper: str) -> dict:
    path = SPECS / f"{paper}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no spec for paper {paper!r} ({path})")
    return yaml.safe_load(path.read_text())


def _get(d: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return _MISSING
        d = d[part]
    return d


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _allocator_default(config: dict, key: str) -> Any:
    """What an arm runs for an allocator option its config leaves out: the default of its
    allocator's Config (read from the code, never typed into a spec); _MISSING otherwise."""
    prefix = "allocator.options."
    if not key.startswith(prefix) or "." in key[len(prefix):]:
        return _MISSING
    from replication.allocation import ALLOCATORS

    name = (config.get("allocator") or {}).get("name")
    if not name or name not in ALLOCATORS:
        return _MISSING
    field = key[len(prefix):]
    default = getattr(ALLOCATORS.get(name).Config(), field, _MISSING)
    return list(default) if isinstance(default, tuple) else default


def _entry(value: Any, source: str = "") -> dict:
    """A spec value: a plain value, or {paper, source, why, absent}."""
    if isinstance(value, dict) and "paper" in value:
        return value
    return {"paper": value, "source": source}


def resolved_arms(paper: str, profile: str, params_file: str | Path | None = None) -> dict[str, dict]:
    """Every arm of the paper's section (all of ``arms``, not only ``run``) resolved under
    ``profile`` as the grid would train it: {arm name: config dict}."""
    from replication.config import load_profile, to_dict
    from replication.arms import select_arms
    from replication.stage_params import load_params

    params = load_params(params_file)
    sec = {**params[paper], "profile": profile}
    arms, _ = select_arms(sec, arms=list(sec["arms"]))
    return {a.name: to_dict(load_profile(profile, {**a.overrides, "seed": 0})) for a in arms}


def deviations(paper: str, profile: str, params_file: str | Path | None = None) -> list[Deviation]:
    """Every setting where an arm under ``profile`` differs from the paper, with the spec's reason."""
    spec = load_spec(paper)
    configs = resolved_arms(paper, profile, params_file)
    checks: list[tuple[str, dict, list[str]]] = []
    paper_arms = [a for a in configs if not (spec["arms"].get(a) or {}).get("code_arm")]
    for key, entry in spec["settings"].items():
        checks.append((key, _entry(entry), paper_arms))
    for arm, arm_spec in spec["arms"].items():
        for key, entry in ((arm_spec or {}).get("settings") or {}).items():
            if arm in configs:
                checks.append((key, _entry(entry, arm_spec.get("source", "")), [arm]))
    out: list[Deviation] = []
    for key, entry, arms in checks:
        by_value: dict[str, tuple[Any, list[str]]] = {}
        for arm in arms:
            ours = _get(configs[arm], key)
            if ours is _MISSING:
                ours = entry.get("absent", _allocator_default(configs[arm], key))
            if ours is _MISSING:
                raise KeyError(f"spec {paper}: setting {key!r} is not a config key (arm {arm})")
            if not _same(ours, entry["paper"]):
                by_value.setdefault(repr(ours), (ours, []))[1].append(arm)
        for ours, diff_arms in by_value.values():
            why = entry.get("why") or {}
            reason = why.get(profile) if isinstance(why, dict) else why
            out.append(Deviation(key, entry["paper"], entry.get("source", ""), ours, tuple(diff_arms), reason))
    for item in spec.get("protocol") or []:
        if str(item["paper"]) != str(item["ours"]):
            out.append(Deviation(item["setting"], item["paper"], item.get("source", ""), item["ours"],
                                 tuple(paper_arms), item.get("why")))
    return out


def unexplained(paper: str, profile: str, params_file: str | Path | None = None) -> list[Deviation]:
    return [d for d in deviations(paper, profile, params_file) if not d.reason]


def _fmt(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def to_markdown(paper: str, profile: str, params_file: str | Path | None = None) -> str:
    spec = load_spec(paper)
    devs = deviations(paper, profile, params_file)
    all_arms = set(resolved_arms(paper, profile, params_file))
    lines = [f"#### {spec['paper']} — profile `{profile}` vs the paper ({len(devs)} differences)", "",
             "| setting | paper | source | ours | arms | reason |", "|---|---|---|---|---|---|"]
    for d in devs:
        arms = "all paper arms" if len(d.arms) > 1 and set(d.arms) >= all_arms - {
            a for a, s in spec["arms"].items() if (s or {}).get("code_arm")} else ", ".join(d.arms)
        reason = d.reason or "**no stated reason**"
        lines.append(f"| `{d.setting}` | {_fmt(d.paper)} | {d.source} | {_fmt(d.ours)} | {arms} | {reason} |")
    return "\n".join(lines) + "\n"


def document(params_file: str | Path | None = None) -> str:
    parts = ["# Deviations from the papers", "",
             "Generated by `python -m replication.report.deviations` from the specs "
             "(`replication/specs/<paper>.yaml`: each paper's values with their sources) and every arm "
             "of `params.yaml` resolved as the grid trains it. Do not edit by hand; "
             "`tests/report/test_deviations.py` fails when this file is stale or a difference has no "
             "stated reason.", ""]
    for paper in PAPERS:
        for profile in ("default", PAPER_PROFILE[paper]):
            parts.append(to_markdown(paper, profile, params_file))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=None, help="default: the repository's params.yaml")
    ap.add_argument("--out", default=str(DOC))
    ap.add_argument("--check", action="store_true", help="exit 1 when --out is not what would be written")
    args = ap.parse_args(argv)
    text = document(args.params)
    out = Path(args.out)
    if args.check:
        if not out.is_file() or out.read_text() != text:
            print(f"{out} is stale: run python -m replication.report.deviations", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
