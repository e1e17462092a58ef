"""The query functions on jitted functions: compile data and stats, transforms, interpreter log, options."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.trace import TraceCtx, from_trace

THIS_FILE = os.path.abspath(__file__)


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in the source of {fn.__qualname__}")


def silu_mul(x, y):
    return torch.nn.functional.silu(x) * y


def mul_to_add(trace: TraceCtx) -> TraceCtx:
    """A user transform: every top-level ltorch.mul becomes ltorch.add."""
    new = from_trace(trace)
    new.bound_symbols = [
        b.from_bsym(sym=ltorch.add, subsymbols=()) if b.sym is ltorch.mul else b for b in trace.bound_symbols
    ]
    return new


def _run(jfn):
    jfn(torch.randn(3), torch.randn(3))
    return jfn


def test_compile_data_fn_is_the_function():
    jfn = thunder.jit(silu_mul)
    assert thunder.compile_data(jfn).fn is silu_mul


def test_compile_data_of_module():
    m = torch.nn.Linear(2, 2)
    tm = thunder.jit(m)
    assert thunder.compile_data(tm).fn is m


def test_compile_data_of_non_jitted_raises_type_error():
    with pytest.raises(TypeError, match="silu_mul"):
        thunder.compile_data(silu_mul)


def test_compile_stats_of_non_jitted_raises_type_error():
    with pytest.raises(TypeError):
        thunder.compile_stats(torch.nn.Linear(2, 2))


def test_compile_stats_stage_times():
    jfn = _run(thunder.jit(silu_mul))
    times = thunder.compile_stats(jfn).last_stage_times_ns
    for stage in ("tracing", "executors", "codegen"):
        assert times[stage] > 0


def test_jitted_function_keeps_name_and_doc():
    def documented(a):
        """Doubles."""
        return a * 2

    jfn = thunder.jit(documented)
    assert jfn.__name__ == "documented"
    assert jfn.__doc__ == "Doubles."


def test_list_transforms_returns_the_transforms():
    jfn = thunder.jit(silu_mul, transforms=[mul_to_add])
    assert thunder.list_transforms(jfn) == [mul_to_add]
    assert thunder.list_transforms(thunder.jit(silu_mul)) == []


def test_user_transform_is_applied():
    def f(x, y):
        return x * y

    jfn = thunder.jit(f, transforms=[mul_to_add])
    x, y = torch.full((2,), 3.0), torch.full((2,), 2.0)
    torch.testing.assert_close(jfn(x, y), x + y)


def test_user_transform_appears_in_last_traces():
    def f(x, y):
        return x * y

    jfn = _run(thunder.jit(f, transforms=[mul_to_add]))
    sources = [str(t) for t in thunder.last_traces(jfn)]
    assert "ltorch.mul(x, y)" in sources[0]
    after = [i for i, s in enumerate(sources) if "mul_to_add" in s.splitlines()[0]]
    assert after, "no trace is marked as constructed by the transform"
    assert "ltorch.add(x, y)" in sources[after[0]]
    assert "torch.add(x, y)" in sources[-1] and "mul" not in sources[-1]


def test_interpreter_log_lists_silu_and_mul_with_user_lines():
    jfn = _run(thunder.jit(silu_mul))
    log = thunder.last_interpreter_log(jfn)
    line = _line_of(silu_mul, "torch.nn.functional.silu(x) * y")
    symbols = [r["symbol"] for r in log]
    assert "silu" in symbols and "mul" in symbols
    assert symbols.index("silu") < symbols.index("mul")
    for record in log:
        assert record["user_file"] == THIS_FILE
        assert record["user_line"] == line


def test_interpreter_log_file_is_the_calling_line():
    """silu and mul are both called directly from the user's line: that is their file and line."""
    jfn = _run(thunder.jit(silu_mul))
    line = _line_of(silu_mul, "torch.nn.functional.silu(x) * y")
    for record in thunder.last_interpreter_log(jfn):
        assert (record["file"], record["line"]) == (THIS_FILE, line), record


def test_interpreted_instructions_name_calls_and_lines():
    jfn = _run(thunder.jit(silu_mul))
    instructions = thunder.last_interpreted_instructions(jfn)
    line = _line_of(silu_mul, "torch.nn.functional.silu(x) * y")
    assert len(instructions) == 2
    silu, mul = instructions
    assert "silu" in silu and "mul" in mul
    assert f"{THIS_FILE}:{line}" in mul
    assert f"{THIS_FILE}:{line}" in silu


def test_interpreter_log_is_of_last_cache_miss():
    def f(x, y):
        return x + y if x.ndim == 1 else x - y

    jfn = thunder.jit(f)
    jfn(torch.ones(2), torch.ones(2))
    assert [r["symbol"] for r in thunder.last_interpreter_log(jfn)] == ["add"]
    jfn(torch.ones(2, 2), torch.ones(2, 2))
    assert [r["symbol"] for r in thunder.last_interpreter_log(jfn)] == ["sub"]


def test_last_compile_options_prints_used_and_unused(capsys):
    jfn = _run(thunder.jit(silu_mul, record_interpreter_log=True, not_an_option=3))
    thunder.last_compile_options(jfn)
    out = capsys.readouterr().out
    used, unused = out.split("Unused compile options:")
    assert "Used compile options:" in used
    assert "record_interpreter_log = True" in used
    assert "not_an_option = 3" in unused
    assert "not_an_option" not in used


def test_last_compile_options_without_options(capsys):
    jfn = _run(thunder.jit(silu_mul))
    thunder.last_compile_options(jfn)
    out = capsys.readouterr().out
    assert "Used compile options:" in out and "Unused compile options:" in out


def test_record_interpreter_log_false_records_nothing():
    jfn = _run(thunder.jit(silu_mul, record_interpreter_log=False))
    assert thunder.last_interpreter_log(jfn) == []


@pytest.mark.parametrize(
    "query",
    [
        thunder.last_traces,
        thunder.last_prologue_traces,
        thunder.last_interpreter_log,
        thunder.last_interpreted_instructions,
    ],
)
def test_query_before_any_call_raises_clear_error(query):
    jfn = thunder.jit(silu_mul)
    with pytest.raises(RuntimeError, match="after the jitted function has been called"):
        query(jfn)


def test_cache_counts_start_at_zero():
    jfn = thunder.jit(silu_mul)
    assert thunder.cache_hits(jfn) == 0 and thunder.cache_misses(jfn) == 0


def test_last_traces_of_module_and_function_agree():
    m = torch.nn.Linear(3, 2)
    tm = thunder.jit(m)
    with torch.no_grad():
        tm(torch.randn(4, 3))
    traces = thunder.last_traces(tm)
    assert traces[-1] is thunder.compile_stats(tm).last_traces[-1]
    assert "torch.nn.functional.linear(" in str(traces[-1])
