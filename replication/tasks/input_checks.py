"""A run's prompts checked against its configuration and model before any weights are loaded
(issue 18.8): every refusal is one line naming the problem (CLI exit 2).

- The train pool holds at least a step's prompts (a step never repeats a prompt; the sampler
  would fail at the first step, after the model load and the first evaluation).
- Every prompt fits the model's context: its token length (with the formatter the run uses)
  against ``max_position_embeddings`` — or vLLM's ``max_model_len`` when smaller. Only the
  tokenizer and the model's config file are read, not the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replication.config import ConfigError, TrainConfig
from replication.tasks.data import PromptSet, TrainData
from replication.tasks.data_errors import DataError


def check_run_inputs(cfg: TrainConfig, data: TrainData) -> None:
    """Both checks below; called by the trainer between building the data and loading the model."""
    check_train_pool(cfg, len(data.train))
    check_prompt_context(cfg, data)


def check_train_pool(cfg: TrainConfig, pool_size: int) -> None:
    q = cfg.rollout.prompts_per_step
    if q > pool_size:
        raise ConfigError(f"rollout.prompts_per_step={q} exceeds the train pool of {pool_size} prompts "
                          f"({_pool_source(cfg)}); a step draws distinct prompts: lower it or enlarge "
                          f"the pool")


def plan_pool_size(cfg: TrainConfig) -> int | None:
    """The train pool's size as far as it is known without loading a model or downloading: built
    for procedural tasks (a fraction of a second), ``task.options.limit`` as an upper bound for
    hub datasets, else None."""
    if cfg.task.kind == "procedural":
        from replication.tasks.data import build_data

        return len(build_data(cfg).train)
    limit = cfg.task.options.get("limit")
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None


def _pool_source(cfg: TrainConfig) -> str:
    if cfg.task.kind == "math":
        opts = cfg.task.options
        return f"task.options.train={opts.get('train')!r}" + (
            f", task.options.limit={opts['limit']}" if opts.get("limit") is not None else "")
    return "task.options.train_sizes"


def model_context(cfg: TrainConfig) -> tuple[int, str] | None:
    """(token limit of one prompt + completion, what sets it), from the model's config file;
    None when the model's folder is missing (``load_model`` reports that) or says nothing."""
    path = Path(cfg.model.path)
    if not path.exists() and cfg.model.source != "hub":
        return None
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(str(path)), "max_position_embeddings", None)
    if not isinstance(limit, int):
        return None
    source = f"max_position_embeddings={limit} of {path}"
    vllm_len = cfg.rollout.vllm.max_model_len
    if cfg.rollout.engine == "vllm" and vllm_len is not None and vllm_len < limit:
        limit, source = vllm_len, f"rollout.vllm.max_model_len={vllm_len}"
    return limit, source


def check_prompt_context(cfg: TrainConfig, data: TrainData) -> None:
    """Refuse a prompt whose tokens fill the model's context (no room for a completion), naming
    its file and row (or its id), its length and the limit. vLLM's ``max_prompt_tokens`` keeps a
    long prompt's last tokens, so with it set the engine's truncation decides instead."""
    if cfg.rollout.engine == "vllm" and cfg.rollout.vllm.max_prompt_tokens is not None:
        return
    context = model_context(cfg)
    if context is None:
        return
    limit, source = context
    from transformers import AutoTokenizer

    from replication.models import make_formatter

    tokenizer = AutoTokenizer.from_pretrained(str(cfg.model.path))
    fmt = make_formatter(data.formatter_name, tokenizer=tokenizer, **data.formatter_options)
    for prompts in [data.train, *data.eval_sets.values()]:
        _check_set(prompts, [fmt(t) for t in prompts.inputs], tokenizer, fmt.add_special_tokens,
                   limit, source)


def _check_set(prompts: PromptSet, texts: list[str], tokenizer: Any, add_special_tokens: bool,
               limit: int, source: str) -> None:
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]]
    too_long = [i for i, n in enumerate(lengths) if n >= limit]
    if too_long:
        i = too_long[0]
        more = f" ({len(too_long) - 1} more prompts too long)" if len(too_long) > 1 else ""
        raise DataError(f"{prompts.where(i)}: prompt {prompts.ids[i]!r} is {lengths[i]} tokens, which "
                        f"leaves no room for a completion in the model's context ({source}){more}")
