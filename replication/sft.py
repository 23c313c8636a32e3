"""Supervised warm start of the tiny policy: "prompt=answer<eos>", loss on the answer tokens.

    python -m replication sft --profile default --out results/base-model          # full
    python -m replication sft --profile default --out /tmp/smoke --steps 20        # ~20 s smoke

RL with verifiable rewards only learns from prompts the policy sometimes solves and sometimes
fails (p in (0, 1)); a randomly initialised model solves nothing. The warm start is stopped
early on purpose: the goal is not accuracy but a spread of per-prompt success probabilities
over the train pool, with both tails present (allocators must find the all-fail and all-pass
prompts) and a large middle (where rollouts buy gradient). ``SFTConfig``'s defaults, with the
default task mix (``tasks.DEFAULT_TRAIN_SIZES``), were tuned for that; measured on 2 shared CPU
cores (2,000 steps, ~3 min), p over 512 train-pool prompts x 16 samples, three seeds:

    seed   p<0.05   0.05-0.1   0.1<p<0.9   0.9-0.95   p>0.95   held-out add2 mean@8
    0      22.7 %    8.8 %      55.7 %      5.1 %      7.8 %    0.64
    1      26.6 %   12.3 %      48.6 %      5.9 %      6.6 %    0.57
    2      29.3 %   10.6 %      49.0 %      5.3 %      5.9 %    0.55

The warm start never sees the held-out expressions, nor the RL train pool's where the level's
problem space has room (``TaskSuite.reserved_texts``), so train-pool p measures generalisation
just as held-out accuracy does.

Outputs in ``out_dir``: an HF folder (config, weights, tokenizer) that ``load_policy`` and
``AutoModelForCausalLM.from_pretrained`` load, and ``sft_report.json`` with the train-pool p
histogram, per-level mean p and held-out mean@k / pass@k / greedy accuracy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from replication.models import TinyModelConfig, build_char_tokenizer, build_tiny_model, count_parameters, save_policy
from replication.rollout.base import SamplingConfig
from replication.rollout.hf_engine import HFRolloutEngine
from replication.store import staged_files, write_atomic
from replication.tasks import TaskMixSpec, TaskSuite, build_tasks, generate_level, get_level, score_batch
from replication.tasks.procedural import split_seed
from replication.tasks.pools import twin_overlap

from replication.config.sft_section import DEFAULT_SFT_MIX, SFTConfig  # noqa: F401  (the sft: section)

P_BIN_NAMES = ("<0.05", "0.05-0.1", "0.1-0.9", "0.9-0.95", ">0.95")
"""Histogram bins of per-prompt success probability p (``p_histogram``)."""


# ---------------------------------------------------------------------------- data


@dataclasses.dataclass
class Corpus:
    """Tokenised SFT examples: right-padded ids, labels (-100 off the answer), sampling weights."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    row_prob: np.ndarray
    sizes: dict
    texts: list = dataclasses.field(default_factory=list)
    """The corpus's problem texts (for the held-out overlap line of the report)."""


def build_corpus(cfg: SFTConfig, suite: TaskSuite, tokenizer) -> Corpus:
    rows, levels, sizes, texts = [], [], {}, []
    for alias, weight in cfg.mix.items():
        if float(weight) <= 0:
            continue
        level = get_level(alias)
        reserved = suite.reserved_texts(alias) if alias in suite.levels else set()
        items = generate_level(level, split_seed(cfg.seed, level, "sft"), cfg.corpus_per_level, "sft", reserved)
        sizes[alias] = len(items)
        texts += [p.text for p in items]
        prompts = tokenizer([p.text for p in items])["input_ids"]  # <bos> + characters
        answers = tokenizer([p.answer for p in items], add_special_tokens=False)["input_ids"]
        rows += [(q, a + [tokenizer.eos_token_id]) for q, a in zip(prompts, answers)]
        levels += [alias] * len(items)
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        ids[i, : len(p) + len(a)] = torch.as_tensor(p + a)
        labels[i, len(p) : len(p) + len(a)] = torch.as_tensor(a)
        mask[i, : len(p) + len(a)] = 1
    # Each level gets its mix share of every batch, split evenly over its examples.
    total = sum(float(cfg.mix[a]) for a in sizes)
    row_prob = np.array([float(cfg.mix[a]) / total / sizes[a] for a in levels])
    return Corpus(ids, mask, labels, row_prob / row_prob.sum(), sizes, texts)


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr_min`` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    t = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * t))


# ---------------------------------------------------------------------------- probing


def success_counts(engine: HFRolloutEngine, prompts: list, k: int, sampling: SamplingConfig, generator, chunk: int = 128) -> np.ndarray:
    """Successes out of ``k`` sampled completions for each ``tasks.Prompt`` (binary verifier)."""
    out = []
    for lo in range(0, len(prompts), chunk):
        part = prompts[lo : lo + chunk]
        counts = np.full(len(part), k, dtype=np.int64)
        batch = engine.generate([p.id for p in part], [p.text for p in part], [p.answer for p in part], counts, sampling, generator)
        sources = batch.repeat_rows([p.source for p in part], counts)
        ok = score_batch(batch.completions, batch.row_answers, sources)
        out.append(np.bincount(batch.group_index, weights=ok, minlength=len(part)))
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def p_histogram(p: np.ndarray) -> dict:
    """Fractions of prompts with p < 0.05, 0.05 <= p <= 0.1, 0.1 < p < 0.9, 0.9 <= p <= 0.95, p > 0.95."""
    p = np.asarray(p, dtype=float)
    which = np.select([p < 0.05, p <= 0.1, p < 0.9, p <= 0.95], [0, 1, 2, 3], default=4)
    frac = np.bincount(which, minlength=len(P_BIN_NAMES)) / max(len(p), 1)
    return {name: round(float(f), 4) for name, f in zip(P_BIN_NAMES, frac)}


def probe(engine: HFRolloutEngine, suite: TaskSuite, cfg: SFTConfig, seed: int) -> dict:
    """Train-pool p histogram (overall and per level) and held-out mean@k / pass@k / greedy."""
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=cfg.max_new_tokens)
    greedy = SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=cfg.max_new_tokens)
    gen = torch.Generator().manual_seed(seed)
    sub = suite.train.subsample(cfg.probe_prompts, seed)
    succ = success_counts(engine, list(sub.prompts), cfg.probe_samples, sampling, gen)
    p = succ / cfg.probe_samples
    levels = np.array(sub.levels)
    per_level = {
        a: {"n": int((levels == a).sum()), "mean_p": round(float(p[levels == a].mean()), 4), "hist": p_histogram(p[levels == a])}
        for a in dict.fromkeys(sub.levels)
    }
    heldout = {}
    for name, pool in suite.heldout.items():
        prompts = list(pool.prompts[: cfg.eval_prompts] if cfg.eval_prompts else pool.prompts)
        s = success_counts(engine, prompts, cfg.eval_k, sampling, gen)
        g = success_counts(engine, prompts, 1, greedy, gen)
        heldout[name] = {
            f"mean@{cfg.eval_k}": round(float(np.mean(s / cfg.eval_k)), 4),
            f"pass@{cfg.eval_k}": round(float(np.mean(s > 0)), 4),
            "greedy": round(float(np.mean(g)), 4),
            "n_prompts": len(prompts),
        }
    key = f"mean@{cfg.eval_k}"
    return {
        "train_pool": {"n_prompts": len(sub), "samples": cfg.probe_samples, "hist": p_histogram(p), "mean_p": round(float(p.mean()), 4)},
        "per_level": per_level,
        "heldout": heldout,
        "heldout_average": {key: round(float(np.mean([h[key] for h in heldout.values()])), 4) if heldout else None},
    }


# ---------------------------------------------------------------------------- training


def run_sft(cfg: SFTConfig, out_dir: str | Path, tasks: TaskMixSpec | None = None, progress: bool = True) -> dict:
    """Train the tiny model, save it (HF folder) and its report to ``out_dir``; return the report."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    tasks = tasks or TaskMixSpec()
    suite = build_tasks(tasks)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(dataclasses.replace(cfg.model, init_seed=cfg.seed), tokenizer)
    corpus = build_corpus(cfg, suite, tokenizer)
    rng = np.random.default_rng([cfg.seed, 7])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    engine = HFRolloutEngine(model, tokenizer, default_max_new_tokens=cfg.max_new_tokens)
    trajectory, losses = [], []
    t_train = time.perf_counter()
    model.train()
    bar = tqdm(range(cfg.steps), desc="sft", disable=not progress, mininterval=2.0)
    for step in bar:
        idx = torch.as_tensor(rng.choice(len(corpus.row_prob), size=cfg.batch_size, p=corpus.row_prob))
        mask = corpus.attention_mask[idx]
        width = int(mask.sum(1).max())  # trim the batch to its longest example
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        out = model(input_ids=corpus.input_ids[idx, :width], attention_mask=mask[:, :width], labels=corpus.labels[idx, :width])
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(out.loss.detach()))
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if cfg.probe_every and (step + 1) % cfg.probe_every == 0 and step + 1 < cfg.steps:
            snap = probe(engine, suite, cfg, cfg.seed + 1)
            trajectory.append({"step": step + 1, "loss": round(float(np.mean(losses[-50:])), 4), **snap})
            model.train()
    train_seconds = time.perf_counter() - t_train
    model.eval()
    with staged_files(out_dir) as tmp:  # each file renamed in whole: no half-written weights
        save_policy(model, tokenizer, tmp, out_dir)
    t_probe = time.perf_counter()
    final = probe(engine, suite, cfg, cfg.seed + 1)
    report = {
        "config": _jsonable(dataclasses.asdict(cfg)),
        "tasks": _jsonable(dataclasses.asdict(tasks)),
        "levels": {a: dataclasses.asdict(i) for a, i in suite.levels.items()},
        "corpus_sizes": corpus.sizes,
        # held-out problems with a twin (same signed terms, any order) in the SFT corpus: its own line
        # (issue 20.7); the disjoint sets' twins are reserved, so those sets should read 0
        "heldout_twins_in_sft_corpus": {name: twin_overlap(pool.texts, corpus.texts)
                                        for name, pool in suite.heldout.items()},
        "parameters": count_parameters(model),
        "final_loss": round(float(np.mean(losses[-50:])), 4),
        "train_seconds": round(train_seconds, 1),
        "probe_seconds": round(time.perf_counter() - t_probe, 1),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        **final,
        "trajectory": trajectory,
    }
    write_atomic(out_dir / "sft_report.json", json.dumps(report, indent=1))
    return report


def run_sft_from_profile(train_cfg: Any, out_dir: str | Path, steps: int | None = None, seed: int | None = None, progress: bool = True) -> dict:
    """CLI entry: SFT options from the profile's ``sft:`` section; the task mix from
    ``sft.task_options`` when given (the warm start may see a wider mix than RL trains on; the
    default profile: docs/regime.md), else from ``task.options``."""
    from replication.config import ConfigError

    try:
        options = dict(train_cfg.sft)
        task_options = options.pop("task_options", None)
        if isinstance(options.get("model"), dict):
            options["model"] = TinyModelConfig(**options["model"])
        cfg = SFTConfig(**options)
        tasks = TaskMixSpec(**dict(train_cfg.task.options if task_options is None else task_options))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"sft / task.options: {e}") from e
    if steps is not None:
        cfg = dataclasses.replace(cfg, steps=steps)
    if seed is not None:
        cfg = dataclasses.replace(cfg, seed=seed)
    return run_sft(cfg, out_dir, tasks, progress=progress)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x
