"""Where a ``python -m replication train`` run differs from the pipeline's arm of the same method.

The command line starts from the profile alone, while ``dvc repro`` trains each arm with
params.yaml's section ``base`` and the arm's own keys on top (VIP's arm embeds prompts with the
MiniLM encoder and an RBF bandwidth of 0.2; the profile's VIP default embeds with hashed tf-idf).
A user who types ``--allocator vip`` expects "the VIP arm"; rather than silently running
something else, ``differences`` finds the params.yaml arm closest to the run (same allocator,
prompt weights and modulation) and ``note`` says in one line which keys differ and how to match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IGNORED = {"seed", "profile", "steps"}
"""Keys a user sets per run on purpose (``--seed``, ``--max-steps``) or that name the profile."""
METHOD_KEYS = ("allocator.name", "rl.prompt_weights", "rl.modulation")


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Nested config mapping -> {dotted key: leaf}; an empty mapping (``options: {}``) adds no
    key, so it equals an absent one."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _arms(params: dict, profile: str):
    """(section/arm name, flattened config) of every arm of every paper section under ``profile``."""
    from replication.arms import select_arms
    from replication.config import ConfigError, load_profile, to_dict
    from replication.stage_params import PAPER_STAGES

    for section in PAPER_STAGES:
        sec = _section_for(params, section, profile)
        if not isinstance(sec, dict) or not isinstance(sec.get("arms"), dict):
            continue
        try:
            arms, _ = select_arms({**sec, "profile": profile}, arms=list(sec["arms"]))
        except (ConfigError, KeyError, TypeError, ValueError):
            continue
        for arm in arms:
            try:
                cfg = load_profile(profile, {**arm.overrides, "seed": 0})
            except ConfigError:
                continue  # an arm this profile cannot run (the stage validator says why)
            yield f"{section}/{arm.name}", flatten(to_dict(cfg))


def _section_for(params: dict, section: str, profile: str) -> dict | None:
    """The section as the scale whose profile ``profile`` is resolves it (a paper or rehearsal
    profile's arms are that scale's), else the small-scale section."""
    from replication.config import ConfigError
    from replication.stage_params import SCALES, SMALL, section_at_scale

    for scale in SCALES:
        if scale == SMALL:
            continue
        try:
            sec = section_at_scale({**params, "scale": scale, "profile": "default", "profile_dir": None}, section)
        except ConfigError:
            continue
        if sec.get("profile") == profile:
            return sec
    return params.get(section)


def differences(cfg, params_file: str | Path | None = None) -> tuple[str, dict[str, tuple]] | None:
    """The closest pipeline arm running the same method as ``cfg`` and the keys where it differs
    ({key: (this run's value, the arm's value)}); None without params.yaml or such an arm."""
    from replication.config import ConfigError, to_dict
    from replication.stage_params import load_params

    try:
        params = load_params(params_file)
    except ConfigError:
        return None  # outside a checkout: there is no pipeline to compare with
    ours = flatten(to_dict(cfg))
    best = None
    for name, arm in _arms(params, ours.get("profile") or "default"):
        if any(arm.get(k) != ours.get(k) for k in METHOD_KEYS):
            continue
        diff = {k: (ours.get(k), arm.get(k)) for k in sorted(set(ours) | set(arm))
                if k not in IGNORED and ours.get(k) != arm.get(k)}
        if best is None or len(diff) < len(best[1]):
            best = (name, diff)
    return best


def note(cfg, params_file: str | Path | None = None) -> str | None:
    """One line naming the differing keys, or None when the run equals a pipeline arm."""
    found = differences(cfg, params_file)
    if not found or not found[1]:
        return None
    name, diff = found
    def here(v: Any) -> str:
        return "unset: the method's default" if v is None else json.dumps(v)

    shown = ", ".join(f"{k}={json.dumps(arm)} (here {here(ours)})" for k, (ours, arm) in diff.items())
    return (f"note: not the pipeline's arm {name} (params.yaml), which sets {shown}; "
            f"add --set KEY=VALUE for each to train that arm")
