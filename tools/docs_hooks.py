"""mkdocs hooks (mkdocs.yml `hooks:`): pages kept beside the code, and links out of docs/.

Some pages live where their readers on the repository look for them
(`benchmarks/README.md`, `savedmodels/README.md`, `CHANGELOG.md`); the site shows them
as generated pages. Every relative link in every page is resolved against the file it
was written in: a link into docs/ or to one of those pages becomes a link to that page;
a link to another file of the repository (a script, a test) becomes its path in code
type, as the site does not serve it; a link to a file that does not exist is a warning,
which fails `mkdocs build --strict`.
"""

import logging
import os
import posixpath
import re

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.docs_hooks")

#: site page -> the repository file it shows
OUTSIDE_PAGES = {
    "benchmarks.md": "benchmarks/README.md",
    "savedmodels.md": "savedmodels/README.md",
    "changelog.md": "CHANGELOG.md",
}

# [text](target) and ![alt](target), outside code spans; the target has no spaces.
_LINK = re.compile(r"(!?\[[^\]\n]*\])\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _root(config):
    return os.path.dirname(os.path.abspath(config["config_file_path"]))


def _docs_prefix(config):
    return os.path.relpath(config["docs_dir"], _root(config)).replace(os.sep, "/")


def on_files(files, config):
    """Adds the pages kept outside docs/ to the site."""
    root = _root(config)
    for page, source in OUTSIDE_PAGES.items():
        with open(os.path.join(root, source), encoding="utf-8") as handle:
            files.append(File.generated(config, page, content=handle.read()))
    return files


def _source_path(page, config):
    """The page's file, relative to the repository root."""
    uri = page.file.src_uri
    return OUTSIDE_PAGES.get(uri, posixpath.join(_docs_prefix(config), uri))


def _rewrite(match, page, config):
    label, target = match.groups()
    if _SCHEME.match(target) or target.startswith(("#", "/")):
        return match.group(0)
    path, _, anchor = target.partition("#")
    source = _source_path(page, config)
    repository_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    anchor = f"#{anchor}" if anchor else ""
    page_dir = posixpath.dirname(page.file.src_uri) or "."
    docs = _docs_prefix(config) + "/"
    site_pages = {source: page for page, source in OUTSIDE_PAGES.items()}
    if repository_path in site_pages:
        return f"{label}({posixpath.relpath(site_pages[repository_path], page_dir)}{anchor})"
    if repository_path.startswith(docs):
        inside = repository_path[len(docs):]
        return f"{label}({posixpath.relpath(inside, page_dir)}{anchor})"
    if os.path.exists(os.path.join(_root(config), repository_path)):
        return f"{label[1:-1]} (`{repository_path}`)" if label[1:-1] != repository_path \
            else f"`{repository_path}`"
    log.warning("%s links to %r, which is not in the repository", source, target)
    return match.group(0)


def on_page_markdown(markdown, page, config, files):
    """Resolves each relative link against the file the page was written in."""
    lines, in_fence = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
        if not in_fence:
            line = _LINK.sub(lambda match: _rewrite(match, page, config), line)
        lines.append(line)
    return "\n".join(lines)
