"""Figures shown inline in the notebooks, as PNG.

The plots are matplotlib ``Figure`` objects built without pyplot (``plots.py``), and IPython has a
display formatter for them only after pyplot's inline backend has been set up, which a kernel
started by papermill or nbconvert never does: those cells ended in ``;`` and the executed notebooks
held no figure. ``show`` renders the figure to PNG bytes and displays them, so JupyterLab,
nbconvert and the committed executed notebooks all hold the image, whatever the backend.
"""

from __future__ import annotations

import io


def png_bytes(fig, dpi: int = 100) -> bytes:
    """The figure as PNG (``bbox_inches="tight"`` as ``plots.save`` writes it)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def show(fig, dpi: int = 100) -> None:
    """Display ``fig`` inline (an ``image/png`` output); a ``None`` figure (nothing to plot) is skipped."""
    if fig is None:
        return
    from IPython.display import Image, display

    display(Image(data=png_bytes(fig, dpi), format="png"))
