"""Inputs that used to end the Python process, and errors that must name the user's line.

The crash cases run in one subprocess (a SIGFPE or a C++ exception there would otherwise take the
test runner down); each case prints one line, so a dead process names the case that killed it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import thunder

_CASES = textwrap.dedent(
    r"""
    import json, sys, warnings
    import torch
    import torch.nn.functional as F
    import thunder

    warnings.simplefilter("ignore")

    def report(name, **result):
        print(json.dumps({"case": name, **result}), flush=True)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    for name, q_shape, kv_shape in [
        ("sdpa-empty-sequence", (1, 2, 0, 4), (1, 2, 0, 4)),
        ("sdpa-zero-heads", (1, 0, 3, 4), (1, 0, 3, 4)),
        ("sdpa-empty-keys", (1, 2, 3, 4), (1, 2, 0, 4)),
        ("sdpa-zero-batch", (0, 2, 3, 4), (0, 2, 3, 4)),
    ]:
        print(json.dumps({"start": name}), flush=True)
        q, k, v = torch.randn(q_shape), torch.randn(kv_shape), torch.randn(kv_shape)
        out = thunder.jit(sdpa)(q, k, v)
        ref = sdpa(q, k, v)
        report(name, same=bool(out.shape == ref.shape and torch.equal(out.isnan(), ref.isnan())
                               and torch.allclose(out.nan_to_num(), ref.nan_to_num())))

    nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    sparse = torch.randn(2, 2).to_sparse()
    many = [torch.randn(2) for _ in range(12)]  # (the prologue's checks of many tensors loop over a tuple)
    for name, warm, odd in [
        ("nested-warm", True, nested),
        ("nested-cold", False, nested),
        ("sparse-warm", True, sparse),
        ("nested-warm-many", True, nested),
        ("sparse-warm-many", True, sparse),
    ]:
        print(json.dumps({"start": name}), flush=True)
        jf = thunder.jit(lambda a, *rest: a * 2 + sum(rest))
        rest = many if name.endswith("-many") else []
        if warm:
            jf(torch.randn(2) if odd is nested else torch.randn(2, 2), *rest)
        try:
            jf(odd, *rest)
            report(name, error=None)
        except Exception as e:
            report(name, error=type(e).__name__, message=str(e))

    # a module's parameter replaced by a nested one (the prologue reads parameters from the module)
    for name, n_layers in [("nested-parameter", 1), ("nested-parameter-many", 12)]:
        print(json.dumps({"start": name}), flush=True)
        m = torch.nn.Sequential(*[torch.nn.Linear(2, 2, bias=False) for _ in range(n_layers)])
        jm = thunder.jit(m)
        jm(torch.randn(2))
        m[0].weight = torch.nn.Parameter(torch.nested.nested_tensor([torch.randn(2), torch.randn(2)]))
        try:
            jm(torch.randn(2))
            report(name, error=None)
        except Exception as e:
            report(name, error=type(e).__name__, message=str(e))

    import numpy as np
    print(json.dumps({"start": "numpy"}), flush=True)
    jf = thunder.jit(lambda a: a * 2)
    for warm in (False, True):
        try:
            jf(np.ones(2, dtype=np.float32))
            report("numpy", error=None)
        except Exception as e:
            report("numpy", error=type(e).__name__, message=str(e))
        jf(torch.ones(2))
    """
)


@pytest.fixture(scope="module")
def crash_results():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(thunder.__file__)), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _CASES], capture_output=True, text=True, env=env, timeout=600)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    started = [line["start"] for line in lines if "start" in line]
    assert proc.returncode == 0, (
        f"the process died (return code {proc.returncode}) in case {started[-1] if started else '?'}:\n{proc.stderr[-3000:]}"
    )
    results: dict[str, list] = {}
    for line in lines:
        if "case" in line:
            results.setdefault(line["case"], []).append(line)
    return results


@pytest.mark.parametrize("case", ["sdpa-empty-sequence", "sdpa-zero-heads", "sdpa-empty-keys", "sdpa-zero-batch"])
def test_sdpa_empty_inputs_match_eager(crash_results, case):
    assert crash_results[case] == [{"case": case, "same": True}]


@pytest.mark.parametrize(
    "case",
    ["nested-warm", "nested-cold", "sparse-warm", "nested-warm-many", "sparse-warm-many"]
    + ["nested-parameter", "nested-parameter-many"],
)
def test_unusual_tensor_input_is_a_clear_error(crash_results, case):
    (result,) = crash_results[case]
    assert result["error"] == "TypeError"
    assert case.split("-")[0] in result["message"]


def test_numpy_argument_is_a_clear_error(crash_results):
    results = crash_results["numpy"]
    assert len(results) == 2  # cold and warm
    for r in results:
        assert r["error"] == "TypeError" and "torch.from_numpy" in r["message"]


def _nonzero(x):
    return torch.nonzero(x > 0)


def _unique(x):
    return torch.unique(x)


def _mask(x):
    return x[x > 0]


def _register_hook(x):
    y = x * 2
    y.register_hook(lambda g: g)
    return y


def _autograd_grad(x):
    y = (x * x).sum()
    return torch.autograd.grad(y, x)


@pytest.mark.parametrize("fn", [_nonzero, _unique, _mask], ids=lambda f: f.__name__)
def test_data_dependent_output_sizes_trace(fn):
    """Ops whose output size depends on the values (these used to be untraceable) give eager's answer, for
    inputs selecting different numbers of elements, from one program."""
    jf = thunder.jit(fn)
    for seed in range(3):
        x = torch.randn(6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(jf(x), fn(x))
    assert thunder.cache_misses(jf) == 1


@pytest.mark.parametrize("fn", [_register_hook, _autograd_grad], ids=lambda f: f.__name__)
def test_untraceable_calls_name_the_users_line(fn):
    x = torch.randn(4, requires_grad=fn in (_register_hook, _autograd_grad))
    with pytest.raises(Exception) as info:
        thunder.jit(fn)(x)
    message = str(info.value)
    assert __file__ in message and fn.__name__ in message, message
