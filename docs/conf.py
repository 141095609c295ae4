"""Sphinx configuration: MyST Markdown pages, the furo theme, autodoc.

Build with warnings as errors, from the repository root::

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Autodoc imports django_delayq (from this checkout, not an installed copy),
# and its models need a configured Django.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "docs.settings")

import django  # noqa: E402

django.setup()

import django_delayq  # noqa: E402

project = "django-delayq"
author = "django-delayq contributors"
copyright = "django-delayq contributors"
release = django_delayq.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for headings (## delayq.E001 -> #delayq-e001) so they can be linked.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types go next to the documented parameters; the guide pages explain the rest.
autodoc_typehints_description_target = "documented_params"
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"django-delayq {release}"
