"""From a config to data, policy and rollout engine (the parts shared by train, eval and SFT)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from replication.config import ConfigError, TrainConfig


@dataclasses.dataclass
class PromptSet:
    """Aligned per-prompt fields of a train pool or a held-out set."""

    name: str
    ids: list
    texts: list[str]
    """What the allocator sees (VIP embeds these)."""
    inputs: list[str]
    """What the model sees (the formatter's output: raw text, or a chat template)."""
    answers: list[str]
    sources: list[str]

    def __len__(self) -> int:
        return len(self.ids)


@dataclasses.dataclass
class TrainData:
    train: PromptSet
    eval_sets: dict[str, PromptSet]
    verify: Callable[[str, str, str], bool]
    """verify(completion, answer, source) → correct; garbage is wrong, never an exception."""
    formatter_name: str
    formatter_options: dict = dataclasses.field(default_factory=dict)
    """E.g. {'system': '...'} for the chat formatter."""


def _from_pool(pool: Any, name: str, field: str = "text") -> PromptSet:
    """``field`` = 'text' (compact "42-25=", what the tiny model reads) or 'question' (the task's
    natural-language question, for chat models)."""
    texts = [getattr(p, field) for p in pool.prompts]
    return PromptSet(name, list(pool.ids), texts, list(texts), list(pool.answers), list(pool.sources))


def build_data(cfg: TrainConfig) -> TrainData:
    """Build prompt pools from ``cfg.task`` (validated; nothing heavy is loaded yet)."""
    opts = dict(cfg.task.options)
    formatter = opts.pop("formatter", "raw")
    fmt_opts = {"system": opts.pop("system_prompt")} if "system_prompt" in opts else {}
    answer_mode = opts.pop("answer", "exact")
    field = opts.pop("prompt_field", "text")
    if field not in ("text", "question"):
        raise ConfigError(f"task.options.prompt_field: 'text' or 'question', got {field!r}")
    if answer_mode not in ("exact", "last-number"):
        raise ConfigError(f"task.options.answer: 'exact' or 'last-number', got {answer_mode!r}")
    if cfg.task.kind == "procedural":
        from replication.tasks import TaskMixSpec, build_tasks, score

        if "heldout_levels" in opts and opts["heldout_levels"] is not None:
            opts["heldout_levels"] = tuple(opts["heldout_levels"])
        try:
            spec = TaskMixSpec(**opts)
        except TypeError as e:
            raise ConfigError(f"task.options: {e}") from None
        except ValueError as e:
            raise ConfigError(f"task.options: {e}") from None
        suite = build_tasks(spec)
        train = _from_pool(suite.train, "train", field)
        evals = {}
        for name, pool in suite.heldout.items():
            if 0 < cfg.eval.prompts_per_set < len(pool):
                pool = pool.subsample(cfg.eval.prompts_per_set, seed=0)
            evals[name] = _from_pool(pool, name, field)

        def verify(completion: str, answer: str, source: str) -> bool:
            if answer_mode == "last-number":  # chat models explain; the reward reads the last number
                completion = last_number(completion)
            return score(completion, answer, source) >= 1.0

        return TrainData(train, evals, verify, formatter, fmt_opts)
    if cfg.task.kind == "math":
        from replication.train.math_data import build_math_data

        return build_math_data(cfg, opts, formatter)
    raise ConfigError(f"task.kind: unknown kind {cfg.task.kind!r}")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_number(text: str) -> str:
    """The last number in ``text`` ("The answer is 17." → "17"); "" when there is none."""
    if not isinstance(text, str):
        return ""
    found = _NUMBER.findall(text[-2000:])
    return found[-1] if found else ""


def load_model(cfg: TrainConfig) -> tuple[torch.nn.Module, Any]:
    from replication.models import load_policy

    path = Path(cfg.model.path)
    if not path.exists() and cfg.model.source != "hub":
        raise FileNotFoundError(
            f"model.path {str(path)!r} does not exist: build it first with `python -m replication "
            f"prepare-model --profile {cfg.profile} --out results/base-model` (or `dvc repro base`)"
        )
    device = cfg.model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("model.device is 'cuda' but no CUDA device is available")
    model, tok = load_policy(str(path), device=device, dtype=cfg.model.dtype)
    return model, tok


def format_inputs(data: TrainData, tokenizer: Any) -> bool:
    """Fill each set's ``inputs`` with the formatter's text; returns add_special_tokens."""
    from replication.models import make_formatter

    fmt = make_formatter(data.formatter_name, tokenizer=tokenizer, **data.formatter_options)
    for s in [data.train, *data.eval_sets.values()]:
        s.inputs = [fmt(t) for t in s.inputs]
    return fmt.add_special_tokens


def build_engine(cfg: TrainConfig, model: torch.nn.Module, tokenizer: Any, add_special_tokens: bool = True) -> Any:
    from replication.rollout.hf_engine import HFRolloutEngine

    return HFRolloutEngine(
        model,
        tokenizer,
        add_special_tokens=add_special_tokens,
        seed=cfg.seed,
        default_max_new_tokens=cfg.rollout.sampling.max_new_tokens,
    )


