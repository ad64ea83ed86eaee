"""What the validator found: one line per problem, a few per kind per document."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

#: Past this many problems of one kind in one document, only a count is printed.
SHOWN_PER_KIND = 10


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one URL; `kind` groups repeats (e.g. every bad hash)."""

    url: str
    message: str
    kind: str = ""

    def __str__(self) -> str:
        return f"{self.url}: {self.message}"


@dataclass
class Report:
    """Problems in the order found; `emit` receives each line as it is printed."""

    emit: Callable[[str], None] = lambda line: None
    problems: list[Problem] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    _seen: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, url: str, message: str, kind: str = "") -> None:
        """Record a problem; print it unless this document already showed enough of its kind."""
        problem = Problem(url, message, kind or message)
        self.problems.append(problem)
        key = (url, problem.kind)
        self._seen[key] += 1
        if self._seen[key] <= SHOWN_PER_KIND:
            self.emit(str(problem))

    def checked(self, url: str) -> None:
        self.documents.append(url)

    def summary(self) -> str:
        """The closing lines: how many repeats went unprinted, and the totals."""
        lines = [
            f"{url}: {count - SHOWN_PER_KIND} more like the above ({kind})"
            for (url, kind), count in self._seen.items()
            if count > SHOWN_PER_KIND
        ]
        problems = len(self.problems)
        lines.append(
            f"{len(self.documents)} document(s) checked, "
            f"{problems} problem{'' if problems == 1 else 's'}"
        )
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not self.problems

    def messages(self, url: str | None = None) -> list[str]:
        """Every message, or those about one URL (handy in tests)."""
        return [p.message for p in self.problems if url is None or p.url == url]
