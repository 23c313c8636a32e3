"""The banner a paper notebook shows above its numbers when they are not results: a rehearsal
(docs/rehearsal.md) exercises the paper path on a 135M model for two steps."""

from __future__ import annotations

REHEARSAL_PREFIX = "rehearsal-"


def banner(profile: str) -> str | None:
    """Markdown for a rehearsal profile's notebook, else None."""
    if not str(profile).startswith(REHEARSAL_PREFIX):
        return None
    paper = str(profile)[len(REHEARSAL_PREFIX):]
    return (f"> **Rehearsal — these numbers are not results.** Profile `{profile}` runs paper-{paper}'s "
            f"path (its template, reward, allocator, evaluation sets and metrics) with SmolLM2-135M on "
            f"2 CPU cores for 2 steps on easy problems, to exercise the code before GPU hours "
            f"(docs/rehearsal.md). The tables below compare nothing with the paper.")


def show_banner(profile: str) -> None:
    """Display the banner in the notebook (nothing for a profile whose numbers are results)."""
    text = banner(profile)
    if text:
        from IPython.display import Markdown, display

        display(Markdown(text))
        print(text.replace("> ", "").replace("**", ""))  # also in papermill's log and plain outputs
