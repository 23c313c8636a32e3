"""Layering and packaging: the core (allocators, estimators) imports without the training or
pipeline stack; the package has no import cycle; report/ reads results and never trains."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "replication"

BLOCKED = ("torch", "transformers", "dvc", "dvclive", "papermill", "gpytorch", "vllm", "pandas",
           "accelerate", "reasoning_gym", "sklearn", "yaml", "matplotlib")


def test_core_imports_without_the_training_and_pipeline_stack():
    """A meta-path hook refuses the heavy packages: allocators and estimators must still work."""
    code = textwrap.dedent(f"""
        import sys
        BLOCKED = {BLOCKED!r}
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"blocked in the core test: {{name}}")
        sys.meta_path.insert(0, Block())
        import numpy as np
        from replication.allocation import make_allocator, solve_integer, available_allocators
        from replication.rl.advantages import group_advantages
        ids = list(range(8))
        for name in ("uniform", "dynamo", "rollout-gdro", "gdro-sqrt-law"):
            alloc = make_allocator(name, lower=2, upper=8)
            counts = alloc.plan(ids, 32)
            assert counts.sum() == 32
            alloc.observe(ids, counts, np.ones(32))
        assert solve_integer([0.1, 0.2, 0.25], 12, 3, 6, "rloo").sum() == 12
        group_advantages(np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), "rloo")
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not heavy, heavy
        print("ok", len(available_allocators()))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok")


def test_core_dependencies_are_numpy_and_scipy_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert names == {"numpy", "scipy"}
    assert {"train", "pipeline", "math", "gpu", "dev"} <= set(project["optional-dependencies"])


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _import_graph() -> dict[str, set[str]]:
    """module → replication modules it imports anywhere in its body (function-level imports too:
    a lazy import is still a dependency)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for n in names:
                while n not in mods and "." in n:
                    n = n.rsplit(".", 1)[0]
                if n in mods and n != m and n.startswith("replication"):
                    graph[m].add(n)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    graph = _import_graph()
    assert "replication.train.setup" in graph and graph["replication.report.pipeline"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_report_reads_results_and_never_trains():
    graph = _import_graph()
    seen, todo = set(), [m for m in graph if m.startswith("replication.report")]
    while todo:  # everything report/ reaches, transitively
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    trains = sorted(m for m in seen if m.startswith(("replication.train", "replication.orchestration",
                                                     "replication.sft", "replication.rollout")))
    assert not trains, trains


def test_training_never_reaches_report_or_orchestration():
    """A training run imports neither the reports (pandas, seaborn: absent from the vLLM venv)
    nor the grid that schedules it (found by the real-vLLM test: provenance imported the run cache)."""
    graph = _import_graph()
    seen, todo = set(), [m for m in graph if m.startswith("replication.train")]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    bad = sorted(m for m in seen if m.startswith(("replication.report", "replication.orchestration")))
    assert not bad, bad


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```bash\n")[1:]
    return [b.split("```")[0].strip() for b in blocks if b.lstrip().startswith("python3 -m venv")]


def test_readme_has_two_set_up_and_go_commands_and_ci_runs_the_tests_one():
    main_job, tests = _readme_commands()  # exactly two
    assert main_job.endswith(("&& dvc repro", "&& dvc repro --quiet")) and "torch==2.13.0" in main_job and "[pipeline" in main_job
    assert tests.endswith("python -m pytest -q -n 2")
    ci = [line.split(".venv/bin/", 1)[1] for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith(".venv/bin/") and "--upgrade pip" not in line]
    steps = [s.strip() for s in tests.split("&&")][2:]  # after venv creation and activation
    assert [s.replace("pip install -q ", "pip install ") for s in ci] == steps  # -q: quieter log only


def test_no_test_skips_when_one_of_our_own_modules_fails_to_import():
    """``pytest.importorskip("replication...")`` would turn a broken import into a skip."""
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name
                 and ("importorskip(\"replication" in p.read_text() or "importorskip('replication" in p.read_text())]
    assert not offenders, offenders


DISTRIBUTION = "rlvr-rollout-allocation"
"""Our distribution name: not on PyPI (``pip index versions rlvr-rollout-allocation`` finds none),
unlike ``replication``, an unrelated PyPI package (0.10.3), so no install hint can fetch a
stranger's code. The import name stays ``replication``."""


def test_distribution_name_is_our_own_and_extras_refer_to_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    for extra, deps in project["optional-dependencies"].items():
        for dep in deps:
            base = dep.split("[")[0].strip()
            assert base != "replication", f"extra {extra!r} refers to the PyPI package {dep!r}"


def test_no_install_hint_names_the_pypi_package_replication():
    """Every hint installs from the checkout (``pip install -e '.[gpu]'``): a bare
    ``pip install 'replication[gpu]'`` outside a checkout installs an unrelated package."""
    import re

    hint = re.compile(r"""pip install\s+(-U\s+|--upgrade\s+)?["'`]?replication(\[|\b)""")
    suffixes = {".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".ipynb", ".txt", ".cfg"}
    skip = {"results", "cache", "build", "runs"}
    offenders = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if (p.suffix not in suffixes and rel != Path(".ci/run")) or not p.is_file() \
                or rel.parts[0] in skip or any(part.startswith(".") and part != ".ci" for part in rel.parts):
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if hint.search(line) and "unrelated" not in line and p.name != Path(__file__).name:
                offenders.append(f"{rel}:{n}")
    assert not offenders, offenders
