"""Train pool and held-out sets built from a task mix: which levels, how many prompts of each.

Held-out sets are generated first, from their own seed, so they stay identical whatever the
train pool's size or seed; the train pool then leaves their expressions out wherever the level's
problem space is large enough (``disjoint``). Levels with tiny spaces (1-digit a ± b: 200
problems, 1 × 1: 100) cannot be split: their evaluation set overlaps the train pool, is flagged
``disjoint=False`` in ``TaskSuite.levels`` and is NAMED ``<alias>-indist`` (in-distribution), so
the evaluator leaves it out of the "average" and "pooled" headline rows
(``replication.evaluate.metrics.headline_sets``) and every table shows it under that name.

A large train pool matters: with 256 prompts GRPO memorised the pool and held-out accuracy fell;
with 8,192 it generalised (docs/papers/measurements.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from replication.evaluate.metrics import IN_DISTRIBUTION_SUFFIX
from replication.tasks.procedural import Prompt, generate_level, get_level, split_seed, twin_key, twins

DEFAULT_TRAIN_SIZES = {
    "add1": 200,  # the whole space: p -> 1 after the warm start (upper tail)
    "mul1": 100,  # the whole space (upper tail)
    "add1t3": 1000,
    "mul1t3": 500,  # half the 1,000-problem space; the other half is its held-out set
    "add2": 3000,  # mostly 0.1 < p < 0.9 after the warm start: where RL has signal
    "add2t3": 1500,
    "add3": 1000,  # mostly p < 0.1 (lower tail)
    "mul2": 1000,  # mostly p < 0.1 (lower tail)
}
"""Default train pool (8,300 prompts, graded difficulty); tuned with ``sft.SFTConfig``'s defaults
so the base model's p spreads over (0, 1) with both tails present (see the SFT report)."""


@dataclasses.dataclass(frozen=True)
class TaskMixSpec:
    """Which procedural levels make up the train pool and the held-out sets (see tasks.LEVELS)."""

    train_sizes: dict[str, int] = dataclasses.field(default_factory=lambda: dict(DEFAULT_TRAIN_SIZES))
    """Train-pool prompts per level alias; a level with a smaller problem space gets all of it."""
    heldout_size: int = 500
    """Prompts per held-out set (one set per level, named f"{alias}-heldout"; f"{alias}-indist"
    when the level's space is too small to keep it out of the train pool)."""
    heldout_levels: tuple[str, ...] | None = None
    """Levels that get a held-out set; None = every level of the train mix."""
    seed: int = 0
    """Train-pool seed (change it for a different pool of the same mix)."""
    heldout_seed: int = 20_260_101
    """Held-out seed; fixed apart from ``seed`` so every run is evaluated on the same problems."""

    def __post_init__(self) -> None:
        if not self.train_sizes:
            raise ValueError("task.options.train_sizes: at least one level is needed")
        for alias, n in self.train_sizes.items():
            get_level(alias)
            if int(n) < 1:
                raise ValueError(f"task.options.train_sizes[{alias!r}] = {n}: must be >= 1")
        for alias in self.heldout_levels or ():
            get_level(alias)
        if self.heldout_size < 1:
            raise ValueError(f"task.options.heldout_size = {self.heldout_size}: must be >= 1")


@dataclasses.dataclass(frozen=True)
class TaskPool:
    """An ordered set of prompts with unique ids; per-prompt fields as aligned lists."""

    name: str
    """"train" or a held-out set name ("add2-heldout")."""
    prompts: tuple[Prompt, ...]
    """The prompts, in a fixed order."""

    def __post_init__(self) -> None:
        ids = [p.id for p in self.prompts]
        if len(set(ids)) != len(ids):
            raise ValueError(f"pool {self.name!r}: prompt ids are not unique")
        object.__setattr__(self, "_index", {pid: i for i, pid in enumerate(ids)})

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> Prompt:
        return self.prompts[i]

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.prompts]

    @property
    def texts(self) -> list[str]:
        return [p.text for p in self.prompts]

    @property
    def answers(self) -> list[str]:
        return [p.answer for p in self.prompts]

    @property
    def sources(self) -> list[str]:
        return [p.source for p in self.prompts]

    @property
    def levels(self) -> list[str]:
        return [p.level for p in self.prompts]

    def by_id(self, prompt_id: str) -> Prompt:
        return self.prompts[self._index[prompt_id]]  # type: ignore[attr-defined]

    def select(self, prompt_ids: Sequence[str]) -> list[Prompt]:
        """Prompts for the given ids, in that order (KeyError on an unknown id)."""
        return [self.prompts[self._index[pid]] for pid in prompt_ids]  # type: ignore[attr-defined]

    def subsample(self, n: int, seed: int) -> "TaskPool":
        """A seeded random subset of min(n, len) prompts, kept in pool order."""
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(self), size=min(n, len(self)), replace=False))
        return TaskPool(f"{self.name}-sub{len(keep)}", tuple(self.prompts[i] for i in keep))

    def to_prompt_pool(self):
        """The allocator's view of this pool (ids and texts only)."""
        from replication.allocation.base import PromptPool

        return PromptPool(ids=tuple(self.ids), texts=tuple(self.texts))


@dataclasses.dataclass(frozen=True)
class LevelInfo:
    """How one level was split, for reports."""

    alias: str
    key: str
    space_size: int
    train: int
    heldout: int
    disjoint: bool
    """True when the held-out set shares no expression with the train pool."""


@dataclasses.dataclass(frozen=True)
class TaskSuite:
    """Everything a run trains and evaluates on."""

    train: TaskPool
    heldout: dict[str, TaskPool]
    levels: dict[str, LevelInfo]

    def reserved_texts(self, alias: str) -> set[str]:
        """Expressions of ``alias`` that a warm start should not see, with their twins (the same
        terms in another order): its held-out set (when it is disjoint) and its train-pool prompts
        (when the space has room beyond them)."""
        info = self.levels[alias]
        reserved: set[str] = set()
        if info.disjoint:
            name = heldout_name(alias, True)
            if name in self.heldout:
                reserved |= set().union(*(twins(t) for t in self.heldout[name].texts))
            if info.space_size >= 2 * (info.train + info.heldout):
                reserved |= set().union(*(twins(p.text) for p in self.train.prompts if p.level == alias))
        return reserved


def heldout_name(alias: str, disjoint: bool) -> str:
    """Evaluation-set name of a level: "<alias>-heldout" if disjoint from training, else
    "<alias>-indist" (in-distribution: out of the average/pooled rows)."""
    return f"{alias}-heldout" if disjoint else f"{alias}{IN_DISTRIBUTION_SUFFIX}"


def canonical(text: str) -> str:
    """Canonical problem text for overlap checks: whitespace removed, lower case ("42 - 25 =" and
    "42-25=" are the same problem)."""
    return "".join(str(text).split()).lower()


def overlap(suite: "TaskSuite", name: str) -> set[str]:
    """Problems of evaluation set ``name`` with a twin in the train pool: the same text, or the same
    signed terms in another order (``twin_key``; issue 20.7)."""
    train = {twin_key(canonical(p.text)) for p in suite.train.prompts}
    return {p.text for p in suite.heldout[name].prompts if twin_key(canonical(p.text)) in train}


def twin_overlap(heldout_texts, texts) -> int:
    """How many held-out problems have a twin (``twin_key``) among ``texts`` (e.g. the SFT corpus)."""
    keys = {twin_key(canonical(t)) for t in texts}
    return sum(twin_key(canonical(t)) in keys for t in heldout_texts)


def build_tasks(spec: TaskMixSpec) -> TaskSuite:
    """Build the train pool and held-out sets of ``spec`` (deterministic in ``spec``)."""
    heldout_aliases = list(spec.heldout_levels) if spec.heldout_levels is not None else list(spec.train_sizes)
    all_aliases = list(dict.fromkeys([*spec.train_sizes, *heldout_aliases]))
    train: list[Prompt] = []
    heldout: dict[str, TaskPool] = {}
    infos: dict[str, LevelInfo] = {}
    for alias in all_aliases:
        level = get_level(alias)
        n_train = int(spec.train_sizes.get(alias, 0))
        held: list[Prompt] = []
        if alias in heldout_aliases:
            held = generate_level(level, split_seed(spec.heldout_seed, level, "heldout"), spec.heldout_size, "heldout")
        # Keep held-out problems — and their twins, the same terms in another order (issue 20.7) —
        # out of training only where that leaves a full train share.
        held_twins = set().union(*(twins(p.text) for p in held)) if held else set()
        disjoint = level.space_size - len(held_twins) >= n_train
        if held:
            name = heldout_name(alias, disjoint or not n_train)
            heldout[name] = TaskPool(name, tuple(held))
        if n_train:
            exclude = held_twins if disjoint else set()
            train += generate_level(level, split_seed(spec.seed, level, "train"), n_train, "train", exclude)
        n_got = sum(p.level == alias for p in train)
        infos[alias] = LevelInfo(alias, level.key, level.space_size, n_got, len(held), disjoint or not held)
    return TaskSuite(TaskPool("train", tuple(train)), heldout, infos)
