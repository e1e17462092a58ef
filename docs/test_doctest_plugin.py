"""The doc-test plugin's output comparison: what it accepts and what it must reject."""

import doctest_plugin as plugin


def _m(expected: str, actual: str) -> bool:
    return plugin._matches(expected.splitlines(), actual.splitlines())


def test_exact_and_mismatch():
    assert _m("a\nb", "a\nb")
    assert not _m("a\nb", "a\nc")
    assert not _m("a", "a\nb")  # extra output is a mismatch
    assert not _m("a\nb", "a")


def test_ellipsis_lines_and_inline():
    assert _m("a\n...\nd", "a\nb\nc\nd")
    assert _m("a\n...\nd", "a\nd")  # ... may stand for no lines
    assert not _m("a\n...\nd", "a\nb\nc")
    assert _m("x = f(...)  # ok", "x = f(1, 2)  # ok")
    assert not _m("x = f(...)  # ok", "x = g(1, 2)  # ok")


def test_timings_are_normalised():
    sub = plugin._TIMING.sub
    assert sub("N", "(took 0 milliseconds)") == sub("N", "(took 12 milliseconds)")
    assert sub("N", "t0 = f(a)") == "t0 = f(a)"
