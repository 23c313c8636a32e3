"""Save and load policies as plain HF folders, through the Auto classes only.

The tiny model, an SFT checkpoint and Qwen2.5-Math all go through ``load_policy``; nothing here
knows which one it is loading. The tiny tokenizer is written with ``tokenizer_class =
PreTrainedTokenizerFast`` (transformers 5 writes its internal "TokenizersBackend"), so the folder
also loads under transformers 4.x.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str | None:
    """None/"auto" keep the checkpoint's dtype; names map to torch dtypes."""
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r}: choose one of {sorted(_DTYPES)} or 'auto'")
    return _DTYPES[dtype]


def save_pretrained_named(model: Any, tokenizer: Any, folder: str | Path, dest: str | Path | None = None,
                          **model_kw: Any) -> None:
    """``model.save_pretrained`` then ``tokenizer.save_pretrained`` into ``folder`` (a staging
    folder of ``dest``); a failed write is ``store.DiskFull`` naming ``dest``'s file. safetensors
    and tokenizers write from Rust and name no file (safetensors deletes its partial one), so
    each call names its own: the weights, the tokenizer."""
    from replication.store import io_errors

    folder = Path(folder)
    staging = () if dest is None else (folder,)  # removed on failure: only a staging folder
    dest = folder if dest is None else Path(dest)
    with io_errors(dest, *staging, unnamed="model.safetensors"):
        model.save_pretrained(folder, **model_kw)
    with io_errors(dest, *staging, unnamed="tokenizer.json"):
        tokenizer.save_pretrained(folder)


def save_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: str | Path,
                dest: str | Path | None = None) -> Path:
    """Write model + tokenizer to ``folder`` (created) as a standard HF folder (``dest``: where
    a staging ``folder`` goes, for the name in a failed write's message)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_pretrained_named(model, tokenizer, folder, dest)
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        if cfg.get("tokenizer_class") == "TokenizersBackend":
            cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
            from replication.store import write_atomic

            write_atomic(cfg_path, json.dumps(cfg, indent=2))
    return folder


def load_policy(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    **from_pretrained: Any,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model in eval mode on ``device``, tokenizer) from a local folder or a hub id.

    A hub id pinned by ``revision=`` or by the hub lock file loads from its snapshot folder in the
    hub cache at that commit, without the network (``models.hub.model_location``). Other
    ``from_pretrained`` options go to both Auto classes' ``from_pretrained`` (e.g.
    ``local_files_only=True``). A tokenizer without a pad token gets EOS as pad (the engines mask
    pads by attention, so the choice only has to be a valid id).
    """
    from replication.models.hub import model_location

    path = model_location(str(path), from_pretrained.pop("revision", None))  # a local folder has no revision
    tokenizer = AutoTokenizer.from_pretrained(str(path), **from_pretrained)
    dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    kwargs = dict(from_pretrained)
    resolved = resolve_dtype(dtype)
    if resolved is not None:
        kwargs[dtype_kw] = resolved
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer
