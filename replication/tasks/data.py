"""From ``cfg.task`` to prompt sets and their verifier (the data side of train, eval and SFT).

``task.kind: procedural`` — reasoning-gym arithmetic built here (offline, the embedded default).
``task.kind: math`` — hub math datasets (local-path overrides) scored by math-verify; its
``task.options``::

    train: dapo17k                       # registry name (replication.tasks.math_datasets)
    train_path: null                     # local file/folder replacing the hub download
    template: null                       # prompt template (null = the dataset's default)
    eval: [aime24, aime25, math500]      # held-out sets
    eval_paths: {aime24: /data/aime24.parquet}
    eval_template: null
    limit: null                          # keep the first N training problems (smoke runs)
    reward: {extraction: answer_line, time_limit_s: 5}
    formatter: chat                      # how prompts become model input (chat template)

Nothing here imports torch; building data validates options before any model is loaded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from replication.config import ConfigError, TrainConfig, from_dict
from replication.tasks.verify import ProceduralVerifier, Verifier


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
    origins: list[str] | None = None
    """Where each prompt was read (``<file> row <n>``) for error messages; None = generated here."""

    def __len__(self) -> int:
        return len(self.ids)

    def where(self, i: int) -> str:
        """Where prompt ``i`` came from, for an error message."""
        return self.origins[i] if self.origins else f"{self.name} prompt {self.ids[i]!r}"

    def subset(self, keep: list[int] | slice) -> "PromptSet":
        """The prompts at ``keep`` (indices or a slice), every per-prompt field alike."""
        fields = ("ids", "texts", "inputs", "answers", "sources") + (("origins",) if self.origins else ())
        picked = {f: (getattr(self, f)[keep] if isinstance(keep, slice)
                      else [getattr(self, f)[i] for i in keep]) for f in fields}
        return PromptSet(self.name, **picked)

    def head(self, n: int) -> "PromptSet":
        """The first ``n`` prompts."""
        return self.subset(slice(0, n))


@dataclasses.dataclass
class TrainData:
    train: PromptSet
    eval_sets: dict[str, PromptSet]
    verifier: Verifier
    """``verifier.is_correct(completions, answers, sources)`` → bool array; garbage is wrong."""
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
    if cfg.task.kind == "procedural":
        return _procedural_data(cfg, opts, formatter, fmt_opts)
    if cfg.task.kind == "math":
        return _math_data(cfg, opts, formatter)
    raise ConfigError(f"task.kind: unknown kind {cfg.task.kind!r}")


def _procedural_data(cfg: TrainConfig, opts: dict, formatter: str, fmt_opts: dict) -> TrainData:
    from replication.tasks.pools import TaskMixSpec, build_tasks

    answer_mode = opts.pop("answer", "exact")
    field = opts.pop("prompt_field", "text")
    if field not in ("text", "question"):
        raise ConfigError(f"task.options.prompt_field: 'text' or 'question', got {field!r}")
    if answer_mode not in ("exact", "last-number"):
        raise ConfigError(f"task.options.answer: 'exact' or 'last-number', got {answer_mode!r}")
    spec = from_dict(TaskMixSpec, opts, "task.options")
    suite = build_tasks(spec)
    train = _from_pool(suite.train, "train", field)
    evals = {}
    for name, pool in suite.heldout.items():
        if 0 < cfg.eval.prompts_per_set < len(pool):
            pool = pool.subsample(cfg.eval.prompts_per_set, seed=0)
        evals[name] = _from_pool(pool, name, field)
    return TrainData(train, evals, ProceduralVerifier(answer_mode), formatter, fmt_opts)


MATH_OPTIONS = {"train", "train_path", "template", "eval", "eval_paths", "eval_template", "limit", "reward"}
"""The ``task.options`` keys of ``kind: math`` (besides ``formatter``)."""


def _math_data(cfg: TrainConfig, opts: dict, formatter: str) -> TrainData:
    from replication.tasks.math_datasets import MathDatasetConfig, load_math_dataset
    from replication.tasks.math_reward import MathRewardConfig, MathVerifier

    unknown = sorted(set(opts) - MATH_OPTIONS)
    if unknown:
        raise ConfigError(f"task.options.{unknown[0]}: unknown key; allowed: {sorted(MATH_OPTIONS)}")
    if "train" not in opts:
        raise ConfigError("task.options.train: a training dataset name is required for kind: math")
    reward = from_dict(MathRewardConfig, opts.get("reward", {}), "task.options.reward")

    def load(name: str, path: str | None, template: str | None, limit: int | None) -> PromptSet:
        recs = load_math_dataset(MathDatasetConfig(name=name, path=path, template=template, limit=limit))
        # The allocator embeds the bare problem; the model sees the paper's templated prompt.
        return PromptSet(name, [r.id for r in recs], [r.question or r.prompt for r in recs],
                         [r.prompt for r in recs], [r.answer for r in recs], [r.source for r in recs],
                         [r.origin for r in recs])

    train = load(opts["train"], opts.get("train_path"), opts.get("template"), opts.get("limit"))
    evals = {}
    eval_problems: set[str] = set()
    for name in opts.get("eval", []):
        s = load(name, (opts.get("eval_paths") or {}).get(name), opts.get("eval_template"), None)
        if 0 < cfg.eval.prompts_per_set < len(s):
            s = s.head(cfg.eval.prompts_per_set)
        evals[name] = s
        eval_problems |= {_canonical(t) for t in s.texts}
    # Held-out sets must be disjoint from the train pool (AIME problems circulate in training
    # corpora): drop every train problem whose canonical text is an evaluation problem.
    keep = [i for i, t in enumerate(train.texts) if _canonical(t) not in eval_problems]
    if len(keep) < len(train.ids):
        print(f"task: {len(train.ids) - len(keep)} train problems also in an evaluation set were dropped")
        train = train.subset(keep)
    return TrainData(train, evals, MathVerifier(reward), formatter)


def _canonical(text: str) -> str:
    """Whitespace-free, lower-case problem text: the key of the train/held-out disjointness check."""
    return "".join(str(text).split()).lower()
