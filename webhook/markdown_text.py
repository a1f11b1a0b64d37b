"""Text inside Markdown, as `trainguard review` and `trainguard audit` write it: code spans and
plain text that no backtick, pipe, emphasis or HTML in a name or message can break."""

from __future__ import annotations

__all__ = ["code", "text"]

_ESCAPE = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|"})


def code(s: str, *, cell: bool = False) -> str:
    """An inline code span that survives backticks in `s` (and pipes, inside a table cell)."""
    s = s.replace("\n", " ")
    if cell:
        s = s.replace("|", "\\|")
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def text(s: str) -> str:
    """Plain text safe in a table cell or list item: no stray emphasis, links, HTML or cell breaks."""
    return s.translate(_ESCAPE).replace("\n", "<br>")
