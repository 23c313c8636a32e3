"""One digest of source code, for every cache key that must change when the code that produced
a result changes: the run key (store/run_key.py: all training code), the base model
(orchestration/base_model.py: the code that builds it) and the gradient-variance measurement
(analysis/measurement_cache.py: training code plus the measurement's own).

The digest is over what Python executes, not over bytes: each file is read as a token stream
(``tokenize``) from which comments, blank lines, line continuations, the spacing between tokens
and every statement that is a bare string (a docstring, or an attribute's doc) are dropped;
indentation stays, as the INDENT/DEDENT tokens that carry it. So a comment, a docstring or a
reformatting never changes a key, and any change to a name, a literal or the structure does.

``tokenize`` is used rather than ``ast.dump``: the AST's dump changes between Python versions
(node names, fields, constants), while the token strings of the same source are the same from
3.8 on. The one token change since, Python 3.12 splitting an f-string into FSTRING_START /
MIDDLE / END tokens, is undone here by taking the f-string's source text whole, as 3.11 gives it.
``tests/test_code_digest.py`` digests the package under every Python found on the machine.

SHA-256 over, for each file in order, its path relative to ``root``, a NUL byte and its
normalised text; 16 hex characters are kept.
"""

from __future__ import annotations

import hashlib
import io
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""The ``replication`` package folder."""

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python >= 3.12
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _tokens(text: str) -> Iterator[tuple[int, str]]:
    """(type, string) of each token, f-strings whole (Python 3.12+ splits them)."""
    lines = text.splitlines(keepends=True)
    toks = tokenize.generate_tokens(io.StringIO(text).readline)
    for tok in toks:
        if _FSTRING_START is not None and tok.type == _FSTRING_START:
            start, depth = tok.start, 1
            for inner in toks:
                if inner.type == _FSTRING_START:
                    depth += 1
                elif inner.type == _FSTRING_END:
                    depth -= 1
                    if depth == 0:
                        yield tokenize.STRING, _source_between(lines, start, inner.end)
                        break
            continue
        yield tok.type, tok.string


def _source_between(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    (r0, c0), (r1, c1) = start, end
    if r0 == r1:
        return lines[r0 - 1][c0:c1]
    return lines[r0 - 1][c0:] + "".join(lines[r0:r1 - 1]) + lines[r1 - 1][:c1]


def normalized_source(text: str) -> str:
    """The tokens of ``text`` that change what it executes, one logical line per line.

    A logical line made of strings alone (a docstring anywhere, a string used as a comment) is
    dropped: it has no effect but ``__doc__``, which no number depends on."""
    out: list[str] = []
    line: list[tuple[int, str]] = []
    for kind, string in _tokens(text):
        if kind in _SKIP:
            continue
        if kind in (tokenize.INDENT, tokenize.DEDENT):
            out.append(">" if kind == tokenize.INDENT else "<")
            continue
        if kind != tokenize.NEWLINE:
            line.append((kind, string))
            continue
        if line and not all(k == tokenize.STRING for k, _ in line):
            out.append(" ".join(s for _, s in line))
        line = []
    if line and not all(k == tokenize.STRING for k, _ in line):
        out.append(" ".join(s for _, s in line))
    return "\n".join(out) + "\n"


def _python_files(root: Path, include: Sequence[str] | None, exclude: Iterable[str]) -> list[Path]:
    exclude = set(exclude)
    if include is None:
        found = sorted(root.rglob("*.py"))
    else:
        found = []
        for entry in include:  # in the given order: each entry's files sorted
            path = root / entry
            found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in found
            if "__pycache__" not in f.relative_to(root).parts and f.relative_to(root).parts[0] not in exclude]


def code_digest(root: str | Path | None = None, *, include: Sequence[str] | None = None,
                exclude: Iterable[str] = ()) -> str:
    """Digest (16 hex) of the ``*.py`` files under ``root`` (default: the package), each
    normalised by ``normalized_source``.

    ``include``: files or folders relative to ``root``, hashed in the given order (a folder's
    files sorted); None = every file under ``root`` in sorted order. ``exclude``: top-level
    names under ``root`` left out (e.g. sub-packages that never run inside training)."""
    root = Path(root) if root is not None else PACKAGE
    files = _python_files(root, include, exclude)
    signature = tuple((str(f), st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()])
    if signature in _MEMO:  # a grid asks once per run: tokenize only when a file changed
        return _MEMO[signature]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(normalized_source(f.read_text(encoding="utf-8")).encode())
    _MEMO[signature] = digest = h.hexdigest()[:16]
    return digest


_MEMO: dict[tuple, str] = {}


NOT_TRAINING = ("report", "orchestration", "analysis", "launch")
"""Sub-packages that never run inside ``train``: they read finished runs, schedule them, place
them (``launch``: its output enters the key as the command and the shape, not as its code), or
measure gradients outside training, so editing them does not invalidate a trained run."""


def training_code_digest(root: str | Path | None = None) -> str:
    """The digest of the code a training run executes: every ``*.py`` of the package except
    ``NOT_TRAINING`` (the run key, and every run's provenance)."""
    return code_digest(root if root is not None else PACKAGE, exclude=NOT_TRAINING)
