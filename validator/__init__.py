"""A ResourceSync 1.1 source validator, independent of the portal.

`validate_source(url)` walks a source from its Source Description or
Capability List and returns a `Report` with one problem per line; the
`validate_source` management command prints it. The checks live in small
modules: `values` (single values), `rules` (documents), `http` (serving),
`schema` (the official XSDs shipped in `xsd/`), `crawl` (what follows what).
"""

from .crawl import validate_source
from .problems import Problem, Report

__all__ = ["Problem", "Report", "validate_source"]
