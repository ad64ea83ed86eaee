"""Which characters may appear in a ResourceSync document: XML 1.0's `Char`.

One rule for the writer, which refuses the rest, and for ingestion, which
refuses them first, so nothing the API accepts can later fail a document.
Django-free, like the writer.
"""

from __future__ import annotations

import re

# XML 1.0 `Char` excludes C0 controls other than tab, LF and CR, lone surrogates, U+FFFE, U+FFFF.
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def forbidden_character(value: str) -> tuple[int, str] | None:
    """The position and the first character XML 1.0 does not allow in `value`, or None."""
    # Printable ASCII, the usual URI or token, cannot hold one.
    if value.isascii() and value.isprintable():
        return None
    match = _FORBIDDEN.search(value)
    return None if match is None else (match.start(), match.group())


def describe(character: str) -> str:
    """`U+FFFE`: how error messages name a character (lone surrogates cannot be printed)."""
    return f"U+{ord(character):04X}"
