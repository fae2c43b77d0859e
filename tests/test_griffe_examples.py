"""tools/griffe_examples.py: docstring examples render as highlighted code on the API pages."""

import importlib.util
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("griffe_examples",
                                              ROOT / "tools" / "griffe_examples.py")
griffe_examples = importlib.util.module_from_spec(spec)
needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocstrings") is None,
                                  reason="the docs extra is not installed")


@pytest.fixture(scope="module")
def examples_as_code():
    pytest.importorskip("griffe")
    spec.loader.exec_module(griffe_examples)
    return griffe_examples.examples_as_code


def test_doctest_lines_under_examples_become_the_section(examples_as_code):
    text = ("An embedding head.\n\nExamples:\n\n>>> head = EmbeddingHead(64)\n"
            ">>> model = keras.Sequential([\n...     head])\n\n>>> model.summary()\n\n"
            "Reference:\n    A paper.")
    assert examples_as_code(text) == (
        "An embedding head.\n\nExamples:\n    >>> head = EmbeddingHead(64)\n"
        "    >>> model = keras.Sequential([\n    ...     head])\n\n    >>> model.summary()\n\n"
        "Reference:\n    A paper.")


def test_other_doctest_lines_are_fenced_and_indented_ones_kept(examples_as_code):
    assert examples_as_code("Use it so:\n\n>>> f(1)\n2\n\nThen more.") == (
        "Use it so:\n\n```pycon\n>>> f(1)\n2\n```\n\nThen more.")
    indented = "Examples:\n    >>> f(1)\n    2"
    assert examples_as_code(indented) == indented


class _Page(HTMLParser):
    """Text of an HTML page outside <pre>/<code>, and how deep block quotes nest."""

    def __init__(self):
        super().__init__()
        self.in_code = 0
        self.quotes = 0
        self.deepest_quote = 0
        self.prose = []
        self.highlighted = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("pre", "code"):
            self.in_code += 1
        if tag == "blockquote":
            self.quotes += 1
            self.deepest_quote = max(self.deepest_quote, self.quotes)
        if tag == "span" and ("class", "gp") in attrs:  # pygments' prompt
            self.highlighted += 1

    def handle_endtag(self, tag):
        if tag in ("pre", "code"):
            self.in_code -= 1
        if tag == "blockquote":
            self.quotes -= 1

    def handle_data(self, data):
        if not self.in_code:
            self.prose.append(data)


@pytest.mark.slow
@needs_mkdocs
def test_api_pages_show_every_example_as_highlighted_code(tmp_path):
    """The built site: no `>>>` line on an API page outside a code block, and none
    turned into Markdown block quotes (how `>>>` at a line's start renders)."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                    str(site)], cwd=ROOT, check=True, capture_output=True)
    pages = sorted(site.glob("api/*/index.html"))
    assert len(pages) >= 10
    prompts = 0
    for page in pages:
        parsed = _Page()
        parsed.feed(page.read_text(encoding="utf-8"))
        prose = "".join(parsed.prose)
        assert ">>>" not in prose, f"{page.parent.name}: a >>> line outside a code block"
        assert parsed.deepest_quote < 2, f"{page.parent.name}: doctest lines as block quotes"
        prompts += parsed.highlighted
    assert prompts >= 100  # the examples' prompts, highlighted as Python sessions
