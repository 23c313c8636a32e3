"""`python -m replication diff-profiles` (issue 36.1): a rehearsal differs from its paper profile only
where 2 CPU cores force it (profile_diff.REHEARSAL_REPLACES, each with its reason), compared on the
configuration every arm resolves to at its scale — not on the YAML files."""

from __future__ import annotations

import pytest

from replication.__main__ import main
from replication.profile_diff import REHEARSAL_REPLACES, compare, reason, unexplained
from replication.stage_params import PAPER_STAGES


@pytest.mark.parametrize("paper", PAPER_STAGES)
def test_a_rehearsal_changes_only_the_listed_keys(paper):
    rows = compare(f"paper-{paper}", f"rehearsal-{paper}")
    assert rows and {p for p, _, _ in rows} == {paper}  # every arm both scales train, of this paper only
    for _, arm, diff in rows:
        assert "model.path" in diff and "rollout.sampling.max_new_tokens" in diff  # what must change did
        assert unexplained(diff) == {}, f"{paper}/{arm}: {unexplained(diff)}"
        # what makes the paper's method is never among the changes
        for key in ("allocator.name", "rl.estimator", "rl.modulation", "rl.prompt_weights", "task.options.template",
                    "task.options.reward.extraction", "task.options.eval", "eval.temperature", "rl.clip_high"):
            assert key not in diff, (arm, key, diff.get(key))


def test_every_listed_change_has_a_reason():
    assert all(why.strip() for why in REHEARSAL_REPLACES.values())
    assert reason("model.path") and reason("task.options.eval_paths.aime24") and reason("allocator.name") is None


def test_the_command_prints_each_arm(capsys):
    assert main(["diff-profiles", "paper-gdro", "rehearsal-gdro"]) == 0
    out = capsys.readouterr().out
    assert "gdro / Rollout-GDRO:" in out and "model.path:" in out and "NOT A LISTED" not in out
    assert main(["diff-profiles", "paper-gdro", "nonesuch"]) == 2
