"""Per-prompt success-probability predictors behind one interface (VIP and its ablations).

Every predictor works on pool row indices (the allocator maps prompt ids to rows):
``predict(idx) -> p`` in [0, 1], ``observe(idx, successes, counts)`` after a step (prompts with
zero rollouts carry no information and are skipped), ``state_dict`` / ``load_state_dict``.

- ``"gp"``: the paper's recursive GP on prompt embeddings (gp.py).
- ``"ridge"``: ridge regression of logit p̂ on embeddings — the paper's "Ridge + VIP allocation"
  ablation (Table 3). Exact recursive least squares: sufficient statistics are accumulated, so
  the fit equals a refit on every observation so far (optionally down-weighting old steps).
- ``"moving-average"``: per-prompt exponential moving average of p̂, the history baseline of the
  paper's predictor comparison (Fig. 3); unseen prompts get the mean of what has been seen.

Built by name: ``make_predictor("ridge", embeddings=E, alpha=1.0)``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from scipy.special import expit, logit

from replication.registry import Registry

PREDICTORS: Registry[type["SuccessPredictor"]] = Registry("predictor")


def register_predictor(name: str) -> Callable[[type["SuccessPredictor"]], type["SuccessPredictor"]]:
    def deco(cls: type["SuccessPredictor"]) -> type["SuccessPredictor"]:
        PREDICTORS.register(name, cls)
        cls.name = name
        return cls

    return deco


def make_predictor(
    name: str, *, embeddings: np.ndarray | None = None, n_pool: int | None = None, **opts: Any
) -> "SuccessPredictor":
    """Build a registered predictor over a pool given by its embeddings (or just its size, for
    predictors that do not use embeddings). Unknown names and options raise ValueError."""
    cls = PREDICTORS.get(name)
    config_cls = cls.config_class()
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(opts) - names)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for predictor {name!r}; allowed: {sorted(names)}")
    if embeddings is None and n_pool is None:
        raise ValueError(f"predictor {name!r} needs embeddings= or n_pool=")
    return cls(embeddings=embeddings, n_pool=n_pool, config=config_cls(**opts))


def available_predictors() -> list[str]:
    return PREDICTORS.names()


class SuccessPredictor(ABC):
    name: ClassVar[str] = "base"
    needs_embeddings: ClassVar[bool] = True
    """False for predictors that only use each prompt's own history (they get ``n_pool``)."""

    @dataclasses.dataclass
    class Config:
        pass

    @classmethod
    def config_class(cls) -> type:
        return cls.Config

    def __init__(self, *, embeddings: np.ndarray | None, n_pool: int | None, config: Any) -> None:
        self.config = config
        if embeddings is not None:
            self.n_pool = int(np.asarray(embeddings).shape[0])
            if n_pool is not None and int(n_pool) != self.n_pool:
                raise ValueError(f"n_pool={n_pool} disagrees with {self.n_pool} embedding rows")
        else:
            self.n_pool = int(n_pool)  # type: ignore[arg-type]

    @abstractmethod
    def predict(self, idx: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def observe(self, idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> None: ...

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _nonempty(idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    idx = np.asarray(idx, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    successes = np.asarray(successes, dtype=np.int64)
    keep = counts > 0
    return idx[keep], successes[keep], counts[keep]


def _require_embeddings(name: str, embeddings: np.ndarray | None) -> np.ndarray:
    if embeddings is None:
        raise ValueError(f"predictor {name!r} needs embeddings=")
    return np.asarray(embeddings)


# ----------------------------------------------------------------------------- GP


@register_predictor("gp")
class GPPredictor(SuccessPredictor):
    """The paper's predictor; options are the fields of ``gp.GPConfig``."""

    @classmethod
    def config_class(cls) -> type:
        # gp.py imports torch: resolve its config only when a GP is actually asked for.
        from replication.allocation.gp import GPConfig

        return GPConfig

    def __init__(self, *, embeddings: np.ndarray | None, n_pool: int | None, config: Any) -> None:
        from replication.allocation.gp import RecursiveGP

        emb = _require_embeddings(self.name, embeddings)
        super().__init__(embeddings=emb, n_pool=n_pool, config=config)
        self.gp = RecursiveGP(emb, config)

    def predict(self, idx: np.ndarray) -> np.ndarray:
        return self.gp.predict(idx)

    def observe(self, idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> None:
        self.gp.observe(*_nonempty(idx, successes, counts))

    def state_dict(self) -> dict[str, Any]:
        return self.gp.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gp.load_state_dict(state)


# ----------------------------------------------------------------------------- ridge


@register_predictor("ridge")
class RidgePredictor(SuccessPredictor):
    """Ridge regression of the observed target on [embedding, 1], by recursive least squares."""

    @dataclasses.dataclass
    class Config:
        alpha: float = 1.0
        """L2 penalty on the weights (not the intercept). Paper: value not found."""
        target: str = "logit"
        """"logit": regress ĝ = logit(clip(k/n, ε, 1−ε)), the GP's observation model (so the
        ablation changes only the regressor). "probability": regress k/n and clip predictions to
        [0, 1] (the official benchmark's LinearRegression on raw accuracy)."""
        clip_eps: float = 0.01
        """ε of the logit target (same default as the GP)."""
        decay: float = 1.0
        """Weight kept by old statistics at each observe (1.0: refit on all data; < 1 forgets
        older policies' outcomes geometrically). The official benchmark refits on a 3-step window."""
        prior_p: float = 0.5
        """Prediction before any observation."""

    def __init__(self, *, embeddings: np.ndarray | None, n_pool: int | None, config: Any) -> None:
        emb = _require_embeddings(self.name, embeddings)
        super().__init__(embeddings=emb, n_pool=n_pool, config=config)
        c = self.config
        if c.alpha < 0:
            raise ValueError(f"ridge: alpha must be >= 0, got {c.alpha}")
        if c.target not in ("logit", "probability"):
            raise ValueError(f"ridge: target must be 'logit' or 'probability', got {c.target!r}")
        if not 0 < c.decay <= 1:
            raise ValueError(f"ridge: decay must be in (0, 1], got {c.decay}")
        if not 0 < c.clip_eps < 0.5:
            raise ValueError(f"ridge: clip_eps must be in (0, 0.5), got {c.clip_eps}")
        self._x = np.hstack([np.asarray(emb, dtype=np.float64), np.ones((self.n_pool, 1))])
        d = self._x.shape[1]
        self._gram = np.zeros((d, d))
        self._xty = np.zeros(d)
        self._n_obs = 0.0
        self._w: np.ndarray | None = None

    def _targets(self, successes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        p = successes / counts
        if self.config.target == "probability":
            return p
        # the GP's observation model (gp.logit_targets), inlined to keep torch out of ridge
        return logit(np.clip(p, self.config.clip_eps, 1.0 - self.config.clip_eps))

    def observe(self, idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> None:
        idx, successes, counts = _nonempty(idx, successes, counts)
        if len(idx) == 0:
            return
        x = self._x[idx]
        y = self._targets(successes, counts)
        self._gram = self.config.decay * self._gram + x.T @ x
        self._xty = self.config.decay * self._xty + x.T @ y
        self._n_obs = self.config.decay * self._n_obs + len(idx)
        self._w = None

    def _weights(self) -> np.ndarray:
        if self._w is None:
            reg = np.full(self._gram.shape[0], self.config.alpha)
            reg[-1] = 0.0  # the intercept is not shrunk
            # lstsq, not solve: with alpha=0 and few observations the system is singular.
            self._w = np.linalg.lstsq(self._gram + np.diag(reg), self._xty, rcond=None)[0]
        return self._w

    def predict(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        if self._n_obs == 0:
            return np.full(len(idx), self.config.prior_p)
        z = self._x[idx] @ self._weights()
        return np.clip(z, 0.0, 1.0) if self.config.target == "probability" else expit(z)

    def state_dict(self) -> dict[str, Any]:
        return {"gram": self._gram.copy(), "xty": self._xty.copy(), "n_obs": self._n_obs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        gram = np.asarray(state["gram"], dtype=np.float64)
        if gram.shape != self._gram.shape:
            raise ValueError(f"ridge state has gram shape {gram.shape}, expected {self._gram.shape}")
        self._gram = gram.copy()
        self._xty = np.asarray(state["xty"], dtype=np.float64).copy()
        self._n_obs = float(state["n_obs"])
        self._w = None


# ----------------------------------------------------------------------------- moving average


@register_predictor("moving-average")
class MovingAveragePredictor(SuccessPredictor):
    """Per-prompt history: p ← (1−β)·p + β·p̂ on each observation (β = ``ema``), or the running
    mean k_total/n_total when ``ema`` is None. Needs no embeddings."""

    needs_embeddings: ClassVar[bool] = False

    @dataclasses.dataclass
    class Config:
        ema: float | None = 0.5
        """Weight β of the newest p̂ (1.0: last value only); None: cumulative success rate."""
        unseen: str = "global-mean"
        """Prediction for never-observed prompts: "global-mean" (mean p̂ of all observations so
        far, the official benchmark's "moving average" baseline) or "prior" (``prior_p``)."""
        prior_p: float = 0.5
        """Prediction for unseen prompts before any observation (and always, with unseen="prior")."""

    def __init__(self, *, embeddings: np.ndarray | None, n_pool: int | None, config: Any) -> None:
        super().__init__(embeddings=embeddings, n_pool=n_pool, config=config)
        c = self.config
        if c.ema is not None and not 0 < c.ema <= 1:
            raise ValueError(f"moving-average: ema must be in (0, 1] or None, got {c.ema}")
        if c.unseen not in ("global-mean", "prior"):
            raise ValueError(f"moving-average: unseen must be 'global-mean' or 'prior', got {c.unseen!r}")
        self._p = np.zeros(self.n_pool)
        self._k = np.zeros(self.n_pool)
        self._n = np.zeros(self.n_pool)
        self._seen = np.zeros(self.n_pool, dtype=bool)
        self._sum_rate = 0.0
        self._n_rate = 0

    def observe(self, idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> None:
        idx, successes, counts = _nonempty(idx, successes, counts)
        rate = successes / np.maximum(counts, 1)
        self._k[idx] += successes
        self._n[idx] += counts
        if self.config.ema is None:
            self._p[idx] = self._k[idx] / self._n[idx]
        else:
            b = self.config.ema
            old = np.where(self._seen[idx], self._p[idx], rate)
            self._p[idx] = (1 - b) * old + b * rate
        self._seen[idx] = True
        self._sum_rate += float(rate.sum())
        self._n_rate += len(idx)

    def predict(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        fallback = self.config.prior_p
        if self.config.unseen == "global-mean" and self._n_rate > 0:
            fallback = self._sum_rate / self._n_rate
        return np.where(self._seen[idx], self._p[idx], fallback)

    def state_dict(self) -> dict[str, Any]:
        return {
            "p": self._p.copy(), "k": self._k.copy(), "n": self._n.copy(), "seen": self._seen.copy(),
            "sum_rate": self._sum_rate, "n_rate": self._n_rate,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if np.asarray(state["p"]).shape != (self.n_pool,):
            raise ValueError(f"moving-average state is for a pool of {np.asarray(state['p']).shape}, not {self.n_pool}")
        self._p = np.asarray(state["p"], dtype=np.float64).copy()
        self._k = np.asarray(state["k"], dtype=np.float64).copy()
        self._n = np.asarray(state["n"], dtype=np.float64).copy()
        self._seen = np.asarray(state["seen"], dtype=bool).copy()
        self._sum_rate = float(state["sum_rate"])
        self._n_rate = int(state["n_rate"])
