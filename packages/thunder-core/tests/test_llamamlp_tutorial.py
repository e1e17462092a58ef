"""The LLaMAMLP section of the "Zero to Thunder" tutorial, on CPU with small sizes."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import thunder


class LLaMAMLP(torch.nn.Module):
    def __init__(self, n_embd: int, intermediate_size: int) -> None:
        super().__init__()
        self.fc_1 = torch.nn.Linear(n_embd, intermediate_size, bias=False)
        self.fc_2 = torch.nn.Linear(n_embd, intermediate_size, bias=False)
        self.proj = torch.nn.Linear(intermediate_size, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = torch.nn.functional.silu(x_fc_1) * x_fc_2
        return self.proj(x)


N_EMBD, INTERMEDIATE = 256, 688


@pytest.fixture
def mlp_run():
    """The tutorial's steps: build the MLP, freeze it, jit it, call it once; returns (m, tm, x, out)."""
    torch.manual_seed(0)
    m = LLaMAMLP(N_EMBD, INTERMEDIATE)
    for p in m.parameters():
        p.requires_grad_(False)
    tm = thunder.jit(m)
    x = torch.randn(2, 128, N_EMBD)
    out = tm(x)
    return m, tm, x, out


def _final_trace_source(tm) -> str:
    return str(thunder.last_traces(tm)[-1])


def test_matches_eager(mlp_run):
    m, tm, x, out = mlp_run
    expected = m(x)
    assert out.shape == expected.shape == (2, 128, N_EMBD)
    assert out.dtype == torch.float32
    assert (out - expected).abs().max().item() < 1e-5


def test_repr_is_the_tutorials_form(mlp_run):
    m, tm, _, _ = mlp_run
    expected = (
        "ThunderModule(\n"
        "  (_model): LLaMAMLP(\n"
        f"    (fc_1): Linear(in_features={N_EMBD}, out_features={INTERMEDIATE}, bias=False)\n"
        f"    (fc_2): Linear(in_features={N_EMBD}, out_features={INTERMEDIATE}, bias=False)\n"
        f"    (proj): Linear(in_features={INTERMEDIATE}, out_features={N_EMBD}, bias=False)\n"
        "  )\n"
        ")"
    )
    assert repr(tm) == expected
    # the wrapped module's own repr is nested unchanged
    assert repr(m) in repr(tm).replace("\n  ", "\n")


def test_final_trace_header_and_signature(mlp_run):
    _, tm, _, _ = mlp_run
    src = _final_trace_source(tm)
    assert src.startswith("# Constructed by Delete Last Used")
    assert "def computation(x, t_fc_1_weight, t_fc_2_weight, t_proj_weight):" in src


def test_final_trace_type_comments(mlp_run):
    _, tm, _, _ = mlp_run
    src = _final_trace_source(tm)
    assert '# x: "cpu f32[2, 128, 256]"' in src
    assert '# t_fc_1_weight: "cpu f32[688, 256]"' in src
    assert '# t_proj_weight: "cpu f32[256, 688]"' in src
    assert '# x_fc_1: "cpu f32[2, 128, 688]"' in src


def test_final_trace_calls_linear_with_decomposition_comments(mlp_run):
    _, tm, _, _ = mlp_run
    lines = _final_trace_source(tm).splitlines()
    (i,) = [n for n, line in enumerate(lines) if "= torch.nn.functional.linear(x, t_fc_1_weight, None)" in line]
    call, ltorch_line, prims_line = lines[i], lines[i + 1], lines[i + 2]
    assert call.lstrip().startswith("x_fc_1 = torch.nn.functional.linear(x, t_fc_1_weight, None)")
    assert ltorch_line.lstrip().startswith("# x_fc_1 = ltorch.linear(x, t_fc_1_weight, None)")
    assert prims_line.lstrip().startswith("# x_fc_1 = prims.linear(x, t_fc_1_weight, None)")

    def indent(s: str) -> int:
        return len(s) - len(s.lstrip())

    # the decomposition is nested: each level is indented deeper than the one above it
    assert indent(call) < indent(ltorch_line) < indent(prims_line)


def test_final_trace_deletes_weight_after_last_use(mlp_run):
    _, tm, _, _ = mlp_run
    lines = [line.strip() for line in _final_trace_source(tm).splitlines()]
    use = next(n for n, line in enumerate(lines) if line.startswith("x_fc_1 = torch.nn.functional.linear("))
    dels = [n for n, line in enumerate(lines) if line.startswith("del ") and "t_fc_1_weight" in line]
    assert dels, "t_fc_1_weight is never deleted"
    assert dels[0] > use
    assert "del t_fc_1_weight" in lines


def test_final_trace_names_the_users_source_line(mlp_run):
    _, tm, _, _ = mlp_run
    src = _final_trace_source(tm)
    comments = [line.strip() for line in src.splitlines() if line.strip().startswith("#")]
    assert any(c.endswith("x_fc_1 = self.fc_1(x)") for c in comments)
    assert any(c.endswith("x = torch.nn.functional.silu(x_fc_1) * x_fc_2") for c in comments)
    # the comment gives the line number of the user's line in this file
    line_no = _line_of(LLaMAMLP.forward, "x_fc_1 = self.fc_1(x)")
    assert any(re.search(rf"test_llamamlp_tutorial\.py:{line_no}\b", c) for c in comments)


def test_first_trace_is_unoptimised(mlp_run):
    _, tm, _, _ = mlp_run
    traces = thunder.last_traces(tm)
    assert len(traces) >= 2
    first = str(traces[0])
    assert "ltorch.linear(x, t_fc_1_weight, None)" in first
    # the torch executor has not claimed anything yet
    assert "torch.nn.functional.linear(" not in first
    assert "del " not in first


def test_traces_are_valid_python(mlp_run):
    _, tm, _, _ = mlp_run
    for trace in thunder.last_traces(tm):
        compile(str(trace), "<trace>", "exec")
    for trace in thunder.last_prologue_traces(tm):
        compile(str(trace), "<prologue>", "exec")


def test_prologue_reads_parameters(mlp_run):
    _, tm, _, _ = mlp_run
    src = str(thunder.last_prologue_traces(tm)[-1])
    assert "computation(x, t_fc_1_weight, t_fc_2_weight, t_proj_weight)" in src


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in the source of {fn.__qualname__}")
