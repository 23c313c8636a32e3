"""No result is typed (issue 37.5): a figure that looks like a result — "+3.8 pts", "0.147",
"42.6 %", "×0.85" — may stand in README.md only inside a generated block (``<!-- gen:NAME -->`` or
the results block), and never in the static text of the generators of results/summary.md and of
each paper's conclusions.md (their string literals, docstrings and format specs aside). The
allow-list holds the few numbers that are not results: hyperparameters, design levels, counts,
identifiers — each with the context it may appear in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIGURE = re.compile(
    r"(?<![\w.@/{:\-])[+\-−±]?\d+(?:\.\d+)?\s*(?:%|pts?\b)"  # 42.6 %, +3.8 pts, 95 %
    r"|(?<![\w.@/^{:\-])[+\-−]?\d*\.\d+(?![\w.}])"  # 0.147, 1.5, −0.2
    r"|×\s?\d+(?:\.\d+)?")  # ×0.85, × 4

ALLOWED = [
    (r"arXiv \d{4}\.\d{5}", "paper identifiers"),
    (r"95 % (?:t )?(?:CI|interval)|\[95 % CI\]|paired 95 % CI", "the interval's level, a design constant"),
    (r"power 0\.8", "the MDE's power, a design constant"),
    (r"α = 0\.05", "the test level, replication/specs/reading.yaml"),
    (r"<0\.001", "how a p-value below 0.001 is printed"),
    (r"max/min weight of 1\.2|max/min ≥ 1\.2", "issue 10's engagement threshold for Prompt-GDRO's weights"),
    (r"256 prompts × 4 rollouts", "the GDRO paper's batch (its setup, not a result)"),
    (r"β_KL = 0\.001", "GDRO's KL coefficient (paper App. A), a hyperparameter"),
    (r"0\.43 M parameters", "the tiny model's size, a setting"),
    (r"about 0\.5 GB", "a download's size"),
]


def _strip_allowed(text: str) -> str:
    for pattern, _why in ALLOWED:
        text = re.sub(pattern, " ", text)
    return text


def figures(text: str) -> list[str]:
    return FIGURE.findall(_strip_allowed(text))


def readme_static(text: str) -> str:
    """README without its generated blocks, its results block and code (commands, paths)."""
    text = re.sub(r"<!-- gen:([\w.-]+) -->.*?<!-- /gen:\1 -->", " ", text, flags=re.S)
    text = re.sub(r"<!-- results:begin -->.*?<!-- results:end -->", " ", text, flags=re.S)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", " ", text)


def static_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal of a module that can reach its output: not a
    docstring, not an f-string's format spec."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            skip |= {id(n) for n in ast.walk(node.format_spec)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


GENERATORS = ["replication/report/summary.py", "replication/report/conclusions.py", "replication/report/reading.py",
              "replication/report/gdro_signal.py", "replication/report/rollout_gdro_signal.py"]


def test_readme_types_no_figure_outside_generated_blocks():
    found = [(i + 1, figures(line)) for i, line in enumerate(readme_static((ROOT / "README.md").read_text()).splitlines())]
    found = [(i, f) for i, f in found if f]
    assert not found, f"figures typed outside a generated block of README.md (line of the stripped text, figures): {found}"


@pytest.mark.parametrize("module", GENERATORS)
def test_generators_type_no_figure_in_their_static_text(module):
    found = [(line, figures(s)) for line, s in static_strings(ROOT / module)]
    found = [(line, f) for line, f in found if f]
    assert not found, f"{module}: figures typed in static text (line, figures): {found}"


def test_the_check_catches_a_typed_result():
    assert figures("RLOO+VIP loses 3.8 pts on add2t3") == ["3.8 pts"]
    assert figures("MAE 0.147 for the GP") == ["0.147"]
    assert figures("on 42.6 % of steps") == ["42.6 %"]
    assert figures("variance ×0.85 of uniform") == ["×0.85"]
    assert figures("−3.2 pts [−5.0, −1.4]")
    stale = "<!-- gen:x -->\n+3.8 pts\n<!-- /gen:x -->\nthen 2 cores, 10 seeds, issue 37, section 4.2.1 and +1.1 pts"
    assert figures(readme_static(stale)) == ["+1.1 pts"]
    assert figures("arXiv 2602.01601, 95 % CI, power 0.8, 2 cores, 2026") == []
