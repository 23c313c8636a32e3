"""A paper's arms: names, their config overrides, and which of them (and which seeds) a run
trains. Shared by the grid (``orchestration.grid``) and the stage validator
(``replication.stage_params``), so neither imports the other."""

from __future__ import annotations

import dataclasses
from typing import Any

from replication.config import ConfigError

QUICK_PROFILE = "quick"
"""Trains the section's ``main`` arms on one seed (select_arms)."""


def gradvar_settings(profile: str, draws: int | None = None, method_options: dict | None = None) -> dict:
    """GradVarConfig keyword arguments of a paper notebook's gradient-variance section, from the
    profile's ``gradvar:`` section (config.sections.GradVarSection: issue 10's 30 sets per
    allocator and as many reference sets on the full batch at steps 0, a third and all by
    default; the quick profile and the rehearsals cut it down in their YAML, not by their name).
    ``draws`` (the notebook parameter) overrides the number of sets, reference sets included.
    ``method_options`` (allocator options per method, e.g. vip-gp as VIP's arm runs it) are kept
    for the methods the profile measures."""
    from replication.config import load_profile

    g = load_profile(profile).gradvar
    settings: dict[str, Any] = {"draws": g.draws, "reference_draws": g.reference_draws,
                                "oracle_samples": g.oracle_samples}
    if g.prompts:
        settings["prompts"] = g.prompts
    if g.checkpoints:
        settings["steps"] = tuple(g.checkpoints)
    if g.methods:
        settings["methods"] = tuple(g.methods)
    if g.threads:
        settings["threads"] = int(g.threads)
    measured = set(g.methods) | {"uniform"} if g.methods else None
    options = {m: o for m, o in dict(method_options or {}).items() if measured is None or m in measured}
    if options:
        settings["method_options"] = options
    if draws is not None:
        if int(draws) < 3:
            raise ConfigError(f"gradvar_draws: need at least 3 rollout sets (GradVarConfig), got {draws}")
        settings.update(draws=int(draws), reference_draws=int(draws))
    return settings


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    """Display name, e.g. 'RLOO+VIP'."""
    overrides: dict
    """Config overrides with dotted keys, e.g. {'allocator.name': 'vip', 'rl.estimator': 'rloo'}."""


def check_seeds(seeds: Any, key: str) -> list[int]:
    """``seeds`` if it is a non-empty list of distinct integers in [0, 2**32), else a ConfigError
    naming ``key``: a repeated seed is one run counted twice (n = 2, "± 0.0")."""
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ConfigError(f"{key}: must be a non-empty list of integers, got {seeds!r}")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**32:
            raise ConfigError(f"{key}: {s!r} is not an integer in [0, 2**32)")
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ConfigError(f"{key}: duplicate seeds {repeated} in {list(seeds)}; each seed is one run, "
                          f"a repeat would count it twice")
    return list(seeds)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name).strip("_")


def select_arms(sec: dict, overrides: dict | None = None, seeds: list[int] | None = None,
                arms: list[str] | None = None) -> tuple[list[Arm], list[int]]:
    """Arms (base overrides + the arm's own + ``overrides``) and seeds; the quick profile keeps
    one seed and the section's ``main`` arms; otherwise the section's ``run`` arms (all ``arms`` when
    ``run`` is absent or null). ``seeds``/``arms`` replace the section's choice."""
    names = list(sec.get("run") or sec["arms"])  # `run`: the arms a default run trains
    chosen = [int(s) for s in sec["seeds"]]
    if sec["profile"] == QUICK_PROFILE:
        names = [n for n in names if n in set(sec.get("main", names))]
        chosen = chosen[:1]
    if arms is not None:
        unknown = [a for a in arms if a not in sec["arms"]]
        if unknown:
            raise ConfigError(f"arms: unknown arm {unknown[0]!r}; known: {list(sec['arms'])}")
        names = list(arms)
    if seeds is not None:
        chosen = check_seeds([int(s) for s in seeds], "seeds")
    base = dict(sec.get("base") or {})
    extra = dict(overrides or {})
    return [Arm(n, {**base, **(sec["arms"][n] or {}), **extra}) for n in names], chosen
