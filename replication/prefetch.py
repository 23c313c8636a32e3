"""``python -m replication prefetch --scale paper``: fetch every hub model and dataset a scale's
runs name, on a machine that reaches the hub, and pin each to its commit in the hub lock file.

    python -m replication prefetch --scale paper [--params params.yaml] [--lock hub.lock.json]
                                   [--cache-dir DIR] [--update] [--no-progress]

1. The runs: every paper section at that scale (``stage_params.section_at_scale``), every arm and
   seed it trains (``arms.select_arms``), each configuration resolved by ``config.load_profile``
   exactly as the grid resolves it; the hub ids are what their run keys record
   (``store.run_key.hub_revisions``): models (the policy, any other path entry that is a hub id)
   and datasets (training pool and held-out sets by registry name).
2. Each id's commit: the configs' pin, else the default branch, resolved by the hub.
3. The lock (``store.hub_lock``): a commit that differs from the one already locked for the same
   id is refused, with nothing fetched and the lock left as it is, unless ``--update``.
4. Each repository is downloaded at that commit into the hub cache (``snapshot_download``; what
   is there already is kept), then the lock is written atomically, merged with what it held.

One line per repository (kind, id, commit, size, what changed), then where the lock and the
cache are. Runs on the compute nodes read the lock and load each repository from that cache at
its commit without the network (``HF_HUB_OFFLINE=1`` is safe): store/hub_snapshot.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replication.config import ConfigError
from replication.store.hub_lock import KINDS, REPO_TYPE, empty_lock, lock_path, merge_lock, read_hub_lock, write_hub_lock

_COMMIT = re.compile(r"[0-9a-f]{40}")


class PrefetchError(ConfigError):
    """The hub refused or could not be reached for one repository; the message names it."""


@dataclasses.dataclass(frozen=True)
class HubItem:
    """One hub repository that a scale's runs name."""

    kind: str
    """The lock's section: "models" or "datasets"."""
    repo_id: str
    """Its hub id, ``owner/name``."""
    revision: str | None
    """The configs' pin (branch, tag or commit); None: the repository's default branch."""
    named_by: tuple[str, ...]
    """The runs that name it, as ``<paper>/<arm>``."""


@dataclasses.dataclass(frozen=True)
class Fetched:
    """One repository after the prefetch."""

    item: HubItem
    """What was fetched."""
    commit: str
    """The commit it is locked to."""
    size: int
    """Bytes of its snapshot in the hub cache."""
    change: str
    """"new", "unchanged" or "updated from <old commit>"."""


@dataclasses.dataclass(frozen=True)
class PrefetchReport:
    """What a prefetch fetched and wrote."""

    fetched: list[Fetched]
    """Every repository, in the order of the lock (models, then datasets, by id)."""
    skipped: dict[str, tuple[str, ...]]
    """Paths that look like hub ids but lie under a local folder ({path: runs naming it})."""
    lock: Path
    """The lock file."""
    written: bool
    """Whether the lock file changed."""
    cache: str
    """The hub cache the repositories are in."""

    def lines(self) -> list[str]:
        from tqdm import tqdm

        width = max((len(f.item.repo_id) for f in self.fetched), default=0)
        out = [f"{REPO_TYPE[f.item.kind]:<8} {f.item.repo_id:<{width}}  {f.commit}  "
               f"{tqdm.format_sizeof(f.size, 'B', 1000):>8}  {f.change}" for f in self.fetched]
        out += [f"not fetched: {path} (named by {', '.join(by)}): under the local folder "
                f"{path.split('/')[0]}/, a local path not built yet, not a hub id" for path, by in self.skipped.items()]
        out.append(f"lock: {self.lock.resolve()} ({'written' if self.written else 'unchanged'}); "
                   f"hub cache: {self.cache}")
        return out


# ----------------------------------------------------------------------------- what the runs name


def scale_items(scale: str, params_file: str | Path | None = None) -> tuple[list[HubItem], dict[str, tuple[str, ...]]]:
    """(hub repositories, skipped local paths) of every run that ``scale`` trains (module doc)."""
    from replication.arms import select_arms
    from replication.config import load_profile, to_dict
    from replication.paths import params_path
    from replication.stage_params import PAPER_STAGES, load_params, section_at_scale, validate_section
    from replication.store.run_key import UNPINNED, hub_revisions

    params_file = params_path(params_file)
    params = {**load_params(params_file), "scale": scale}
    pins: dict[tuple[str, str], dict[str | None, list[str]]] = {}
    for paper in PAPER_STAGES:
        validate_section(params, paper, params_file)
        sec = section_at_scale(params, paper, params_file)
        sec["workers"] = int(params.get("workers", 2))
        arms, seeds = select_arms(sec)
        for arm in arms:
            for seed in seeds:
                cfg = to_dict(load_profile(sec["profile"], {**arm.overrides, "seed": seed}))
                for key, revision in hub_revisions(cfg, empty_lock()).items():
                    kind, repo_id = key.split(":", 1)
                    runs = pins.setdefault((f"{kind}s", repo_id), {}).setdefault(
                        None if revision == UNPINNED else revision, [])
                    if f"{paper}/{arm.name}" not in runs:
                        runs.append(f"{paper}/{arm.name}")
    items, skipped = [], {}
    for (kind, repo_id), by_revision in sorted(pins.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1])):
        named_by = tuple(dict.fromkeys(r for runs in by_revision.values() for r in runs))
        if len(by_revision) > 1:
            raise PrefetchError(f"{REPO_TYPE[kind]} {repo_id}: the runs pin it to {len(by_revision)} revisions "
                                f"({', '.join(str(r) for r in by_revision)}); the lock holds one commit per id")
        if Path(repo_id.split("/")[0]).is_dir():  # e.g. results/encoder before `dvc repro encoder`
            skipped[repo_id] = named_by
            continue
        items.append(HubItem(kind, repo_id, next(iter(by_revision)), named_by))
    return items, skipped


# ----------------------------------------------------------------------------- the hub


def resolve_commit(item: HubItem, endpoint: str | None = None) -> str:
    """The commit ``item``'s revision names on the hub now (a commit pin is taken as it is)."""
    if item.revision and _COMMIT.fullmatch(item.revision):
        return item.revision
    from huggingface_hub import HfApi

    with _hub_errors(item, endpoint):
        sha = HfApi(endpoint=endpoint).repo_info(item.repo_id, repo_type=REPO_TYPE[item.kind],
                                                 revision=item.revision).sha
    if not sha:
        raise PrefetchError(f"{REPO_TYPE[item.kind]} {item.repo_id}: the hub gave no commit for it")
    return sha


@contextlib.contextmanager
def _hub_errors(item: HubItem, endpoint: str | None) -> Iterator[None]:
    """A hub failure for ``item`` as one ``PrefetchError`` line naming it and what to do."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - the block is one hub call: every failure, one line
        from huggingface_hub import constants
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

        what = f"{REPO_TYPE[item.kind]} {item.repo_id} (named by {', '.join(item.named_by)})"
        where = endpoint or constants.ENDPOINT
        if isinstance(err, GatedRepoError):
            why = f"gated on {where}: accept its terms on the hub, then `hf auth login` (or set HF_TOKEN)"
        elif isinstance(err, RepositoryNotFoundError):
            why = f"not found on {where} (check the id; a private repo needs `hf auth login` or HF_TOKEN)"
        elif isinstance(err, RevisionNotFoundError):
            why = f"revision {item.revision!r} not found on {where}"
        else:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            why = f"{type(err).__name__} from {where}: {first}"
        raise PrefetchError(f"prefetch: {what}: {why}") from None


# ----------------------------------------------------------------------------- the command


def prefetch(scale: str, params_file: str | Path | None = None, lock: str | Path | None = None,
             cache_dir: str | Path | None = None, update: bool = False, progress: bool = True,
             endpoint: str | None = None) -> PrefetchReport:
    """Fetch and lock every hub repository ``scale``'s runs name (module doc)."""
    from huggingface_hub import constants
    from tqdm import tqdm

    from replication.store.hub_snapshot import fetch_snapshot, hub_offline, snapshot_bytes

    if hub_offline():
        raise PrefetchError("prefetch needs the hub, but HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE / "
                            "TRANSFORMERS_OFFLINE) is set: unset it on a machine that reaches the hub")
    items, skipped = scale_items(scale, params_file)
    path = lock_path(lock)
    old = read_hub_lock(path)
    commits = {}
    for item in tqdm(items, desc="resolve", unit="repo", disable=not progress):
        commits[item] = resolve_commit(item, endpoint)
    found = empty_lock()
    for item, commit in commits.items():
        found[item.kind][item.repo_id] = commit
    merged = merge_lock(old, found, update)  # a changed commit stops here, before any download
    if not progress:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    fetched = []
    for item in tqdm(items, desc="prefetch", unit="repo", disable=not progress):
        with _hub_errors(item, endpoint):
            folder = fetch_snapshot(item.kind, item.repo_id, commits[item], cache_dir, endpoint)
        before = old[item.kind].get(item.repo_id)
        change = "new" if before is None else "unchanged" if before == commits[item] else f"updated from {before}"
        fetched.append(Fetched(item, commits[item], snapshot_bytes(folder), change))
    written = write_hub_lock(merged, path)
    return PrefetchReport(fetched, skipped, path, written, str(cache_dir or constants.HF_HUB_CACHE))


def configure_parser(p: Any) -> None:
    """The ``prefetch`` sub-command's arguments (``replication.__main__``)."""
    from replication.stage_params import SCALES

    p.add_argument("--scale", required=True, choices=SCALES,
                   help="the scale whose runs' hub models and datasets to fetch (paper: the papers' setups)")
    p.add_argument("--params", default=None, type=Path, help="params.yaml (default: the repository's)")
    p.add_argument("--lock", default=None, type=Path,
                   help="the hub lock file (default: $REPLICATION_HUB_LOCK, else hub.lock.json here)")
    p.add_argument("--cache-dir", default=None, type=Path,
                   help="hub cache to download into (default: HF_HUB_CACHE); runs read HF_HUB_CACHE, so "
                        "point it at the same folder on the compute nodes")
    p.add_argument("--update", action="store_true",
                   help="take the hub's new commit for an id already locked at another one")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_command(args: Any) -> int:
    report = prefetch(args.scale, args.params, args.lock, args.cache_dir, update=args.update,
                      progress=not args.no_progress)
    print("\n".join(report.lines()), flush=True)
    return 0
