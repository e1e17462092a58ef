"""thunder.extend.claim_bound_symbols and trace_executors: claiming bound symbols a pass adds to a claimed trace."""

from __future__ import annotations

import torch

import thunder
import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.trace import from_trace, tracectx
from thunder.extend import claim_bound_symbols, get_executor, trace_executors


def _claimed_trace():
    def fn(a, b):
        return a * b + 1

    jfn = thunder.jit(fn, executors=["torch"])
    jfn(torch.randn(3), torch.randn(3))
    return thunder.last_traces(jfn)[-1], jfn


def test_trace_executors_are_the_executors_the_trace_was_claimed_with():
    trace, jfn = _claimed_trace()
    executors = trace_executors(trace)
    assert executors and executors[0] is get_executor("torch"), executors
    assert all(isinstance(ex, thunder.extend.Executor) for ex in executors)


def test_trace_executors_of_an_unclaimed_trace_is_empty():
    def fn(a):
        return a.sin()

    jfn = thunder.jit(fn)
    jfn(torch.randn(2))
    assert trace_executors(thunder.last_traces(jfn)[0]) == ()


def test_claim_bound_symbols_claims_what_a_pass_records_and_the_result_runs():
    trace, _ = _claimed_trace()
    a = next(p for p in trace.args)
    scope: list = []
    with tracectx(trace):
        trace.scopes.append(scope)
        try:
            out = ltorch.exp(ltorch.mul(a, 2.0))
        finally:
            trace.scopes.pop()
    claimed = claim_bound_symbols(scope, trace_executors(trace), trace)
    torch_ex = get_executor("torch")
    assert claimed and all(b.sym.executor is torch_ex for b in claimed), [(b.sym.name, b.sym.executor) for b in claimed]
    # the trace with the claimed calls appended (returning their result) runs them: exp(2 * a)
    new = from_trace(trace)
    kept = [b for b in trace.bound_symbols if b.sym.name not in ("python_return", "python_del")]
    new.bound_symbols = kept + claimed
    new.scopes = [new.bound_symbols]
    with tracectx(new):
        prims.python_return(out)
    args = [torch.randn(3), torch.randn(3)]
    torch.testing.assert_close(new.python_callable()(*args), torch.exp(args[0] * 2.0))
