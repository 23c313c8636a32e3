"""Where a paper's outputs go: the published default into results/, every trial into its own
git-ignored folder under workspace/ (issue 18, "trying things never touches the published default").

results/ holds what the README and docs/ quote, so only one configuration may write it: profile
``default`` with params.yaml's sections as committed and no notebook parameter set. Anything else
is a trial and writes ``workspace/<name>/<paper>/``, where <name> is the scale at another scale
than ``small`` (``workspace/paper/``, ``workspace/rehearsal/``), else the profile's name (a profile
file's stem, params.yaml's ``profile`` with ``profile_dir``) alone when only the
profile differs (what ``dvc exp run -S profile=quick`` gives, and what the DVC stages declare as
``workspace/${profile}/<paper>``) and ``<profile>-<8 hex>`` when notebook parameters or an edited
section differ too (the hash of exactly those differences, so the same trial lands in the same
folder and two different trials never share one).

    place = paper_place("vip", "params.yaml", profile="quick", notebook={"seeds": [0]})
    place.root       # Path("workspace/quick-3f2a9c1d"); place.published is False
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from replication.config import ConfigError
from replication.stage_params import PUBLISHED_PROFILE, RESULTS  # noqa: F401 (re-exported)

WORKSPACE = Path("workspace")
PRODUCTS_ENV = "REPLICATION_STAGE_PRODUCTS"
"""Set by the stage runner: the temporary folder a paper notebook writes its products into."""
LOCK_ENV = "REPLICATION_STAGE_LOCK"
"""Set by the stage runner: the destination whose writer lock the stage already holds."""


@dataclasses.dataclass(frozen=True)
class Place:
    root: Path
    """Output root: ``results`` (published) or ``workspace/<name>``; a paper writes ``root/<paper>``."""
    published: bool
    differs: dict
    """What makes this a trial: {"profile": ..., "<section> in params.yaml": ..., notebook parameters}."""

    def describe(self, paper: str) -> str:
        where = self.root / paper
        if self.published:
            return f"outputs: {where} (the published default)"
        what = ", ".join(f"{k} {json.dumps(v, sort_keys=True, default=str)}" for k, v in self.differs.items())
        return f"outputs: {where} (a trial: {what}; results/ is not touched)"


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def committed_params(params_file: str | Path) -> dict | None:
    """params.yaml as committed at HEAD of the repository holding ``params_file``; None outside a
    git checkout or before the first commit (then the file as it stands counts as committed)."""
    import yaml

    path = Path(params_file).resolve()
    top = _git(["rev-parse", "--show-toplevel"], path.parent)
    if top is None:
        return None
    rel = path.relative_to(Path(top.strip()).resolve()).as_posix()
    text = _git(["show", f"HEAD:{rel}"], path.parent)
    if text is None:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def paper_place(section: str, params_file: str | Path, params: dict, *, profile: str | None = None,
                notebook: dict | None = None) -> Place:
    """Decide where ``section``'s outputs go. ``params``: the loaded params file; ``profile``: a
    profile chosen outside it (notebook parameter); ``notebook``: the other notebook parameters
    (None or empty = not set)."""
    from replication.config.profiles import profile_name
    from replication.stage_params import SMALL, profile_spec, scale_of

    scale = scale_of(params, params_file)
    chosen = profile or profile_spec(params, params_file)  # a name, or a profile file named by its stem
    differs: dict[str, Any] = {}
    if scale != SMALL:
        differs["scale"] = scale
    if chosen != PUBLISHED_PROFILE:
        differs["profile"] = chosen
    committed = committed_params(params_file)
    if committed is not None and _canonical(committed.get(section)) != _canonical(params.get(section)):
        differs[f"params.yaml {section}"] = "edited"
    for key, value in (notebook or {}).items():
        if value is not None and value != {} and value != []:
            differs[key] = value
    if not differs:
        return Place(RESULTS, True, {})
    # workspace/<scale>/ at another scale (its profiles are the scale's), else workspace/<profile stem>/
    name = scale if scale != SMALL else profile_name(chosen)
    extra = {k: v for k, v in differs.items() if k not in ("profile", "scale")}
    if extra:
        if committed is not None and f"params.yaml {section}" in extra:
            extra[f"params.yaml {section}"] = params.get(section)  # the hash covers the edit itself
        name += "-" + hashlib.sha256(_canonical(extra).encode()).hexdigest()[:8]
    return Place(WORKSPACE / name, False, differs)


def check_out_root(out_root: str | Path, place: Place) -> None:
    """A trial never writes into results/, even when asked to explicitly (``out_root="results"``)."""
    if place.published:
        return
    if Path(out_root).resolve() == RESULTS.resolve():
        raise ConfigError(
            f"out_root {out_root}: results/ holds only the published default (profile {PUBLISHED_PROFILE}, "
            f"params.yaml as committed, no notebook parameters); this run differs "
            f"({', '.join(place.differs)}): leave out_root None to write {place.root}/")


def claim_output(section: str, place: Place, out_root: str | Path | None = None) -> tuple[Path, Path]:
    """(the paper's output folder, the folder its products go to) for a notebook run: ``out_root``
    None means ``place.root``; a trial is refused results/. The output folder's writer lock is held
    for this process's life, unless a DVC stage holds it for us: then the products (tables,
    figures, summary) go to the stage's temporary folder, swapped in when the notebook succeeds."""
    import os

    from replication.store import hold_writer_lock

    root = place.root if out_root is None else Path(out_root)
    check_out_root(root, place)
    out = root / section
    if os.environ.get(LOCK_ENV) == str(out.resolve()):
        products = Path(os.environ[PRODUCTS_ENV])
    else:
        hold_writer_lock(out, what=f"notebook {section}")
        products = out
    print(place.describe(section) if root == place.root else f"outputs: {out}", flush=True)
    return out, products


def stage_marker(stage: str, name: str, dest: str, folder: str = PUBLISHED_PROFILE, var: str = "profile") -> str:
    """Text of ``workspace/<folder>/<name>`` (committed): DVC declares every stage's trial outputs
    under ``workspace/${profile}/`` (a small-scale trial) and ``workspace/${scale}/`` (another
    scale); for the default profile (``folder`` default) and the small scale (``folder`` small)
    those paths only stand in (``orchestration.stage.STAND_IN_FOLDERS``)."""
    if stage in ("base", "report"):
        declared = f"`workspace/${{{var}}}/{name}`"
        stands = "this\nfile stands in for it. "
    else:  # a paper: its summary is a metrics output of its own (DVC forbids overlapping outputs)
        declared = (f"`workspace/${{{var}}}/{name}/MANIFEST.json` and, as metrics,\n"
                    f"`workspace/${{{var}}}/{name}/summary.json`")
        stands = ("the two files\nbeside this one stand in for them (an empty summary: the published "
                  f"metrics are `{dest}summary.json`).\n")
    who = "the default profile" if var == "profile" else "the small scale"
    return (f"# workspace/{folder}/{name}\n\n"
            f"The default profile publishes the `{stage}` stage into `{dest}` (committed). DVC declares\n"
            f"the stage's trial output as {declared}; for {who} {stands}"
            f"Trials (other profiles, notebooks with other parameters) write\n"
            f"`workspace/<profile>[-<hash>]/`, another scale `workspace/<scale>/`; see README, \"Trying things\".\n")
