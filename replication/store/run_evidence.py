"""The run folder's schema, and whether a folder is evidence we may use. Verified on every read.

This module sits in the store, below both the orchestration that writes run folders and the
report that reads them: one definition of what a whole run is, for every writer and reader.

A training run folder (kind ``run``, written by train/run_folder.finish_run) and an export
(kind ``export``, ``results/<paper>/runs/<arm>/s<seed>/``, written by run_cache.export_run or
sealed once by ``python -m replication seal``) exist only if their ``MANIFEST.json`` verifies
(store.verify_manifest: every file present with its size, sha256 and row count) AND the files
agree with each other:

- metrics.json parses and holds ``steps``, ``seed`` and non-empty ``eval_before`` / ``eval_after``
  of finite numbers (a seed without them would silently drop out of a paired test);
- steps.jsonl has one row per step (= metrics ``steps`` = the manifest's ``steps``);
- the per-prompt records have ``prompts_per_step`` rows per step (config.json's);
- config.json parses and names the same seed, and a folder named ``s<seed>`` holds that seed
  (a seed folder copied over another's is damage, not a second seed);
- the key record (``key.json``, ``store.run_key``) hashes to the key it names, and that record's
  config, seed, steps and code digest are the folder's own (``check_key``): a run is trusted by
  what it holds, not by the name it sits under. Exports written before key records carry a
  ``run.json`` with their old cache key, which is read but matches no key today.

``verify_run`` checks this from the manifest's row counts (cheap: no row is parsed twice);
``check_rows`` (used when sealing, where no manifest vouches for the bytes yet) parses every row
and checks the step numbers themselves. Every failure is a ``DamagedArtifact``: one line naming
the folder or file and the problem.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path

from replication.store.lock import writer_lock
from replication.store.manifest import MANIFEST, DamagedArtifact, verify_manifest, write_manifest
from replication.store.run_key import KEY_FILE, changed_fields, key_of

RUN_KINDS = ("run", "export")
EXPORT_KIND = "export"
RUN_FILE = "run.json"
"""Legacy: an export's cache key before key records (``KEY_FILE``) carried its inputs."""


# ----------------------------------------------------------------------------- reading files


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; a cut or damaged file is one line naming it."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise DamagedArtifact(f"{path} is missing") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise DamagedArtifact(f"{path} is not valid JSON (cut or damaged: {str(e)[:80]})") from None
    except OSError as e:
        raise DamagedArtifact(f"{path} cannot be read ({e.strerror or e})") from None
    if not isinstance(value, dict):
        raise DamagedArtifact(f"{path} is not a JSON object")
    return value


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a ``.jsonl`` or ``.jsonl.gz`` file; a cut gzip or a bad line is one line naming
    the file (and the line)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    rows = []
    try:
        with opener(path, "rt") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        raise DamagedArtifact(f"{path} line {i} is not JSON (cut or damaged)") from None
    except FileNotFoundError:
        raise DamagedArtifact(f"{path} is missing") from None
    except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as e:
        raise DamagedArtifact(f"{path} is cut or damaged ({type(e).__name__}: {str(e)[:80]})") from None
    except OSError as e:
        raise DamagedArtifact(f"{path} cannot be read ({e.strerror or e})") from None
    return rows


def prompts_file(folder: Path) -> Path:
    """The per-prompt records: prompts.jsonl.gz (an export) or prompts.jsonl (a run folder)."""
    gz = Path(folder) / "prompts.jsonl.gz"
    return gz if gz.exists() else Path(folder) / "prompts.jsonl"


# ----------------------------------------------------------------------------- consistency


def _manifest_rows(manifest: dict, name: str) -> int | None:
    entry = manifest.get("files", {}).get(name)
    return None if entry is None else entry.get("rows")


def _manifest_extra(manifest: dict) -> dict:
    return manifest.get("extra") or {}


def _metrics(folder: Path) -> dict:
    path = Path(folder) / "metrics.json"
    m = read_json(path)
    if not isinstance(m.get("steps"), int) or m["steps"] < 1:
        raise DamagedArtifact(f"{path}: 'steps' missing or not a positive integer")
    for key in ("eval_before", "eval_after"):
        if not isinstance(m.get(key), dict) or not m[key]:
            raise DamagedArtifact(f"{path}: '{key}' missing or empty (seed {m.get('seed')} would drop "
                                  f"out of every comparison)")
        for set_name, values in m[key].items():
            bad = [k for k, v in (values.items() if isinstance(values, dict) else [("*", values)])
                   if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
            if bad:
                raise DamagedArtifact(f"{path}: {key} {set_name} {bad[0]} is not a finite number (seed "
                                      f"{m.get('seed')} would drop out of that comparison)")
    return m


def _prompts_per_step(folder: Path, metrics: dict) -> int | None:
    config = read_json(Path(folder) / "config.json")
    if "seed" in config and "seed" in metrics and config["seed"] != metrics["seed"]:
        raise DamagedArtifact(f"{folder}: config.json seed {config['seed']} but metrics.json seed "
                              f"{metrics['seed']}")
    q = (config.get("rollout") or {}).get("prompts_per_step")
    return q if isinstance(q, int) and q > 0 else None


def _check_counts(folder: Path, steps: int, step_rows: int, prompt_rows: int, q: int | None) -> None:
    if step_rows != steps:
        raise DamagedArtifact(f"{folder / 'steps.jsonl'} has {step_rows} rows, metrics.json says "
                              f"{steps} steps")
    expected = steps * q if q else None
    if (expected is not None and prompt_rows != expected) or (expected is None and prompt_rows % steps):
        want = f"{expected} ({steps} steps x {q} prompts)" if expected else f"a multiple of {steps}"
        raise DamagedArtifact(f"{prompts_file(folder)} has {prompt_rows} rows, expected {want}")


def claimed_key(folder: Path) -> str | None:
    """The key the folder claims: its key record's (checked by ``check_key``) or a legacy
    run.json's; None when it has neither."""
    folder = Path(folder)
    if (folder / KEY_FILE).exists():
        return read_key_record(folder)["key"]
    path = folder / RUN_FILE
    if not path.exists():
        return None
    key = read_json(path).get("key")
    if not isinstance(key, str) or not key:
        raise DamagedArtifact(f"{path}: no cache key")
    return key


class KeyMismatch(DamagedArtifact):
    """A run folder whose key record is not the key it is filed under, or not its own."""


def read_key_record(folder: Path) -> dict:
    """The folder's key record, whose key is the digest of its own inputs; DamagedArtifact if
    the file is cut, or its key is not the digest of its inputs (edited by hand)."""
    path = Path(folder) / KEY_FILE
    record = read_json(path)
    inputs = record.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(record.get("key"), str):
        raise DamagedArtifact(f"{path}: no key and inputs")
    try:
        recomputed = key_of(inputs)
    except ValueError as e:
        raise DamagedArtifact(f"{path}: {e}") from None
    if recomputed != record["key"]:
        raise DamagedArtifact(f"{path}: names key {record['key']} but its inputs hash to {recomputed}")
    return record


def _without_profile(config: dict) -> dict:
    """The config as a key holds it: no profile name, no section the trainer never reads."""
    from replication.config.sections import NOT_TRAINING_SECTIONS

    return {k: v for k, v in {**config, "profile": None}.items() if k not in NOT_TRAINING_SECTIONS}


def check_key(folder: Path, expected: str | None = None) -> dict:
    """The folder's key record once its inputs are the folder's own: the config is config.json's
    (profile name aside), the seed and steps are metrics.json's and the code digest is the one the
    trainer recorded in its provenance. With ``expected``, the record's key must also be it (the
    key a cache entry is filed under, or the one a grid looks for). ``KeyMismatch`` (a
    DamagedArtifact) names the folder, the key it holds and the one expected."""
    folder = Path(folder)
    if not (folder / KEY_FILE).exists():
        raise KeyMismatch(f"{folder} has no key record ({KEY_FILE}); it holds a run of unknown inputs"
                          + (f", not key {expected}" if expected else ""))
    record = read_key_record(folder)
    inputs = record["inputs"]
    config = read_json(folder / "config.json")
    metrics = read_json(folder / "metrics.json")
    problems = []
    if _without_profile(config) != _without_profile(inputs["config"]):
        problems.append("config.json is not the config its key record names")
    if metrics.get("seed") != inputs["config"].get("seed"):
        problems.append(f"metrics.json seed {metrics.get('seed')}, key record seed {inputs['config'].get('seed')}")
    if metrics.get("steps") != inputs["steps"]:
        problems.append(f"metrics.json {metrics.get('steps')} steps, key record {inputs['steps']}")
    code = (metrics.get("provenance") or {}).get("code_digest")
    if code is not None and code != inputs["code"]:
        problems.append(f"trained by code {code}, key record names code {inputs['code']}")
    if problems:
        raise KeyMismatch(f"{folder}: key record {record['key']} does not describe the run it sits beside "
                          f"({'; '.join(problems)})")
    if expected is not None and record["key"] != expected:
        raise KeyMismatch(f"{folder} holds run {record['key']} (seed {inputs['config'].get('seed')}), not "
                          f"{expected}")
    return record


def key_difference(folder: Path, record: dict) -> str:
    """Which key fields of the folder's record differ from ``record`` (for a one-line message)."""
    try:
        return ", ".join(changed_fields(read_key_record(folder), record)) or "none"
    except DamagedArtifact as e:
        return str(e)


def _seed_folder(folder: Path, metrics: dict) -> None:
    name = Path(folder).name
    if name[:1] == "s" and name[1:].isdigit() and int(name[1:]) != metrics.get("seed"):
        raise DamagedArtifact(f"{folder}: holds seed {metrics.get('seed')}, but its folder names seed "
                              f"{name[1:]} (a copy of another seed's run?)")


def verify_run(folder: Path, kind: str | None = None) -> dict:
    """The verified manifest of a run folder or export (module docstring); DamagedArtifact
    otherwise. ``kind`` = "run" or "export" demands that kind."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DamagedArtifact(f"{folder} is missing")
    manifest = verify_manifest(folder, kind=kind)
    if manifest.get("kind") not in RUN_KINDS:
        raise DamagedArtifact(f"{folder}: its manifest is of kind {manifest.get('kind')!r}, not a run")
    metrics = _metrics(folder)
    steps = metrics["steps"]
    declared = _manifest_extra(manifest).get("steps")
    if declared is not None and declared != steps:
        raise DamagedArtifact(f"{folder}: manifest says {declared} steps, metrics.json {steps}")
    _seed_folder(folder, metrics)
    q = _prompts_per_step(folder, metrics)
    prompts = prompts_file(folder)
    step_rows = _manifest_rows(manifest, "steps.jsonl")
    prompt_rows = _manifest_rows(manifest, prompts.name)
    if step_rows is None or prompt_rows is None:
        raise DamagedArtifact(f"{folder}: its manifest lists no steps.jsonl or {prompts.name}")
    _check_counts(folder, steps, step_rows, prompt_rows, q)
    key = claimed_key(folder)
    if manifest.get("kind") == EXPORT_KIND and _manifest_extra(manifest).get("key") not in (None, key):
        raise DamagedArtifact(f"{folder}: its key {key!r} differs from its manifest's")
    if (folder / KEY_FILE).exists():
        check_key(folder)
    return manifest


def check_rows(folder: Path) -> dict:
    """Parse every file of an unsealed run and check it row by row; returns the manifest
    ``extra`` to seal it with ({"steps": n, "key": k}). DamagedArtifact names the problem."""
    folder = Path(folder)
    metrics = _metrics(folder)
    steps = metrics["steps"]
    _seed_folder(folder, metrics)
    q = _prompts_per_step(folder, metrics)
    step_rows = read_jsonl(folder / "steps.jsonl")
    numbers = [r.get("step") for r in step_rows]
    if numbers != list(range(len(numbers))):
        raise DamagedArtifact(f"{folder / 'steps.jsonl'}: steps are not 0..{len(numbers) - 1} in order")
    prompts = prompts_file(folder)
    prompt_rows = read_jsonl(prompts)
    _check_counts(folder, steps, len(step_rows), len(prompt_rows), q)
    seen = {r.get("step") for r in prompt_rows}
    if seen != set(range(steps)):
        raise DamagedArtifact(f"{prompts}: rows do not cover steps 0..{steps - 1} exactly")
    extra = {"steps": steps}
    key = claimed_key(folder)
    if key is not None:
        extra["key"] = key
    return extra


# ----------------------------------------------------------------------------- sealing


def run_folders(root: Path) -> list[Path]:
    """The run folders at or under ``root``: ``root`` itself, its ``s<seed>`` folders, or its
    ``<arm>/s<seed>`` folders (a results/<paper>/runs folder)."""
    root = Path(root)
    if not root.is_dir():
        raise DamagedArtifact(f"{root} is not a folder")
    if (root / "metrics.json").exists() or (root / MANIFEST).exists():
        return [root]
    found = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if child.name[:1] == "s" and child.name[1:].isdigit():
            found.append(child)
        else:
            found += [g for g in sorted(child.iterdir())
                      if g.is_dir() and g.name[:1] == "s" and g.name[1:].isdigit()]
    return found


def seal(folder: Path) -> str:
    """Seal one export made before manifests existed: check it row by row, then write its
    manifest. An export that already has one is verified instead (never resealed)."""
    folder = Path(folder)
    if (folder / MANIFEST).exists():
        verify_run(folder)
        return f"{folder}: already sealed, verifies"
    for name in ("metrics.json", "steps.jsonl", "config.json"):
        if not (folder / name).exists():
            raise DamagedArtifact(f"{folder}: {name} is missing; not sealed")
    with writer_lock(folder, "seal"):
        extra = check_rows(folder)
        write_manifest(folder, kind=EXPORT_KIND, extra=extra)
    verify_run(folder, kind=EXPORT_KIND)
    return f"{folder}: sealed ({extra['steps']} steps)"
