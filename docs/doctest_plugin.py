"""A pytest plugin that runs the Python code blocks of README.md and docs/*.md as tests.

``python -m tox -e doctest-docs`` runs ``pytest -p doctest_plugin README.md docs`` with ``docs/``
on ``PYTHONPATH``; any pytest of the repository root can do the same.

Each Markdown file is one test module: its ``python`` blocks run in order in one namespace, so a
later block uses what an earlier one defined. Conventions, all visible in the rendered page:

- A ``python`` block whose first line is ``# needs a CUDA GPU ...`` runs only where CUDA is
  available (it is reported as skipped elsewhere); one whose first line is ``# not run: <why>``
  is illustrative and always skipped (a fragment, or a placeholder for your own code).
- A ``text`` block right after an ``<!-- output -->`` comment is what the preceding ``python``
  blocks printed: the test compares it line by line with the real output (trailing spaces
  ignored). A line ``...`` stands for any number of lines, ``...`` inside a line for any text,
  and timings such as ``took 3 milliseconds`` match any number.

When a page's code prints something new (a change in how traces print, text edited above a
trace so its line numbers moved), ``pytest -p doctest_plugin README.md docs --update-outputs``
rewrites the mismatching output blocks that have no ``...`` with what was printed; review the
diff before committing it.

Only the repository's Markdown is collected here; package tests have their own configuration.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import traceback
from pathlib import Path

import pytest

try:
    from sybil import Example, Sybil
    from sybil.evaluators.python import PythonEvaluator
    from sybil.parsers.markdown import CodeBlockParser
except ImportError:  # only the doctest-docs env has sybil
    Sybil = None

_TIMING = re.compile(r"\b\d+(\.\d+)? (milliseconds|ms|s|seconds|µs)\b")


class _Tee(io.TextIOBase):
    """Writes to the real stdout (so pytest -s still shows it) and keeps a copy."""

    def __init__(self, real):
        self.real, self.copy = real, io.StringIO()

    def write(self, s):
        self.copy.write(s)
        return self.real.write(s)

    def flush(self):
        self.real.flush()


if Sybil is not None:

    class PythonBlocks(CodeBlockParser):
        """``python`` blocks: run them (unless marked), keeping what they print for ``<!-- output -->``."""

        language = "python"

        def __init__(self):
            super().__init__()
            self._run = PythonEvaluator()

        def evaluate(self, example: Example) -> str | None:
            first = str(example.parsed).lstrip().splitlines()[0] if str(example.parsed).strip() else ""
            if first.startswith("# not run"):
                pytest.skip(f"illustrative block: {first.lstrip('# ')}")
            if first.startswith("# needs a CUDA GPU"):
                import torch

                if not torch.cuda.is_available():
                    pytest.skip("needs a CUDA GPU (marked '# needs a CUDA GPU' in the page)")
            example.namespace.setdefault("__name__", "__main__")
            tee = _Tee(sys.stdout)
            try:
                with contextlib.redirect_stdout(tee):
                    self._run(example)
            except Exception:
                # reported as the block's failure, with the traceback (sybil 10's report of an exception
                # raised here fails itself, with an IndexError in its traceback filter)
                return traceback.format_exc()
            finally:
                example.namespace["_printed"] = example.namespace.get("_printed", "") + tee.copy.getvalue()

    class OutputBlocks(CodeBlockParser):
        """``text`` blocks after ``<!-- output -->``: must match what the ``python`` blocks printed."""

        language = "text"

        def __call__(self, document):
            for region in super().__call__(document):
                if document.text[: region.start].rstrip().endswith("<!-- output -->"):
                    yield region

        def evaluate(self, example: Example) -> str | None:
            printed = example.namespace.pop("_printed", "")
            expected = [ln.rstrip() for ln in str(example.parsed).rstrip("\n").splitlines()]
            actual = [ln.rstrip() for ln in printed.rstrip("\n").splitlines()]
            if _matches([_TIMING.sub("N", ln) for ln in expected], [_TIMING.sub("N", ln) for ln in actual]):
                return None
            if _UPDATE and not any("..." in ln for ln in expected):
                block = example.document.text[example.start : example.end]
                body = str(example.parsed)
                at = example.start + block.index(body)
                _updates.setdefault(example.path, []).append((at, at + len(body), printed.rstrip("\n") + "\n"))
                return None
            return "the page shows:\n" + "\n".join(expected) + "\n\nbut the code printed:\n" + "\n".join(actual)

    def _matches(expected: list[str], actual: list[str]) -> bool:
        """Line-by-line equality, with ``...`` lines matching any run of lines (including none)."""
        if not expected:
            return not actual
        if expected[0].strip() == "...":
            return any(_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
        return bool(actual) and _line_matches(expected[0], actual[0]) and _matches(expected[1:], actual[1:])

    def _line_matches(expected: str, actual: str) -> bool:
        if "..." not in expected:
            return expected == actual
        pattern = ".*".join(re.escape(part) for part in expected.split("..."))
        return re.fullmatch(pattern, actual) is not None

    _UPDATE = False
    _updates: dict[str, list[tuple[int, int, str]]] = {}

    def pytest_addoption(parser):
        parser.addoption(
            "--update-outputs",
            action="store_true",
            help="rewrite mismatching <!-- output --> blocks (without '...') with what the code printed",
        )

    def pytest_configure(config):
        global _UPDATE
        _UPDATE = config.getoption("--update-outputs")

    def pytest_sessionfinish(session):
        for path, changes in _updates.items():
            text = Path(path).read_text()
            for start, end, new in sorted(changes, reverse=True):
                text = text[:start] + new + text[end:]
            Path(path).write_text(text)
            print(f"\nupdated {len(changes)} output block(s) in {path}")

    pytest_collect_file = Sybil(
        parsers=[PythonBlocks(), OutputBlocks()],
        path=str(Path(__file__).resolve().parents[1]),
        patterns=["README.md", "docs/*.md"],
    ).pytest()
