"""Every page in docs/ is reachable: listed in README.md's documentation list and in mkdocs.yml's nav."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.name for p in (ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", PAGES)
def test_page_is_listed(page):
    assert f"(docs/{page})" in (ROOT / "README.md").read_text(), f"README.md's documentation list lacks {page}"
    assert f": {page}\n" in (ROOT / "mkdocs.yml").read_text(), f"mkdocs.yml's nav lacks {page}"
