"""params.yaml's `scale` (issue 35.1): one switch per scale. Each paper's stage resolves its own
profile, seeds, arms and shape for the scale; a paper profile given as `profile`, or `profile`
with another scale, is refused in one line; outputs are placed by scale; DVC lists only the
chosen scale's entry among a stage's parameters."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replication.config import ConfigError, load_profile
from replication.orchestration.stage import destination
from replication.orchestration.workspace import paper_place
from replication.stage_params import (PAPER_STAGES, SCALES, load_params, scale_of, section_at_scale,
                                      validate_section, validate_stage)

ROOT = Path(__file__).resolve().parents[2]
PARAMS = load_params(ROOT / "params.yaml")


def _at(scale: str, **top) -> dict:
    params = copy.deepcopy(PARAMS)
    params.update({"scale": scale, **top})
    return params


@pytest.mark.parametrize("paper", PAPER_STAGES)
def test_each_paper_resolves_its_own_profile_per_scale(paper):
    assert section_at_scale(_at("small"), paper)["profile"] == "default"
    assert section_at_scale(_at("rehearsal"), paper)["profile"] == f"rehearsal-{paper}"
    paper_sec = section_at_scale(_at("paper"), paper)
    assert paper_sec["profile"] == f"paper-{paper}" and paper_sec["scale"] == "paper"
    assert paper_sec["shape"]["processes"] == 8 and paper_sec["shape"]["gpus_per_process"] == 1
    assert "scales" not in paper_sec
    # every arm the scale trains resolves under the scale's profile (validated as the grid will run it)
    assert f"profile paper-{paper}" in validate_section(_at("paper"), paper, ROOT / "params.yaml")


def test_small_scale_choices_stay_small():
    small, paper = section_at_scale(_at("small"), "vip"), section_at_scale(_at("paper"), "vip")
    assert small["arms"]["RLOO+VIP"]["allocator.options"]["bandwidth"] == 0.2  # chosen on the tiny model
    assert paper["arms"]["RLOO+VIP"]["allocator.options"]["bandwidth"] is None  # the paper's median heuristic
    # merged key by key: the encoder stays the arm's
    assert paper["arms"]["RLOO+VIP"]["allocator.options"]["embedder"] == "sentence-transformers"
    assert "RLOO+phat16" in small["run"] and "RLOO+phat16" not in paper["run"]
    assert len(small["seeds"]) == 10 and len(paper["seeds"]) == 3
    gdro_small, gdro_paper = (section_at_scale(_at(s), "gdro")["arms"]["Prompt-GDRO-code"]["rl.prompt_weights_options"]
                              for s in ("small", "paper"))
    assert (gdro_small["focus_warmup_steps"], gdro_small["focus_ramp_steps"]) == (30, 120)  # scaled to 300 steps
    assert (gdro_paper["focus_warmup_steps"], gdro_paper["focus_ramp_steps"]) == (50, 200)  # the script's own
    assert gdro_paper["classifier"] == gdro_small["classifier"]  # the rest of the arm is kept
    cfg = load_profile("paper-gdro", {**section_at_scale(_at("paper"), "gdro")["arms"]["Prompt-GDRO-code"], "seed": 0})
    assert cfg.rl.prompt_weights_options["focus_warmup_steps"] == 50


@pytest.mark.parametrize("top, words", [
    ({"profile": "paper-vip"}, ["'paper-vip' belongs to a scale", "scale: paper", "-S scale=paper"]),
    ({"profile": "rehearsal-gdro"}, ["scale: rehearsal"]),
    ({"scale": "paper", "profile": "quick"}, ["'quick' together with scale 'paper'", "profile: default"]),
    ({"scale": "paper", "profile_dir": "configs"}, ["together with scale 'paper'"]),
    ({"scale": "huge"}, ["scale: 'huge' is not a scale", "small", "rehearsal", "paper"]),
])
def test_refusals_name_the_scale(top, words):
    params = {**_at(top.pop("scale", "small")), **top}
    with pytest.raises(ConfigError) as e:
        validate_section(params, "vip", "params.yaml")
    assert all(w in str(e.value) for w in words), str(e.value)
    assert "\n" not in str(e.value)


def test_a_scale_entry_is_checked():
    params = _at("paper")
    params["vip"] = copy.deepcopy(params["vip"])
    del params["vip"]["scales"]["paper"]["profile"]
    with pytest.raises(ConfigError, match=r"vip.scales.paper.profile: None is not a built-in profile"):
        section_at_scale(params, "vip")
    params["vip"]["scales"]["paper"] = {"profile": "paper-vip", "sedes": [0]}
    with pytest.raises(ConfigError, match=r"vip.scales.paper.sedes: unknown key"):
        section_at_scale(params, "vip")
    params["vip"]["scales"]["small"] = {"profile": "paper-vip"}
    with pytest.raises(ConfigError, match=r"scales.small.profile: the small scale's profile is params.yaml's"):
        section_at_scale(params, "vip")
    del params["vip"]["scales"]
    with pytest.raises(ConfigError, match=r"vip.scales.paper: missing"):
        section_at_scale(params, "vip")


def test_outputs_are_placed_by_scale():
    for scale in SCALES:
        dest, published = destination("vip", ROOT / "params.yaml", _at(scale))
        place = paper_place("vip", ROOT / "params.yaml", _at(scale))
        if scale == "small":
            assert (dest, published, place.published) == (Path("results/vip"), True, True)
        else:
            assert dest == Path("workspace") / scale / "vip" and not published
            assert place.root == Path("workspace") / scale and place.differs == {"scale": scale}
    base, _ = destination("base", ROOT / "params.yaml", _at("paper"))
    assert base == Path("workspace/paper/base-model")
    # a notebook parameter at another scale: its own hashed folder beside the scale's
    place = paper_place("vip", ROOT / "params.yaml", _at("paper"), notebook={"seeds": [0]})
    assert place.root.parent == Path("workspace") and place.root.name.startswith("paper-")


def test_validate_command_at_each_scale(tmp_path):
    for scale in SCALES:
        params = tmp_path / f"{scale}.yaml"
        params.write_text(yaml.safe_dump(_at(scale), sort_keys=False))
        line = validate_stage(params, "dynamo")
        assert f"profile {'default' if scale == 'small' else scale + '-dynamo'}" in line, line
        r = subprocess.run([sys.executable, "-m", "replication", "validate", "--params", str(params), "--stage", "gdro"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr


def test_dvc_lists_the_chosen_scale_only():
    """A paper stage's params are its section's own keys and `scales.${scale}`: editing the paper
    scale's entry leaves the small-scale results current; the trial outputs of both switches are
    declared (`workspace/${profile}` and `workspace/${scale}`), and their stand-ins are committed."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for paper in PAPER_STAGES:
        params = stages[paper]["params"]
        assert f"{paper}.scales.${{scale}}" in params and "scale" in params and paper not in params
        outs = [next(iter(o)) for o in stages[paper]["outs"]]
        assert f"workspace/${{scale}}/{paper}/MANIFEST.json" in outs
        for folder in ("default", "small"):
            assert (ROOT / "workspace" / folder / paper / "MANIFEST.json").is_file()
        # every key of the section but `scales` is listed: nothing of the small scale is left out
        listed = {p.split(".", 1)[1] for p in params if p.startswith(f"{paper}.") and "scales" not in p}
        assert listed | {"scales"} >= set(PARAMS[paper]), sorted(set(PARAMS[paper]) - listed)
    assert "workspace/${scale}/base-model" in [next(iter(o)) for o in stages["base"]["outs"]]
    assert scale_of(PARAMS) == "small"


@pytest.mark.slow
def test_dvc_exp_run_at_rehearsal_scale_writes_its_own_place(tmp_path):
    """`dvc exp run -S scale=rehearsal` (fake notebooks, tests/stages/project.py): every stage writes
    workspace/rehearsal/, results/ and the committed stand-ins stay as they are, the base stage
    records each paper's rehearsal model; editing the paper scale's entry afterwards leaves the
    stages current (DVC lists `<paper>.scales.${scale}` only)."""
    from tests.stages.project import env, make_project, tree_digest

    proj = make_project(tmp_path)
    (ROOT / ".cache").mkdir(exist_ok=True)  # a fresh clone (CI) has none yet: the base stage converts into it
    (proj / ".cache").symlink_to(ROOT / ".cache")  # the SmolLM2 conversion the base stage checks
    before = tree_digest(proj / "results")
    r = subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "-S", "scale=rehearsal"], cwd=proj, env=env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    after = {k: v for k, v in tree_digest(proj / "results").items() if not k.startswith("encoder/")}
    assert after == before
    status = subprocess.run(["git", "status", "--porcelain", "--", "workspace", "results"], cwd=proj,
                            capture_output=True, text=True).stdout
    assert status == "", status  # workspace/rehearsal is git-ignored; the stand-ins unchanged
    for rel in ("vip/tables/heldout.csv", "dynamo/summary.json", "gdro/MANIFEST.json", "summary.md"):
        assert (proj / "workspace" / "rehearsal" / rel).exists(), rel
    import json

    models = json.loads((proj / "workspace" / "rehearsal" / "base-model" / "MODELS.json").read_text())
    assert {p: m["profile"] for p, m in models["papers"].items()} == {p: f"rehearsal-{p}" for p in PAPER_STAGES}
    assert "stage vip: writing workspace/rehearsal/vip" in r.stdout
    # a paper-scale edit is no parameter of the rehearsal (nor of the small) stages
    from dvc.utils.hydra import apply_overrides

    apply_overrides(proj / "params.yaml", ["vip.scales.paper.seeds=[0,1,2,3]"])
    assert "- 3" in (proj / "params.yaml").read_text()
    r = subprocess.run([sys.executable, "-m", "dvc", "status"], cwd=proj, env=env(), capture_output=True, text=True,
                       timeout=300)
    assert "vip" not in r.stdout and "up to date" in r.stdout, r.stdout
