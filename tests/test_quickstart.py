"""The Python quickstart runs as written: the first ```python block of the front page."""

import os
import re
import runpy

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the pages whose first ```python block is the quickstart
PAGES = ("README.md", "docs/index.md")


def first_python_block(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        blocks = re.findall(r"^```python\n(.*?)^```", handle.read(), re.M | re.S)
    assert blocks, f"{path} has no ```python block"
    return blocks[0]


def test_the_first_python_block_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n```bash\nls\n```\n```python\nx = 1\n```\n```python\ny = 2\n```\n")
    assert first_python_block(str(page)) == "x = 1\n"


@pytest.mark.slow  # a training run: 100 steps, two evaluations, an export
@pytest.mark.parametrize("page", PAGES)
def test_quickstart_runs_as_written(page, tmp_path, monkeypatch):
    code = first_python_block(page)
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 15, "the quickstart fits 15 lines"
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(script), run_name="__main__")
    history = namespace["model"].history.history
    assert len(history["loss"]) == 2 and 0 <= history["val_recall@1"][-1] <= 1
    assert os.path.exists(tmp_path / "savedmodels" / "omniglot" / "1" / "saved_model.pb")
