"""A clone of the repository is all a reader has (issue 36.2): no tracked file refers to a path
outside it, every relative markdown link in the docs resolves to a file in it, and every heading
of docs/papers/ that a spec or docstring cites exists.

What counts as a reference to the outside:
- the engineers' notes that lived beside the repository (`../shared`, `shared/papers`,
  `shared/notes`, `shared/DESIGN`, the note files by name, `DESIGN.md` while no such file is
  tracked): the repository's own copies are docs/papers/*.md;
- an absolute path of the development machine (`/work/...`);
- a relative path that climbs above the repository root, resolved against the folder of the
  file that contains it (`../results/x` in tests/faults/ stays inside; `../../../x` in docs/
  does not). URLs are not paths.
Executed notebooks keep the warnings their kernel printed on stderr (the machine's venv path in a
library's warning): a record of the run, not a reference, so stderr outputs are not checked.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = re.compile(
    r"\.\./shared\b"
    r"|\bshared/(?:papers|notes|DESIGN)"
    r"|\bnotes/(?:tiny-loop|slurm-local|vllm-cpu)\.md"
    r"|(?<![\w.~-])/work/"
)
DESIGN = re.compile(r"(?<![\w/.-])DESIGN\.md\b")
CLIMB = re.compile(r"(?<![\w./~-])((?:\.\./)+)(?=[\w])")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)

# Files that name the forbidden patterns on purpose, to refuse them.
ALLOWED = {
    "tests/test_no_outside_paths.py": "this test",
    "tests/report/test_provenance.py": "asserts that SOURCES.md names no ../shared path",
}

SKIP_SUFFIXES = (".gz", ".png", ".jpg", ".jpeg", ".pdf", ".pt", ".safetensors", ".bin", ".gguf",
                 ".npz", ".npy", ".pkl", ".parquet", ".zip")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                         check=True).stdout.decode()
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def _notebook_text(raw: str) -> str:
    """Cell sources and outputs, without what the kernel printed on stderr."""
    nb = json.loads(raw)
    parts = []
    for cell in nb.get("cells", []):
        parts.append("".join(cell.get("source", "")))
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue
            parts.append(json.dumps(out, ensure_ascii=False))
    parts.append(json.dumps(nb.get("metadata", {}), ensure_ascii=False))
    return "\n".join(parts)


def _text(rel: str) -> str | None:
    if rel.endswith(SKIP_SUFFIXES):
        return None
    data = (ROOT / rel).read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _notebook_text(text) if rel.endswith(".ipynb") else text


def _leaves_root(rel: str, ups: int) -> bool:
    return ups > len(PurePosixPath(rel).parent.parts)


def _problems(rel: str, text: str, design_tracked: bool) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        bare = URL.sub(" ", line)
        for m in FORBIDDEN.finditer(bare):
            found.append(f"{rel}:{n}: {m.group(0)!r} in {line.strip()[:120]!r}")
        if not design_tracked and DESIGN.search(bare):
            found.append(f"{rel}:{n}: DESIGN.md (not in the repository) in {line.strip()[:120]!r}")
        for m in CLIMB.finditer(bare):
            if _leaves_root(rel, m.group(1).count("../")):
                found.append(f"{rel}:{n}: {bare[m.start():m.end() + 30]!r} climbs above the "
                             f"repository root")
    return found


def test_no_tracked_file_refers_outside_the_repository():
    files = _tracked()
    assert len(files) > 100, "git ls-files found too few files"
    design_tracked = any(PurePosixPath(p).name == "DESIGN.md" for p in files)
    problems = []
    for rel in files:
        if rel in ALLOWED:
            continue
        text = _text(rel)
        if text is not None:
            problems += _problems(rel, text, design_tracked)
    assert not problems, "paths outside the repository:\n" + "\n".join(problems[:50])


def test_the_allowed_files_still_need_their_exemption():
    for rel in ALLOWED:
        text = (ROOT / rel).read_text()
        assert FORBIDDEN.search(text), f"{rel} no longer names an outside path: drop it from ALLOWED"


@pytest.mark.parametrize("rel,text,expect", [
    ("docs/x.md", "see `../shared/papers/vip.md`", True),
    ("replication/a.py", "(shared/notes/tiny-loop.md)", True),
    ("replication/a.py", "(notes/tiny-loop.md)", True),
    ("README.md", "out in /work/main/.venv", True),
    ("docs/x.md", "[a](../../outside.md)", True),
    ("README.md", "[a](../x.md)", True),
    ("docs/fidelity/x.md", "[a](../papers/vip.md)", False),
    ("tests/faults/t.py", 'Path("../results/base-model")', False),
    ("docs/x.md", "`error: cannot write .../steps.jsonl`", False),
    ("docs/x.md", "<https://example.org/work/../shared/x>", False),
    ("scripts/x.sh", 'cd "$(dirname "$0")/.."', False),
    ("docs/x.md", "the shared 2-core machine; a shared file system", False),
])
def test_the_patterns(rel, text, expect):
    assert bool(_problems(rel, text, design_tracked=False)) is expect


# --- markdown links in the docs -----------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M)}


def _doc_pages() -> list[str]:
    return [p for p in _tracked() if p.endswith(".md") and (p == "README.md" or p.startswith("docs/"))]


def _links(rel: str) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", (ROOT / rel).read_text()))
    return LINK.findall(text) + REF_LINK.findall(text)


def test_every_relative_link_in_the_docs_resolves_inside_the_repository():
    pages = _doc_pages()
    assert "README.md" in pages and "docs/papers/vip.md" in pages
    bad = []
    for rel in pages:
        for target in _links(rel):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            here = (ROOT / rel).parent
            dest = (here / path).resolve() if path else (ROOT / rel).resolve()
            if path.startswith("/") or not dest.is_relative_to(ROOT):
                bad.append(f"{rel}: {target} leaves the repository")
            elif not dest.exists():
                bad.append(f"{rel}: {target} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{rel}: {target}: no heading with anchor #{anchor}")
    assert not bad, "\n".join(bad)


# --- cited headings of docs/papers/ -------------------------------------------------------------

PAPERS = ("vip", "dynamo", "gdro")
# `vip.md 'Training setup'` in a spec's source, `docs/papers/gdro.md, "Prompt-GDRO"` in a docstring
CITED = re.compile(r"(?<!fidelity/)\b(vip|dynamo|gdro)\.md,?\s+(?:\(\s*)?['\"]([^'\"]+)['\"]")


def _headings(paper: str) -> list[str]:
    text = (ROOT / "docs" / "papers" / f"{paper}.md").read_text()
    return [h.lower() for h in re.findall(r"^#{2,6}\s+(.*?)\s*$", text, re.M)]


def test_cited_headings_of_the_paper_pages_exist():
    headings = {p: _headings(p) for p in PAPERS}
    sources = [p for p in _tracked() if p.startswith(("replication/", "tests/", "scripts/"))
               and p.endswith((".py", ".yaml", ".yml")) and p != "tests/test_no_outside_paths.py"]
    cited = [(rel, paper, heading) for rel in sources
             for paper, heading in CITED.findall((ROOT / rel).read_text())]
    assert any(rel == "replication/specs/vip.yaml" for rel, _, _ in cited)
    missing = [f"{rel}: {paper}.md '{heading}'" for rel, paper, heading in cited
               if not any(h.startswith(heading.lower()) for h in headings[paper])]
    assert not missing, "headings cited but not in docs/papers/:\n" + "\n".join(sorted(set(missing)))
