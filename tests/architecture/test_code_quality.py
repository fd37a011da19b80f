"""ruff and mypy, as configured in pyproject.toml, stay clean; no merge is left half done."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def tool(name):
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def test_ruff_is_clean():
    done = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean():
    done = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


CONFLICT_MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".c", ".h", ".yml", ".yaml", ".sh", ".txt", ""}


def test_no_file_keeps_a_merge_conflict():
    # A conflict committed in docs/benchmarks.md went unnoticed: nothing reads prose.
    skipped = {".git", ".venv", "build", "dist", "node_modules"}
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & skipped or any(part.endswith(".egg-info") or (part.startswith(".")
                                  and part not in {".ci"}) for part in parts):
            continue
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}"
                  for m in CONFLICT_MARKER.finditer(text)]
    assert not found, found
