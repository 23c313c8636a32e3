"""``python -m replication prefetch`` against a local stand-in for the hub (tests/hub_stand_in.py):
the paper scale's real params.yaml and profiles, their real hub ids, served with a tiny model and
the math fixtures (tests/fixtures/math/) in their hub repos' layouts. Prefetch locks the served
commits; a second prefetch is a no-op; a moved upstream is refused without --update; then, the
server stopped and HF_HUB_OFFLINE=1, the repo's own loaders read the locked commits from the cache,
the run key reports them and the paper-scale base stage passes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cli_session import CliSession
from hub_stand_in import HubStandIn
from replication.config import ConfigError, load_profile, to_dict
from replication.store.hub_lock import (HUB_LOCK_ENV, HubLockError, dump_lock, empty_lock, merge_lock,
                                        read_hub_lock, write_hub_lock)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "math"
PAPER_PROFILES = ("paper-vip", "paper-dynamo", "paper-gdro")

LAYOUT = {
    # registry name: {path in the hub repo: fixture file} (the layouts the real repos have)
    "dapo17k": {"data/dapo-math-17k.parquet": "dapo17k/data/dapo-math-17k.parquet"},
    "dapo17k_en": {"en/train-00000-of-00001.parquet": "dapo17k_en/en/train-00000-of-00001.parquet",
                   "cn/train-00000-of-00001.parquet": "dapo17k_en/cn/train-00000-of-00001.parquet"},
    "math500": {"test.jsonl": "math500_test.jsonl"},
    "aime24": {"data/train-00000-of-00001.parquet": "aime_2024/data/train-00000-of-00001.parquet"},
    "aime25": {"data/train-00000-of-00001.parquet": "aime25.parquet"},
    "amc23": {"test-00000-of-00001.parquet": "amc23_test.parquet"},
    "minerva": {"test.jsonl": "minerva_test.jsonl"},
    "olympiadbench": {"test.jsonl": "olympiadbench_test.jsonl"},
    "gpqa_diamond": {"gpqa_diamond.csv": "gpqa_diamond.csv"},
}

LOCAL = {"dapo17k": "dapo17k", "dapo17k_en": "dapo17k_en", "math500": "math500_test.jsonl", "aime24": "aime_2024",
         "aime25": "aime25.parquet", "amc23": "amc23_test.parquet", "minerva": "minerva_test.jsonl",
         "olympiadbench": "olympiadbench_test.jsonl", "gpqa_diamond": "gpqa_diamond.csv"}
"""The same fixtures as the local override ``path=`` (tests/test_math_datasets.py)."""


def _dataset_files(name: str, drop_last_row: bool = False) -> dict[str, bytes]:
    from replication.tasks.math_datasets import DATASETS

    files = {".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
             "README.md": f"# stand-in of {DATASETS.get(name).hub_id}\n".encode()}
    for repo_path, fixture in LAYOUT[name].items():
        data = (FIX / fixture).read_bytes()
        if drop_last_row:  # a later upstream commit: the same file, one problem fewer
            assert repo_path.endswith(".jsonl")
            data = b"".join(data.splitlines(keepends=True)[:-1])
        files[repo_path] = data
    return files


def _paper_names() -> tuple[set[str], set[str]]:
    """(model ids, dataset registry names) the paper profiles name."""
    models, datasets = set(), set()
    for profile in PAPER_PROFILES:
        cfg = load_profile(profile)
        models.add(cfg.model.path)
        datasets.add(cfg.task.options["train"])
        datasets.update(cfg.task.options.get("eval") or [])
    return models, datasets


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from replication.models import TinyModelConfig, build_char_tokenizer, build_tiny_model, save_policy

    tok = build_char_tokenizer()
    folder = tmp_path_factory.mktemp("tiny-model")
    save_policy(build_tiny_model(TinyModelConfig(), tok), tok, folder)
    return folder


def _env(tmp: Path, hub_url: str) -> dict[str, str]:
    """A login node's environment: the stand-in as the hub, online, a cache of the test's own."""
    env = {k: v for k, v in os.environ.items()
           if k not in (HUB_LOCK_ENV, "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE", "HF_HOME")}
    return {**env, "HF_ENDPOINT": hub_url, "HF_HOME": str(tmp / "hf-home"), "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}


def _downloads(requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [r for r in requests if "/resolve/" in r[1]]


@pytest.mark.slow
def test_prefetch_locks_then_runs_load_the_locked_commits_offline(tmp_path, tiny_model, monkeypatch):
    from huggingface_hub import constants

    from replication.models import TinyModelConfig, build_char_tokenizer, build_tiny_model, count_parameters, load_policy
    from replication.tasks.math_datasets import DATASETS, load_math_dataset

    models, datasets = _paper_names()
    lock, cache = tmp_path / "hub.lock.json", tmp_path / "hub-cache"
    prefetch = ("prefetch", "--scale", "paper", "--cache-dir", str(cache), "--no-progress")
    hub = HubStandIn()
    try:
        served = {"models": {m: hub.publish("model", m, tiny_model) for m in sorted(models)},
                  "datasets": {DATASETS.get(n).hub_id: hub.publish("dataset", DATASETS.get(n).hub_id,
                                                                   _dataset_files(n)) for n in sorted(datasets)}}
        with CliSession(_env(tmp_path, hub.url), cwd=ROOT) as cli:
            # 1. every model and dataset of every paper run, fetched and locked at the served commit
            rc, out, err = cli(*prefetch, "--lock", str(lock))
            assert rc == 0, err
            assert json.loads(lock.read_text()) == served
            for kind in served:
                for repo_id, commit in served[kind].items():
                    assert any(repo_id in line and commit in line and line.endswith("new")
                               for line in out.splitlines()), (repo_id, out)
            assert f"lock: {lock.resolve()} (written)" in out
            if not (ROOT / "results" / "encoder").exists():  # VIP's GP arms name this local folder
                assert "not fetched: results/encoder" in out
            assert len(_downloads(hub.requests)) >= 2 * len(served["datasets"])

            # 2. again: nothing downloaded, the lock untouched
            stamp, seen = lock.stat().st_mtime_ns, len(hub.requests)
            rc, out, err = cli(*prefetch, "--lock", str(lock))
            assert rc == 0, err
            assert lock.stat().st_mtime_ns == stamp and json.loads(lock.read_text()) == served
            assert _downloads(hub.requests[seen:]) == []
            assert f"lock: {lock.resolve()} (unchanged)" in out
            assert all(line.endswith("unchanged") for line in out.splitlines()
                       if line.startswith(("model ", "dataset ")))

            # 3. upstream moves: refused in one line, nothing fetched, the lock as it was
            math500 = DATASETS.get("math500").hub_id
            moved = hub.publish("dataset", math500, _dataset_files("math500", drop_last_row=True))
            seen, before = len(hub.requests), lock.read_bytes()
            rc, out, err = cli(*prefetch, "--lock", str(lock))
            assert rc == 2
            message = err.strip()
            assert "\n" not in message and math500 in message and "--update" in message
            assert served["datasets"][math500][:12] in message and moved[:12] in message
            assert lock.read_bytes() == before and _downloads(hub.requests[seen:]) == []

            # 4. --update takes it (into a copy: the first lock stays at the old commit)
            updated = tmp_path / "updated.lock.json"
            shutil.copy(lock, updated)
            rc, out, err = cli(*prefetch, "--lock", str(updated), "--update")
            assert rc == 0, err
            assert read_hub_lock(updated)["datasets"] == {**served["datasets"], math500: moved}
            assert f"updated from {served['datasets'][math500]}" in out
    finally:
        hub.stop()

    # 5. no hub (HF_HUB_OFFLINE=1, the server gone): the repo's loaders read the locked commits
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # what HF_HUB_CACHE=<cache> gives a run
    monkeypatch.setenv(HUB_LOCK_ENV, str(lock))
    model_id = sorted(models)[0]
    model, _ = load_policy(model_id)
    snapshot = cache / f"models--{model_id.replace('/', '--')}" / "snapshots" / served["models"][model_id]
    assert model.name_or_path == str(snapshot)
    assert count_parameters(model) == count_parameters(build_tiny_model(TinyModelConfig(), build_char_tokenizer()))
    local = {n: len(load_math_dataset(n, path=str(FIX / LOCAL[n]))) for n in datasets}
    assert {n: len(load_math_dataset(n)) for n in datasets} == local
    monkeypatch.setenv(HUB_LOCK_ENV, str(updated))
    assert len(load_math_dataset("math500")) == local["math500"] - 1

    # 6. the run key and the paper-scale base stage see the locked commits
    from replication.orchestration.stage import _scale_base_stage
    from replication.stage_params import load_params
    from replication.store.run_key import hub_revisions

    monkeypatch.setenv(HUB_LOCK_ENV, str(lock))
    for profile in PAPER_PROFILES:
        revisions = hub_revisions(to_dict(load_profile(profile)))
        for key, commit in revisions.items():
            kind, repo_id = key.split(":", 1)
            assert commit == served[f"{kind}s"][repo_id], key
    params = {**load_params(ROOT / "params.yaml"), "scale": "paper"}
    assert _scale_base_stage("paper", params, ROOT / "params.yaml", tmp_path / "base") == 0
    recorded = json.loads((tmp_path / "base" / "MODELS.json").read_text())["papers"]
    for paper, entry in recorded.items():
        assert entry["revisions"][f"model:{entry['model']}"] == served["models"][entry["model"]], paper
    monkeypatch.setenv(HUB_LOCK_ENV, str(tmp_path / "no.lock.json"))
    with pytest.raises(ConfigError, match="prefetch --scale paper"):
        _scale_base_stage("paper", params, ROOT / "params.yaml", tmp_path / "base")


def test_a_changed_commit_is_refused_unless_update():
    old = {"models": {"a/m": "1" * 40}, "datasets": {"a/d": "2" * 40}}
    same = merge_lock(old, {"models": {"a/m": "1" * 40}, "datasets": {"b/d": "3" * 40}})
    assert same == {"models": {"a/m": "1" * 40}, "datasets": {"a/d": "2" * 40, "b/d": "3" * 40}}
    with pytest.raises(HubLockError, match=r"model a/m 111111111111 -> 444444444444.*--update"):
        merge_lock(old, {"models": {"a/m": "4" * 40}, "datasets": {}})
    assert merge_lock(old, {"models": {"a/m": "4" * 40}}, update=True)["models"] == {"a/m": "4" * 40}


def test_the_lock_file_is_written_once_and_read_back(tmp_path):
    path = tmp_path / "hub.lock.json"
    assert read_hub_lock(path) == empty_lock()
    lock = {"models": {"q/m": "a" * 40}, "datasets": {"q/d": "b" * 40}}
    assert write_hub_lock(lock, path) is True
    assert path.read_text() == dump_lock(lock) and read_hub_lock(path) == lock
    assert write_hub_lock(lock, path) is False


@pytest.mark.parametrize("text", ["{not json", '["a"]', '{"models": {"q/m": 3}}', '{"weights": {}}'])
def test_a_malformed_lock_is_one_line_naming_the_file(tmp_path, text):
    path = tmp_path / "hub.lock.json"
    path.write_text(text)
    with pytest.raises(HubLockError) as err:
        read_hub_lock(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_locked_model_missing_from_the_cache_offline_names_prefetch(tmp_path, monkeypatch):
    from replication.models.hub import model_location
    from replication.store.hub_snapshot import HubSnapshotMissing

    lock = tmp_path / "hub.lock.json"
    write_hub_lock({"models": {"nobody/nothing": "c" * 40}, "datasets": {}}, lock)
    monkeypatch.setenv(HUB_LOCK_ENV, str(lock))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubSnapshotMissing, match="nobody/nothing at c{40} is not in the hub cache.*prefetch"):
        model_location("nobody/nothing")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the env lets the hub be tried; huggingface_hub refuses
    with pytest.raises(HubSnapshotMissing, match="nobody/nothing at c{40} .*fetching it failed.*prefetch"):
        model_location("nobody/nothing")
    assert model_location("other/unlocked") == "other/unlocked"  # unpinned: loaded by id, as before
    assert model_location(str(tmp_path)) == str(tmp_path)  # a local folder as it is
