"""Online difficulty classifier of GDRO (docs/papers/gdro.md, "Online difficulty classifier").

After every step each prompt that was rolled out gets an indicator c(x) = 1 if ANY of its
rollouts at that step was correct. The prompt's difficulty estimate is the mean of c over its
last H visits, and the estimate is cut into B bins by the edges 1/B, 2/B, ..., (B-1)/B
(paper: B = 10, edges 0.1 ... 0.9). Bin 0 holds the LOWEST pass rates.

Naming caveat: the paper's prose calls the high-index bins "hard" although they hold prompts
with high any-correct rates; it means the learnable frontier, not low pass rates. Nothing here
assumes which bins an adversary will favour — the bin index is simply the pass-rate rank.

Everything is keyed by prompt id. The official code applied the previous step's labels by batch
position to a reshuffled batch (gdro.md, code caveats); a classifier keyed by id cannot do that.

Official-code options (kishanpb/verl-gdro, verl/trainer/group_dro_grpo.py, PassKOnlineClassifier;
docs/fidelity/gdro.md #11a): custom ``edges`` (its ``passk_edges``), ``exclude_extremes`` (an
estimate of exactly 0 or 1 goes to one extra class, index ``n_bins - 1``, which the weighter
treats like any other class) and ``hysteresis_rule="code"`` (its boundary test).
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from replication.allocation.base import successes_per_prompt

UNSEEN_POLICIES = ("prior_bin", "zero_score")
HYSTERESIS_RULES = ("nearest", "code")


@dataclasses.dataclass
class DifficultyConfig:
    n_bins: int = 10
    """B, number of classes the classifier hands out; without ``edges`` the pass-rate bins have
    edges k/B' for k = 1..B'-1, B' = B - [exclude_extremes] (paper: 10 bins, edges 0.1..0.9)."""
    edges: list[float] | None = None
    """Upper edges of the pass-rate bins, strictly increasing inside (0, 1); an estimate on an
    edge belongs to the upper bin (code: ``acc < edge``). None = k/B'. Not in the paper; the
    official code's ``passk_edges`` (e.g. 0.01,0.2,0.4,0.6,0.8,0.99: 7 bins). ``n_bins`` must
    then be len(edges) + 1 + [exclude_extremes]."""
    exclude_extremes: bool = False
    """Send an estimate of exactly 0 or exactly 1 (an unseen prompt under 'zero_score' too) to
    one extra class, the last index ``n_bins - 1``, outside the pass-rate order; the weighter
    gives it its own score and weight and the code's focus map never names it. Not in the paper;
    official code ``passk_exclude_extremes`` (its 3-bin and softf run cases)."""
    window: int | None = None
    """H, visits per prompt in the moving mean; None = cumulative mean over all visits. The paper
    gives no H; the official code uses 50 or 100, which with ~18 visits per prompt over a paper
    run (1000 steps x 256 prompts / 14.1k prompts) is effectively cumulative — hence the default."""
    hysteresis: float = 0.0
    """δ: a prompt leaves its bin only after its estimate crosses the bin boundary by δ.
    Paper: none (0). Official code: 0.03."""
    hysteresis_rule: str = "nearest"
    """Which boundary δ is measured from. 'nearest': every crossed boundary counts, the prompt
    lands in the bin above (below) the farthest one crossed by δ. 'code' (official code, custom
    edges): moving up it must pass the FIRST boundary above its bin by δ and then lands in the
    raw bin; moving down it must be δ below the boundary just above the raw bin, else it stays.
    The two agree on moves to a neighbouring bin."""
    unseen: str = "prior_bin"
    """Bin of a prompt with no history. 'prior_bin' (paper: the mean over the available history
    is undefined without history, so a prior bin is used) or 'zero_score' (official code: an
    unseen prompt scores 0, i.e. lands in bin 0)."""
    prior_bin: int | None = None
    """Bin for unseen prompts under 'prior_bin'; None = B // 2 (the bin holding 0.5, the
    uninformed prior's mean). The paper does not say."""

    def validate(self) -> None:
        if isinstance(self.n_bins, bool) or int(self.n_bins) != self.n_bins or self.n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {self.n_bins!r}")
        if self.window is not None and (int(self.window) != self.window or self.window < 1):
            raise ValueError(f"window must be an integer >= 1 or None, got {self.window!r}")
        if not 0.0 <= float(self.hysteresis) < 1.0:
            raise ValueError(f"hysteresis must be in [0, 1), got {self.hysteresis!r}")
        if self.unseen not in UNSEEN_POLICIES:
            raise ValueError(f"unseen must be one of {UNSEEN_POLICIES}, got {self.unseen!r}")
        if self.prior_bin is not None and not 0 <= int(self.prior_bin) < int(self.n_bins):
            raise ValueError(f"prior_bin must be in [0, n_bins-1={int(self.n_bins) - 1}], got {self.prior_bin!r}")
        if self.hysteresis_rule not in HYSTERESIS_RULES:
            raise ValueError(f"hysteresis_rule must be one of {HYSTERESIS_RULES}, got {self.hysteresis_rule!r}")
        if not isinstance(self.exclude_extremes, bool):
            raise ValueError(f"exclude_extremes must be true or false, got {self.exclude_extremes!r}")
        extra = int(self.exclude_extremes)
        if self.edges is None:
            if int(self.n_bins) - extra < 1:
                raise ValueError(f"n_bins must be >= 2 with exclude_extremes, got {self.n_bins!r}")
            return
        try:
            e = [float(x) for x in self.edges]
        except (TypeError, ValueError):
            raise ValueError(f"edges must be a list of numbers, got {self.edges!r}") from None
        if not e or not all(0.0 < x < 1.0 for x in e) or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(f"edges must be strictly increasing numbers inside (0, 1), got {self.edges!r}")
        if int(self.n_bins) != len(e) + 1 + extra:
            raise ValueError(f"n_bins must be len(edges) + 1{' + 1 (exclude_extremes)' if extra else ''}"
                             f" = {len(e) + 1 + extra} for edges {e}, got {self.n_bins!r}")


def any_correct(counts: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """c(x) per prompt from the flat reward layout np.repeat(ids, counts); success = reward > 0."""
    return successes_per_prompt(np.asarray(counts, dtype=np.int64), np.asarray(rewards)) > 0


class DifficultyClassifier:
    """Per-prompt moving any-correct rate and its (sticky, optionally hysteretic) bin."""

    def __init__(self, config: DifficultyConfig | None = None, **options: Any) -> None:
        if config is None:
            config = DifficultyConfig(**options)
        elif options:
            raise ValueError("pass either config= or keyword options, not both")
        config.validate()
        self.config = config
        b = int(config.n_bins)
        self.n_bins = b
        ranked = b - int(config.exclude_extremes)
        self.edges = np.arange(1, ranked) / ranked if config.edges is None else np.asarray(config.edges, dtype=np.float64)
        # Cumulative mode keeps [hits, visits]; windowed mode keeps the last H indicators.
        self._hist: dict[Hashable, Any] = {}
        self._bin: dict[Hashable, int] = {}
        # Last pass-rate bin (never the excluded class): what hysteresis is measured from, also
        # after a stay in the excluded class (the code keeps its _last_bin through it).
        self._ranked: dict[Hashable, int] = {}

    @property
    def excluded_bin(self) -> int | None:
        """Index of the class of estimates exactly 0 or 1 under ``exclude_extremes``, else None."""
        return self.n_bins - 1 if self.config.exclude_extremes else None

    # ----------------------------------------------------------------- queries
    @property
    def unseen_bin(self) -> int:
        if self.config.unseen == "zero_score":
            # the code scores an unseen prompt 0, which exclude_extremes sends to the extra class
            return 0 if self.excluded_bin is None else self.excluded_bin
        pb = self.config.prior_bin
        return self.n_bins // 2 if pb is None else int(pb)

    def bin_of_score(self, score: float) -> int:
        """Raw bin of an estimate (no hysteresis); a score on an edge belongs to the upper bin."""
        # Rounding keeps k/m estimates that equal an edge (e.g. 3/10) on the documented side.
        return int(np.searchsorted(self.edges, round(float(score), 12), side="right"))

    def score(self, prompt_id: Hashable) -> float:
        """Moving any-correct rate; NaN for a prompt never observed."""
        h = self._hist.get(prompt_id)
        if h is None:
            return float("nan")
        if self.config.window is None:
            return h[0] / h[1]
        return sum(h) / len(h)

    def scores(self, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        return np.array([self.score(i) for i in prompt_ids], dtype=np.float64)

    def bins(self, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        """Current bin of each id (int64); unseen ids get ``unseen_bin``."""
        unseen = self.unseen_bin
        return np.array([self._bin.get(i, unseen) for i in prompt_ids], dtype=np.int64)

    def __contains__(self, prompt_id: Hashable) -> bool:
        return prompt_id in self._hist

    def __len__(self) -> int:
        return len(self._hist)

    # ----------------------------------------------------------------- learning
    def update(self, prompt_ids: Sequence[Hashable], any_correct: Sequence[bool]) -> None:
        """Record one step's c(x) for each id (ids unique within the call)."""
        ids = list(prompt_ids)
        c = np.asarray(any_correct).reshape(-1)
        if c.shape[0] != len(ids):
            raise ValueError(f"any_correct has {c.shape[0]} entries for {len(ids)} prompt ids")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate prompt id in one update; ids must be unique per step")
        for pid, hit in zip(ids, c.astype(bool).tolist()):
            self._record(pid, int(hit))
            score = self.score(pid)
            if self.excluded_bin is not None and score in (0.0, 1.0):
                self._bin[pid] = self.excluded_bin  # the ranked bin is kept for hysteresis
                continue
            self._bin[pid] = self._ranked[pid] = self._next_bin(pid, score)

    def _record(self, pid: Hashable, hit: int) -> None:
        h = self._hist.get(pid)
        if self.config.window is None:
            if h is None:
                h = self._hist[pid] = [0, 0]
            h[0] += hit
            h[1] += 1
        else:
            if h is None:
                h = self._hist[pid] = deque(maxlen=int(self.config.window))
            h.append(hit)

    def _next_bin(self, pid: Hashable, score: float) -> int:
        raw = self.bin_of_score(score)
        old = self._ranked.get(pid)
        delta = float(self.config.hysteresis)
        code = self.config.hysteresis_rule == "code"
        if old is None and code and self.config.unseen == "zero_score" and self.excluded_bin is None:
            old = 0  # the code's classify of the unseen prompt stored bin 0 as its last bin
        # Otherwise the first labelled visit takes the raw bin under both unseen policies: the
        # unseen bin is a placeholder, not evidence the estimate must overcome.
        if old is None or delta == 0.0 or raw == old:
            return raw
        if code:
            # group_dro_grpo.py PassKOnlineClassifier.classify: boundary = edges[min(prev, raw)]
            edge = float(self.edges[min(old, raw)])
            s = round(float(score), 12)
            if raw > old:
                return raw if s >= round(edge + delta, 12) else old
            return raw if s <= round(edge - delta, 12) else old
        # Moving up, only boundaries e with score >= e + δ count as crossed; the landing bin is
        # the one above the highest such boundary (= raw bin of score − δ). Symmetric downwards.
        if raw > old:
            return max(old, self.bin_of_score(score - delta))
        return min(old, self.bin_of_score(score + delta))

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        # Lists of (id, ...) pairs, not dicts: ids may be ints and JSON would stringify keys.
        return {
            "config": dataclasses.asdict(self.config),
            "history": [(pid, list(h)) for pid, h in self._hist.items()],
            "bin": [(pid, b) for pid, b in self._bin.items()],
            "ranked": [(pid, b) for pid, b in self._ranked.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # Through JSON on both sides: edges given as a tuple come back as a list.
        if json.loads(json.dumps(dict(state["config"]))) != json.loads(json.dumps(dataclasses.asdict(self.config))):
            raise ValueError("classifier state was saved under a different DifficultyConfig")
        self._hist = {}
        for pid, h in state["history"]:
            pid = _hashable(pid)
            self._hist[pid] = list(h) if self.config.window is None else deque(h, maxlen=int(self.config.window))
        self._bin = {_hashable(pid): int(b) for pid, b in state["bin"]}
        # States saved before the excluded class existed: every bin was a ranked bin.
        self._ranked = {_hashable(pid): int(b) for pid, b in state.get("ranked", state["bin"])}


def _hashable(pid: Any) -> Hashable:
    # A JSON round trip turns tuple ids into lists.
    return tuple(pid) if isinstance(pid, list) else pid


def classifier_config_from(config: Any) -> DifficultyConfig:
    """The DifficultyConfig fields of an allocator config that inherits from DifficultyConfig."""
    return DifficultyConfig(**{f.name: getattr(config, f.name) for f in dataclasses.fields(DifficultyConfig)})
