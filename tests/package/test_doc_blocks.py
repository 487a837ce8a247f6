"""Every ```python block of README.md and docs/*.md runs as written: each in a
fresh interpreter, in an empty temporary working directory, with a timeout.

A block that cannot run everywhere says so on the line before its fence:

- ``<!-- requires: torch -->`` (modules separated by commas): skipped, with the
  reason shown, where a module is not installed, and run where it is;
- ``<!-- skip: REASON -->``: never run. Each such block is listed in SKIPPED
  below, so that adding one is a visible change to this file.
"""

import importlib.util
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT = 300  # seconds per block; the slowest (the README's loader) takes a few

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>skip|requires)\s*:\s*(?P<value>.*?)\s*-->\s*$")
PYTHON = {"python", "py", "python3"}

# (file, reason) of every block marked skip. Keep it short.
SKIPPED: set[tuple[str, str]] = set()


@dataclass
class Block:
    file: str
    line: int  # of the opening fence, 1-based
    code: str
    skip: str | None
    requires: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def blocks(path: Path) -> tuple[list[Block], list[int]]:
    """The python blocks of a Markdown file, and the lines of markers that precede
    no python block."""
    name = str(path.relative_to(ROOT))
    lines = path.read_text().splitlines()
    found: list[Block] = []
    stray: list[int] = []
    marker: tuple[int, str, str] | None = None  # line, kind, value
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            if marker is not None:
                stray.append(marker[0])
            marker = (i + 1, m["kind"], m["value"])
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip() and marker is not None:
                stray.append(marker[0])
                marker = None
            i += 1
            continue
        fence, info = f["fence"], f["info"].strip()
        end = i + 1
        while end < len(lines):
            close = FENCE.match(lines[end])
            if close and close["fence"].startswith(fence) and not close["info"].strip():
                break
            end += 1
        language = info.split()[0].lower() if info else ""
        if language in PYTHON:
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            skip = marker[2] if marker and marker[1] == "skip" else None
            requires = marker[2] if marker and marker[1] == "requires" else ""
            mods = tuple(m.strip() for m in requires.split(",") if m.strip())
            found.append(Block(name, i + 1, code, skip, mods))
        elif marker is not None:
            stray.append(marker[0])
        marker = None
        i = end + 1
    if marker is not None:
        stray.append(marker[0])
    return found, stray


ALL = [b for path in DOCS for b in blocks(path)[0]]


def params():
    out = []
    for b in ALL:
        marks = [pytest.mark.skip(reason=f"{b.id}: {b.skip}")] if b.skip else []
        out.append(pytest.param(b, id=b.id, marks=marks))
    return out


@pytest.mark.parametrize("block", params())
def test_the_block_runs(block: Block, tmp_path):
    missing = [m for m in block.requires if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)} (not installed)")
    script = tmp_path / "block.py"
    script.write_text(block.code)
    try:
        out = subprocess.run(
            [sys.executable, script.name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.id} ran longer than {TIMEOUT} s")
    if out.returncode != 0:
        pytest.fail(
            f"{block.id} exited with status {out.returncode}\n"
            f"--- stdout\n{out.stdout[-4000:]}\n--- stderr\n{out.stderr[-4000:]}"
        )


def test_markers_precede_python_blocks_and_skips_are_listed():
    stray = {str(p.relative_to(ROOT)): blocks(p)[1] for p in DOCS}
    assert {k: v for k, v in stray.items() if v} == {}
    assert {(b.file, b.skip) for b in ALL if b.skip} == SKIPPED
    assert all(b.skip.strip() for b in ALL if b.skip is not None)
    for b in ALL:  # even the blocks that never run are Python
        compile(b.code, b.id, "exec")


def test_the_parser_finds_blocks_and_markers(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n"
        "```python\nprint(1)\n```\n"
        "<!-- skip: needs network -->\n"
        "```python title\nimport x\n```\n"
        "<!-- requires: torch, jax -->\n\n"
        "```py\nimport torch\n```\n"
        "- item\n\n  ```python\n  a = 1\n    b = 2\n  ```\n"
        "````text\n```python\nnot a block\n```\n````\n"
        "<!-- skip: orphan -->\nparagraph\n"
        "<!-- requires: torch -->\n```bash\nls\n```\n"
    )
    found, stray = blocks(doc)
    assert [(b.line, b.code, b.skip, b.requires) for b in found] == [
        (2, "print(1)\n", None, ()),
        (6, "import x\n", "needs network", ()),
        (11, "import torch\n", None, ("torch", "jax")),
        (16, "a = 1\n  b = 2\n", None, ()),
    ]
    assert stray == [25, 27]
