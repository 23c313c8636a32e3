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
SECTION_KEYS = {"seeds", "main", "run", "steps", "baseline", "base", "arms"}


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


def _check_top(params: dict, path: Path) -> str:
    """The profile as ``load_profile`` takes it (see ``profile_spec``), validated."""
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
    profile = _check_top(params, path)
    sec = params.get(section)
    if not isinstance(sec, dict):
        raise ConfigError(f"{path}: {section}: missing or not a mapping")
    unknown = sorted(set(sec) - SECTION_KEYS)
    if unknown:
        raise ConfigError(f"{path}: {section}.{unknown[0]}: unknown key; allowed: {sorted(SECTION_KEYS)}")
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
