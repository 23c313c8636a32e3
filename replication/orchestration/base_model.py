"""The `base` stage: build the profile's base model, or keep the one already there if it is the
same model.

``python -m replication.orchestration.base_model --profile P --out results/base-model``

Several profiles share one base model: `quick` extends `default` and changes only RL settings,
so its warm start is the default's. DVC re-runs the `base` stage whenever the `profile`
parameter changes (`dvc exp run --set-param profile=quick`), and the SFT warm start costs 3–6
minutes on 2 cores. Here the stage writes a key beside the model (``BASE_KEY``): a hash of what
``prepare-model`` reads (the profile's resolved ``model``, ``sft`` and ``task`` sections) and the
code it runs (the `base` stage's code dependencies in dvc.yaml, plus the dispatcher). If ``OUT``
already holds a model with the same key, nothing is rebuilt; otherwise ``prepare-model`` runs and
the key is written after it succeeds, so a killed build never looks finished.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from replication.code_digest import code_digest
from replication.config import load_profile, to_dict
from replication.store import MANIFEST, verify_manifest, write_atomic, write_manifest

KEY_FILE = "BASE_KEY"
PACKAGE = Path(__file__).resolve().parents[1]
CODE = ("sft.py", "config/sft_section.py", "models", "tasks", "train/prepare.py")
"""What builds a base model, relative to the package: dvc.yaml's `base` deps and the dispatcher."""


def _code_digest() -> str:
    return code_digest(PACKAGE, include=CODE)


def base_key(profile: str) -> str:
    """Key of the base model ``prepare-model --profile profile`` builds (20 hex)."""
    cfg = load_profile(profile)
    # model.dtype_without_bf16 is resolved into model.dtype when the profile loads
    # (config/cpu_dtype.py): the dtype it resolved to is the input, the setting itself is not
    model = {k: v for k, v in to_dict(cfg.model).items() if k != "dtype_without_bf16"}
    inputs = {"model": model, "sft": cfg.sft, "task": to_dict(cfg.task), "code": _code_digest()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:20]


MANIFEST_KIND = "base-model"
"""The manifest kind of a base model folder: its files (weights, config, tokenizer, report and
``BASE_KEY``) with sizes and SHA-256, the key in ``extra``, written last by the base stage."""


def seal_base_model(out: Path, key: str) -> None:
    """Check a base model folder written before manifests (its JSON files parse, its weights are
    whole: ``store.verify_all``) and write its manifest; a damaged folder is refused."""
    from replication.store.verify_all import check_base_model_files

    check_base_model_files(out)
    write_manifest(out, kind=MANIFEST_KIND, extra={"key": key})


def ensure_base_model(profile: str, out: str | Path) -> str:
    """Reuse ``out`` when its ``BASE_KEY`` matches the profile's key and its manifest verifies,
    else build it; the manifest is written last, over the model and its key."""
    out = Path(out)
    key = base_key(profile)
    marker = out / KEY_FILE
    if marker.exists() and marker.read_text().strip() == key:
        if not (out / MANIFEST).exists():  # a folder from before manifests: checked, then sealed
            seal_base_model(out, key)
            return f"base model in {out} is current for profile {profile} (key {key}); sealed, not rebuilt"
        verify_manifest(out, kind=MANIFEST_KIND)  # committed evidence: damage stops here, named
        return f"base model in {out} is current for profile {profile} (key {key}); not rebuilt"
    for stale in (marker, out / MANIFEST):  # the folder is about to change: never leave a stale key
        stale.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "replication", "prepare-model", "--profile", profile, "--out", str(out)],
                   check=True)
    write_atomic(marker, key + "\n")
    write_manifest(out, kind=MANIFEST_KIND, extra={"key": key})
    return f"base model built in {out} for profile {profile} (key {key})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        print(ensure_base_model(args.profile, args.out))
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)


if __name__ == "__main__":
    main()
