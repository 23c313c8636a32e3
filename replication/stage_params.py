"""``python -m replication validate --params params.yaml --stage <name>``: check a DVC stage's
parameters before the stage touches any output.

Each stage of dvc.yaml runs this first (and the notebooks call ``validate_section`` before their
grid starts), so a typo in params.yaml — ``vip.seeds: []``, ``profile: defualt``, an unknown arm
key, a YAML syntax error — is a one-line ``ConfigError`` naming the key (exit 2) and results/
stays byte-identical. Every arm × seed configuration is resolved exactly as the grid will resolve
it, so an error that would stop run 7 of 21 stops the stage before run 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replication.config import ConfigError, available_profiles, load_profile, load_yaml_file
from replication.config.profiles import is_profile_file

RESULTS = Path("results")
"""Where the published default's outputs live (only profile ``PUBLISHED_PROFILE`` writes there)."""
PUBLISHED_PROFILE = "default"


PAPER_STAGES = ("vip", "dynamo", "gdro")
STAGES = ("base", *PAPER_STAGES, "report")
SECTION_KEYS = {"seeds", "main", "run", "steps", "baseline", "base", "arms", "shape", "scales"}
SCALES = ("small", "rehearsal", "paper")
"""params.yaml's ``scale``: ``small`` (the CPU analogue, the published default), ``rehearsal``
(each paper profile shrunk to what 2 CPU cores run: SmolLM2, fixtures of the real schemas),
``paper`` (the papers' own setups, on GPUs)."""
SMALL = "small"
SCALE_KEYS = {"profile", "seeds", "main", "run", "steps", "baseline", "base", "arms", "shape"}
"""What a paper section's ``scales.<scale>`` entry may set: ``profile`` (required at rehearsal and
paper scale, refused at small, whose profile is params.yaml's ``profile``) and the section's own
keys, which replace the small-scale ones; ``arms`` is merged into the arms: an arm it names has its
overrides merged key by key (nested mappings too, so ``{allocator.options: {bandwidth: null}}``
resets one option and keeps the others), an arm it adds is new. The ``small`` entry exists (DVC
lists ``<paper>.scales.${scale}`` among the stage's parameters) and is normally empty."""
RESERVED_PROFILE_PREFIXES = ("paper-", "rehearsal-")
"""Profiles that belong to a scale: chosen by ``scale``, never given as ``profile``."""


def load_params(params_file: str | Path | None = None) -> dict[str, Any]:
    """params.yaml as a mapping; None: the repository's (replication.paths), wherever the cwd is."""
    from replication.paths import params_path

    path = params_path(params_file)
    if not path.is_file():
        raise ConfigError(f"{path}: no such params file")
    params = load_yaml_file(path)
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return params


BUILTIN_PROFILE_DIR = "replication/profiles"
"""params.yaml's ``profile_dir`` for the built-in profiles."""


def profile_spec(params: dict, path: str | Path = "params.yaml") -> str:
    """What ``load_profile`` takes for params.yaml's profile: the name of a built-in profile, or
    ``<profile_dir>/<profile>.yaml`` for a profile file of the user's.

    A profile file is written split in params.yaml, ``profile: my`` and ``profile_dir: configs``
    (``dvc exp run -S profile=my -S profile_dir=configs``), because DVC interpolates
    ``workspace/${profile}/...`` verbatim into the stages' outputs and has no function to take a
    path's stem: split, the name DVC sees is the file's stem by construction (nothing to keep in
    step by hand), the trial folder is ``workspace/<stem>/``, and ``${profile_dir}`` is a DVC
    dependency of the stages. ``profile: configs/my.yaml`` is refused with the split to write."""
    profile = params.get("profile", "default")
    folder = params.get("profile_dir") or BUILTIN_PROFILE_DIR
    if not isinstance(profile, str) or not profile:
        raise ConfigError(f"{path}: profile: expected a profile name, got {profile!r}")
    if not isinstance(folder, str):
        raise ConfigError(f"{path}: profile_dir: expected a folder, got {folder!r}")
    if is_profile_file(profile):
        stem, parent = Path(profile).stem, Path(profile).parent.as_posix()
        raise ConfigError(f"{path}: profile: {profile!r} is a file path; DVC names the trial folder "
                          f"workspace/${{profile}}, so write it split: `profile: {stem}` and `profile_dir: "
                          f"{parent}` (dvc exp run -S profile={stem} -S profile_dir={parent})")
    if Path(folder).as_posix().rstrip("/") == BUILTIN_PROFILE_DIR:
        if profile not in available_profiles():
            raise ConfigError(f"{path}: profile: unknown profile {profile!r}; available: {available_profiles()} "
                              f"(or a file of yours: `profile: <stem>` and `profile_dir: <its folder>`)")
        return profile
    file = Path(folder) / f"{profile}.yaml"
    if not file.is_file():
        raise ConfigError(f"{path}: profile: no profile file {file} (profile_dir {folder!r}, profile {profile!r})")
    return file.as_posix()


def scale_of(params: dict, path: str | Path = "params.yaml") -> str:
    """params.yaml's ``scale`` (``small`` when absent), checked against ``profile``: a paper or
    rehearsal profile is chosen by the scale, never as ``profile``, and ``profile`` tries other
    small-scale setups only (at another scale it must stay ``default``)."""
    scale = params.get("scale", SMALL)
    if scale is None:
        scale = SMALL
    if scale not in SCALES:
        raise ConfigError(f"{path}: scale: {scale!r} is not a scale; one of {list(SCALES)}")
    profile = params.get("profile", PUBLISHED_PROFILE)
    if isinstance(profile, str) and profile.startswith(RESERVED_PROFILE_PREFIXES):
        wanted = profile.split("-", 1)[0]
        raise ConfigError(f"{path}: profile: {profile!r} belongs to a scale; choose it with `scale: {wanted}` "
                          f"(dvc exp run -S scale={wanted}), which also picks each paper's own profile, seeds and arms")
    custom_dir = Path(params.get("profile_dir") or BUILTIN_PROFILE_DIR).as_posix().rstrip("/") != BUILTIN_PROFILE_DIR
    if scale != SMALL and (profile != PUBLISHED_PROFILE or custom_dir):
        raise ConfigError(f"{path}: profile: {profile!r} together with scale {scale!r}; `profile` tries other "
                          f"small-scale setups only; at scale {scale!r} each paper's profile comes from its "
                          f"section's `scales.{scale}` (leave profile: {PUBLISHED_PROFILE})")
    return scale


def section_at_scale(params: dict, section: str, path: str | Path = "params.yaml") -> dict[str, Any]:
    """A paper section as the scale resolves it: the section's own keys at ``small`` (its profile
    params.yaml's ``profile``), else its ``scales.<scale>`` entry over them (see SCALE_KEYS), with
    that entry's profile. The result holds ``profile`` (as ``load_profile`` takes it) and
    ``scale``, never ``scales``."""
    scale = scale_of(params, path)
    sec = params.get(section)
    if not isinstance(sec, dict):
        raise ConfigError(f"{path}: {section}: missing or not a mapping")
    scales = sec.get("scales") or {}
    if not isinstance(scales, dict):
        raise ConfigError(f"{path}: {section}.scales: expected a mapping of scale → settings")
    for name, entry in scales.items():
        if name not in SCALES:
            raise ConfigError(f"{path}: {section}.scales.{name}: not a scale; one of {list(SCALES)}")
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: {section}.scales.{name}: expected a mapping")
        unknown = sorted(set(entry) - SCALE_KEYS)
        if unknown:
            raise ConfigError(f"{path}: {section}.scales.{name}.{unknown[0]}: unknown key; allowed: {sorted(SCALE_KEYS)}")
        if name == SMALL and "profile" in entry:
            raise ConfigError(f"{path}: {section}.scales.small.profile: the small scale's profile is params.yaml's "
                              f"`profile`")
        if not isinstance(entry.get("arms") or {}, dict):
            raise ConfigError(f"{path}: {section}.scales.{name}.arms: expected a mapping of arm name → overrides")
    entry = scales.get(scale)
    if entry is None:
        raise ConfigError(f"{path}: {section}.scales.{scale}: missing; DVC lists {section}.scales.${{scale}} among "
                          f"the stage's parameters" + ("" if scale == SMALL else f", and scale {scale!r} needs the "
                                                       f"paper's profile, seeds and arms at that scale"))
    out = {k: v for k, v in sec.items() if k != "scales"}
    if scale == SMALL:
        profile = profile_spec(params, path)
    else:
        profile = entry.get("profile")
        if not isinstance(profile, str) or profile not in available_profiles():
            raise ConfigError(f"{path}: {section}.scales.{scale}.profile: {profile!r} is not a built-in profile; "
                              f"available: {available_profiles()}")
    arms = dict(out.get("arms") or {})
    for name, over in (entry.get("arms") or {}).items():
        if over is not None and not isinstance(over, dict):
            raise ConfigError(f"{path}: {section}.scales.{scale}.arms.{name}: expected a mapping of overrides")
        arms[name] = _merged(arms.get(name) or {}, over or {})
    out.update({k: v for k, v in entry.items() if k not in ("arms", "profile")})
    out["arms"], out["profile"], out["scale"] = arms, profile, scale
    return out


def _merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``: nested mappings merged key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _check_top(params: dict, path: Path) -> str:
    """The profile as ``load_profile`` takes it (see ``profile_spec``), validated."""
    scale_of(params, path)
    profile = profile_spec(params, path)
    load_profile(profile)  # the profile itself validates (YAML syntax, keys, ranges, a file's stem)
    workers = params.get("workers", 2)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"{path}: workers: must be an integer >= 1, got {workers!r}")
    from replication.launch.config import LauncherConfig

    try:
        LauncherConfig.from_mapping(params.get("launcher"))  # where runs go: checked, never a key
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{path}: {e}") from None
    return profile


def validate_section(params: dict, section: str, path: str | Path | None = None) -> str:
    """Check one paper section; returns a one-line summary. Raises ConfigError naming the key."""
    from replication.paths import params_path

    path = params_path(path)
    _check_top(params, path)
    raw = params.get(section)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {section}: missing or not a mapping")
    unknown = sorted(set(raw) - SECTION_KEYS)
    if unknown:
        raise ConfigError(f"{path}: {section}.{unknown[0]}: unknown key; allowed: {sorted(SECTION_KEYS)}")
    sec = section_at_scale(params, section, path)
    profile, scale = sec.pop("profile"), sec.pop("scale")
    if scale != SMALL:
        load_profile(profile)
        section = f"{section} at scale {scale}"
    from replication.arms import _slug, check_seeds

    check_seeds(sec.get("seeds"), f"{path}: {section}.seeds")
    arms = sec.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ConfigError(f"{path}: {section}.arms: must be a non-empty mapping of arm name → overrides")

    slugs: dict[str, str] = {}
    for name, over in arms.items():
        if not isinstance(name, str) or not _slug(name):
            raise ConfigError(f"{path}: {section}.arms: bad arm name {name!r}")
        if _slug(name) in slugs:
            raise ConfigError(f"{path}: {section}.arms: {name!r} and {slugs[_slug(name)]!r} would share "
                              f"the folder {_slug(name)!r}")
        slugs[_slug(name)] = name
        if over is not None and not isinstance(over, dict):
            raise ConfigError(f"{path}: {section}.arms.{name}: expected a mapping of overrides")
    base = sec.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: {section}.base: expected a mapping of overrides")
    main = sec.get("main", list(arms))
    if not isinstance(main, list) or not main:
        raise ConfigError(f"{path}: {section}.main: must be a non-empty list of arm names")
    for m in main:
        if m not in arms:
            raise ConfigError(f"{path}: {section}.main: {m!r} is not an arm; arms: {list(arms)}")
    run = sec.get("run")
    if run is not None:
        if not isinstance(run, list) or not run:
            raise ConfigError(f"{path}: {section}.run: must be null or a non-empty list of arm names")
        for m in run:
            if m not in arms:
                raise ConfigError(f"{path}: {section}.run: {m!r} is not an arm; arms: {list(arms)}")
    for m, b in (sec.get("baseline") or {}).items():
        for which, name in (("method", m), ("baseline", b)):
            if name not in arms:
                raise ConfigError(f"{path}: {section}.baseline: {which} {name!r} is not an arm")
    steps = sec.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"{path}: {section}.steps: must be null or an integer >= 1, got {steps!r}")
    shape = sec.get("shape")
    if shape is not None:
        from replication.launch.shape import RunShape

        if not isinstance(shape, dict):
            raise ConfigError(f"{path}: {section}.shape: expected a mapping of RunShape fields")
        try:
            RunShape().replaced(shape)
        except ConfigError as e:
            raise ConfigError(f"{path}: {section}.{e}") from None
    # resolve every run of the grid exactly as run_grid will
    from replication.arms import select_arms

    picked, picked_seeds = select_arms({**sec, "profile": profile, "workers": params.get("workers", 2)})
    for arm in picked:
        for seed in picked_seeds:
            try:
                load_profile(profile, {**arm.overrides, "seed": seed})
            except ConfigError as e:
                raise ConfigError(f"{path}: {section}.arms.{arm.name}: {e}") from None
    return (f"{path}: stage {section} OK (profile {profile}, {len(picked)} arms x "
            f"{len(picked_seeds)} seeds)")


def validate_stage(params_file: str | Path | None, stage: str) -> str:
    from replication.paths import params_path

    if stage not in STAGES:
        raise ConfigError(f"--stage: unknown stage {stage!r}; known: {list(STAGES)}")
    path = params_path(params_file)
    params = load_params(path)
    if stage in PAPER_STAGES:
        return validate_section(params, stage, path)
    profile = _check_top(params, path)
    return f"{path}: stage {stage} OK (profile {profile})"


def clear_outputs(paths: list[Path]) -> None:
    """Remove old stage outputs (files or folders) inside the current folder, after validation."""
    import shutil

    root = Path.cwd().resolve()
    for p in paths:
        full = Path(p).resolve()
        if full == root or root not in full.parents:
            raise ConfigError(f"--clear {p}: only paths inside {root} can be cleared")
    for p in paths:
        if Path(p).is_dir() and not Path(p).is_symlink():
            shutil.rmtree(p)
        elif Path(p).exists() or Path(p).is_symlink():
            Path(p).unlink()


# ----------------------------------------------------------------------------- notebook parameters

_EXAMPLES = {"seeds": "[0, 1]", "arms": '["RLOO", "RLOO+VIP"]', "overrides": '{optim.lr: 6.0e-5}'}


def notebook_value(name: str, value: Any, kind: type) -> Any:
    """A notebook parameter that must be a list or a mapping. papermill's ``-p seeds '[0]'`` passes
    the text "[0]"; it is read as YAML here. Anything else is one line saying how to pass it."""
    import yaml

    if value is None:
        return None
    shape = "list" if kind is list else "mapping"
    hint = f"with papermill pass it as YAML: -y '{name}: {_EXAMPLES.get(name, '...')}' or -p {name} '{_EXAMPLES.get(name, '...')}'"
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"notebook parameter {name}: cannot read {value!r} as a {shape}; {hint}") from None
    if not isinstance(value, kind):
        raise ConfigError(f"notebook parameter {name}: expected a {shape}, got {value!r}; {hint}")
    return value
