"""griffe extension (mkdocs.yml, mkdocstrings' `extensions:`): docstring examples as code.

The package's docstrings write their examples as doctest lines at the docstring's own
indentation, after an `Examples:` line::

    Examples:

    >>> loss = keras_dml.losses.ArcFace(num_classes=100)

Google style reads an `Examples:` section only from its indented lines, so the site
showed those lines as Markdown: nested block quotes whose lines ran together. Before
mkdocstrings parses a docstring, this extension indents such doctest lines under their
`Examples:` line (the section then renders them as highlighted Python code blocks) and
fences any other doctest lines as `pycon` code.
"""

import re

import griffe

_HEADER = re.compile(r"^Examples?:\s*$")
_PROMPT = ">>>"


def _doctest_block(lines, start):
    """The end of the doctest block starting at `lines[start]`: its prompts, their `...`
    continuations and output, up to a blank line."""
    end = start + 1
    while end < len(lines) and lines[end].strip():
        end += 1
    return end


def examples_as_code(text):
    """`text` (a cleaned docstring) with each doctest block at column 0 indented under
    its `Examples:` line, or fenced as `pycon` where no such line precedes it."""
    lines = text.split("\n")
    out = []
    in_examples = False  # after an Examples: line, until prose at column 0
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith(_PROMPT):
            end = _doctest_block(lines, index)
            block = lines[index:end]
            if in_examples:
                while out and not out[-1].strip() and _HEADER.match(out[-2] if len(out) > 1
                                                                     else ""):
                    out.pop()  # the section's lines follow its header
                out.extend("    " + entry for entry in block)
            else:
                out.extend(["```pycon", *block, "```"])
            index = end
            continue
        if _HEADER.match(line):
            in_examples = True
        elif line.strip() and not line.startswith(" "):
            in_examples = False
        out.append(line)
        index += 1
    return "\n".join(out)


class DoctestExamples(griffe.Extension):
    """Rewrites every docstring with `examples_as_code` as griffe loads it."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None and _PROMPT in obj.docstring.value:
            obj.docstring.value = examples_as_code(obj.docstring.value)
