"""Sphinx configuration of agentturn's documentation (``sphinx-build -W -b html docs build/docs``).

MyST Markdown pages, the furo theme, autodoc for the modules' docstrings, and one local
extension (``_ext/agentturn_reference.py``) that writes the events' and commands' reference from
the library's own registry. Nothing is fetched from the network while building.
"""

from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import agentturn  # noqa: E402  (after the path set-up, like every Sphinx conf)

project = "agentturn"
author = "the agentturn authors"
copyright = "the agentturn authors (MIT licence)"
release = agentturn.__version__
version = release

extensions = [
    "myst_nb",  # MyST Markdown pages and the example notebooks, executed at build time
    "sphinx.ext.autodoc",
    "agentturn_reference",
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "notebooks/README.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# The notebooks (docs/notebooks is a link to examples/notebooks) are committed without outputs
# and executed on every build, so the site shows what the library does today; a cell that
# raises fails the build. Their diagrams are the committed SVGs: no Mermaid, nothing fetched.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 120

# autodoc: members in source order, documented members only; type hints in the description.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
# The library's docstrings name classes by their defining module; every reference resolvable
# in the reference pages resolves, the others stay plain text (nitpicky is off).

html_theme = "furo"
html_title = f"agentturn {release}"
