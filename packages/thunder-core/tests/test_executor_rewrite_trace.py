"""``Executor.rewrite_trace``: an executor rewrites the traced program before autodiff and claiming."""

from __future__ import annotations

import torch

import thunder
import thunder.torch as ltorch
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import from_trace
from thunder.core.transforms import get_grad, put_grad
from thunder.extend import OperatorExecutor

# sin(cos(x)) fused into one composite whose subsymbols are the recorded ops
sin_cos = Symbol("sin_cos", None, id="test::sin_cos", print_name="sin_cos")


class RewritingExecutor(OperatorExecutor):
    def rewrite_trace(self, trace):
        bsyms = trace.bound_symbols
        out, changed = [], False
        for b in bsyms:
            prev = out[-1] if out else None
            if b.sym is ltorch.sin and prev is not None and prev.sym is ltorch.cos and b.args[0] is prev.output:
                uses = sum(1 for c in bsyms for p in c.flat_args if p is prev.output)
                if uses == 1:
                    out[-1] = BoundSymbol(sin_cos, (prev.args[0],), {}, b.output, [prev, b])
                    changed = True
                    continue
            out.append(b)
        if not changed:
            return trace
        new = from_trace(trace)
        new.bound_symbols = out
        new.scopes = [out]
        return new


def _executor(accept: bool):
    ex = RewritingExecutor(f"rewriting_{accept}")
    op = ex.register_operator(
        "fused_sin_cos", meta=lambda x: thunder.TensorProxy(like=x), fn=lambda x: torch.sin(torch.cos(x))
    )

    def grad_transform(x):
        y = op(x)
        put_grad(x, -ltorch.cos(ltorch.cos(x)) * ltorch.sin(x) * get_grad(y))
        return y

    ex.register_implementation(sin_cos, checker=lambda x: accept, execution_transform=op, grad_transform=grad_transform)
    return ex


def fn(x):
    return torch.sin(torch.cos(x)) * 2


def test_rewritten_chain_is_claimed_forward_and_backward():
    ex = _executor(True)
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    x = torch.randn(5, requires_grad=True)
    out = jfn(x)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_()
    fn(xr).sum().backward()
    torch.testing.assert_close(out, fn(x.detach()))
    torch.testing.assert_close(x.grad, xr.grad)
    traces = thunder.last_traces(jfn)
    assert "sin_cos(" in str(traces[1])  # the rewritten trace comes right after tracing
    assert "fused_sin_cos(" in str(traces[-1])


def test_declined_composite_runs_its_subsymbols():
    ex = _executor(False)
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    x = torch.randn(4, requires_grad=True)
    out = jfn(x)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_()
    fn(xr).sum().backward()
    torch.testing.assert_close(out, fn(x.detach()))
    torch.testing.assert_close(x.grad, xr.grad)
    assert "fused_sin_cos(" not in str(thunder.last_traces(jfn)[-1])


def test_default_rewrite_changes_nothing():
    ex = OperatorExecutor("plain")
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    jfn(torch.randn(3))
    assert all("Rewritten" not in str(t.provenance) for t in thunder.last_traces(jfn))
