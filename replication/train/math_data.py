"""Paper-scale data: hub math datasets (local-path overrides) and the math-verify reward.

``task.options`` of a ``kind: math`` profile:
    train: dapo17k                       # registry name (replication.tasks.math_datasets)
    train_path: null                     # local file/folder replacing the hub download
    template: null                       # prompt template (null = the dataset's default)
    eval: [aime24, aime25, math500]      # held-out sets
    eval_paths: {aime24: /data/aime24.parquet}
    eval_template: null
    limit: null                          # keep the first N training problems (smoke runs)
    reward: {style: pm1, extraction: answer_line, time_limit_s: 5}
    formatter: chat                      # how prompts become model input (chat template)
"""

from __future__ import annotations

from typing import Any

from replication.config import ConfigError, TrainConfig

KNOWN = {"train", "train_path", "template", "eval", "eval_paths", "eval_template", "limit", "reward"}


def build_math_data(cfg: TrainConfig, opts: dict, formatter: str) -> Any:
    from replication.tasks.math_datasets import MathDatasetConfig, load_math_dataset
    from replication.tasks.math_reward import MathRewardConfig, MathVerifier
    from replication.train.setup import PromptSet, TrainData

    unknown = sorted(set(opts) - KNOWN)
    if unknown:
        raise ConfigError(f"task.options.{unknown[0]}: unknown key; allowed: {sorted(KNOWN)}")
    if "train" not in opts:
        raise ConfigError("task.options.train: a training dataset name is required for kind: math")
    try:
        reward = MathRewardConfig(**opts.get("reward", {}))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"task.options.reward: {e}") from None

    def load(name: str, path: str | None, template: str | None, limit: int | None) -> PromptSet:
        recs = load_math_dataset(MathDatasetConfig(name=name, path=path, template=template, limit=limit))
        # The allocator embeds the bare problem; the model sees the paper's templated prompt.
        return PromptSet(name, [r.id for r in recs], [r.question or r.prompt for r in recs],
                         [r.prompt for r in recs], [r.answer for r in recs], [r.source for r in recs])

    train = load(opts["train"], opts.get("train_path"), opts.get("template"), opts.get("limit"))
    evals = {}
    for name in opts.get("eval", []):
        s = load(name, (opts.get("eval_paths") or {}).get(name), opts.get("eval_template"), None)
        if 0 < cfg.eval.prompts_per_set < len(s):
            keep = slice(0, cfg.eval.prompts_per_set)
            s = PromptSet(s.name, s.ids[keep], s.texts[keep], s.inputs[keep], s.answers[keep], s.sources[keep])
        evals[name] = s
    verifier = MathVerifier(reward)
    return TrainData(train, evals, verifier, formatter)
