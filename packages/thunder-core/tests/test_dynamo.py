"""ThunderFX: Thunder as a torch.compile backend, against eager PyTorch (outputs and gradients)."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.dynamo import ThunderCompiler, thunderfx
from thunder.extend import OperatorExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _line_of(fn, text: str) -> int:
    """The line number of the first line of ``fn``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _assert_grads_equal(actual_out, expected_out, inputs, *, atol=None, rtol=None):
    def total(out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        outs = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        assert outs, "no output requires grad"
        return sum(o.sum() for o in outs)

    actual = torch.autograd.grad(total(actual_out), inputs)
    expected = torch.autograd.grad(total(expected_out), inputs)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol)


def branchy(x, w):
    y = torch.nn.functional.linear(x, w).relu()
    if y.sum() > 0:
        y = y * 2
    else:
        y = y - 1
    scale = y.mean().item()
    z = torch.special.bessel_j0(y)
    return y.sin() * scale + z


def test_data_dependent_branch_item_and_unsupported_op():
    cf = thunderfx(branchy)
    w = torch.randn(5, 4, requires_grad=True)
    for sign in (1.0, -1.0):  # both sides of the branch
        x = (sign * torch.rand(3, 4) + 0.1 * sign).requires_grad_()
        actual, expected = cf(x, w), branchy(x, w)
        torch.testing.assert_close(actual, expected)
        _assert_grads_equal(actual, expected, (x, w))

    breaks = cf.graph_breaks
    assert len(breaks) == 2
    branch_line = _line_of(branchy, "if y.sum() > 0")
    item_line = _line_of(branchy, ".item()")
    assert f"line {branch_line}" in breaks[0].location and "if y.sum() > 0" in breaks[0].location
    assert f"line {item_line}" in breaks[1].location and "item" in breaks[1].reason

    # bessel_j0 has no torch-language symbol: it went to the fallback, with its line
    reasons = [r for r in cf.split_reasons if r.operation == "torch.special.bessel_j0"]
    assert reasons, cf.report()
    assert "no torch-language symbol" in reasons[0].reason
    assert f"line {_line_of(branchy, 'bessel_j0')}" in reasons[0].location
    assert any(r.kind == "fallback" for info in cf.subgraph_infos for r in info.regions)

    # the rest ran in Thunder, and its traces are there
    assert cf.thunder_modules()
    traces = cf.last_traces()
    assert traces and all(isinstance(t[-1], thunder.core.trace.TraceCtx) for t in traces)
    report = cf.report()
    assert "2 graph break(s)" in report and "if y.sum() > 0" in report and "bessel_j0" in report


class Chatty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.seen: list[tuple[int, ...]] = []

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        print("hidden shape", tuple(h.shape))
        self.seen.append(tuple(h.shape))
        return self.fc2(h * 2)


def test_model_that_prints_and_appends_to_a_list(capsys):
    torch.manual_seed(0)
    model = Chatty()
    cf = thunderfx(model)
    x = torch.randn(2, 4)
    actual = cf(x)
    expected = model(x)
    torch.testing.assert_close(actual, expected)
    _assert_grads_equal(actual, expected, tuple(model.parameters()))
    assert capsys.readouterr().out.count("hidden shape (2, 8)") == 2  # once compiled, once eager
    assert model.seen == [(2, 8), (2, 8)]
    torch.testing.assert_close(cf(x), expected)  # Dynamo guards on len(self.seen): it recompiles the tail
    assert model.seen == [(2, 8)] * 3
    assert [gb.location for gb in cf.graph_breaks] and "print" in cf.graph_breaks[0].location
    assert all(r.kind == "thunder" for info in cf.subgraph_infos for r in info.regions if r.kind != "python")


def test_litgpt_model_matches_eager():
    pytest.importorskip("litgpt", reason="litgpt is not installed (the core-tf4 env leaves it out)")
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    model = GPT(Config.from_name("llama-tiny", n_layer=1))
    tokens = torch.randint(0, model.config.vocab_size, (2, 16))
    cf = thunderfx(model)
    actual, expected = cf(tokens), model(tokens)
    torch.testing.assert_close(actual, expected)
    _assert_grads_equal(actual, expected, tuple(model.parameters()))
    assert cf.graph_breaks == []
    regions = [r for info in cf.subgraph_infos for r in info.regions]
    assert [r.kind for r in regions if r.kind != "python"] == ["thunder"], cf.report()


def test_hugging_face_llama_matches_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    model = transformers.LlamaForCausalLM(config)
    tokens = torch.randint(0, config.vocab_size, (2, 12))
    cf = thunderfx(model)
    actual, expected = cf(tokens).logits, model(tokens).logits
    # float32 sums in another order (fused attention, reductions): differences of a few 1e-5
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    _assert_grads_equal(actual, expected, tuple(model.parameters()), atol=1e-4, rtol=1e-4)
    # the rotary embedding's no_grad block splits the graph; everything that computes is Thunder's, except
    # (transformers 4.x) the attention mask built under torch.vmap, which runs in the fallback
    regions = [r for info in cf.subgraph_infos for r in info.regions]
    kinds = [r.kind for r in regions]
    assert "python" in kinds and "thunder" in kinds, cf.report()
    for r in regions:
        if r.kind == "fallback":
            assert r.reasons and all("torch.func" in reason.reason for reason in r.reasons), cf.report()


def test_options_reach_thunder_jit():
    ex = OperatorExecutor("dynamo_test_ex")
    calls = []

    def mul_impl(a, b):
        calls.append(1)
        return a * b

    dynamo_test_mul = ex.register_operator("dynamo_test_mul", meta=lambda a, b: TensorProxy(like=a), fn=mul_impl)
    ex.register_implementation(
        ltorch.mul,
        checker=lambda a, b: isinstance(a, TensorProxy) and isinstance(b, TensorProxy) and a.shape == b.shape,
        execution_transform=lambda a, b: dynamo_test_mul(a, b),
    )
    transformed = []

    def note_transform(trace):
        transformed.append(trace)
        return trace

    def f(a, b):
        c = a * b
        print("break")
        return c.exp() * b

    backend = ThunderCompiler(executors=[ex], cache="no caching", transforms=[note_transform])
    cf = torch.compile(f, backend=backend)
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(cf(a, b), f(a, b))
    modules = backend.thunder_modules()
    assert len(modules) == 2
    for tm in modules:
        assert "dynamo_test_mul" in str(thunder.last_traces(tm)[-1])
        assert thunder.cache_option(tm) is thunder.compiler.CacheOption.NO_CACHING
        assert thunder.list_transforms(tm) == [note_transform]
        assert ex in thunder.compile_data(tm).executors
    assert len(calls) == 2 and len(transformed) == 2


def test_opaque_ops_can_go_to_thunder():
    def f(x):
        return torch.special.bessel_j0(x.cos()) + 1

    cf = thunderfx(f, opaque_ops="thunder")
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    assert cf.split_reasons == []
    assert [r.kind for r in cf.subgraph_infos[0].regions] == ["thunder"]


def test_custom_fallback_backend_gets_the_unsupported_region():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append(sorted(str(n.target) for n in gm.graph.nodes if n.op == "call_function"))
        return gm

    def f(x):
        return torch.cumprod(x * 2, 0).cos()

    cf = thunderfx(f, fallback=my_backend)
    x = torch.randn(4, requires_grad=True)
    actual = cf(x)
    torch.testing.assert_close(actual, f(x))
    _assert_grads_equal(actual, f(x), (x,))
    assert len(seen) == 1 and "cumprod" in seen[0][0]
    assert [r.kind for r in cf.subgraph_infos[0].regions] == ["thunder", "fallback", "thunder"]


@pytest.mark.slow
def test_inductor_fallback():
    def f(x):
        return torch.cumprod(x * 2, 0).cos()

    cf = thunderfx(f, fallback="inductor")
    x = torch.randn(4, requires_grad=True)
    actual = cf(x)
    torch.testing.assert_close(actual, f(x))
    _assert_grads_equal(actual, f(x), (x,))
    region = cf.subgraph_infos[0].regions[1]
    assert region.kind == "fallback" and len(region.compiled._compiled) == 1  # compiled once by Inductor


def test_grad_mode_change_inside_the_graph():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return (x * y).sum(), y

    cf = thunderfx(f)
    x = torch.randn(3, requires_grad=True)
    (actual, actual_y), (expected, expected_y) = cf(x), f(x)
    torch.testing.assert_close(actual, expected)
    assert not actual_y.requires_grad and not expected_y.requires_grad
    _assert_grads_equal(actual, expected, (x,))
    assert torch.is_grad_enabled()


def test_new_shapes_are_compiled_or_served_by_thunders_cache():
    def f(x):
        return torch.nn.functional.gelu(x) * x.shape[0] + x.sum(0)

    cf = thunderfx(f, op_for_op="thunder")  # (Thunder's cache is the subject: keep its programs running)
    for n in (2, 3, 4, 4, 3):
        x = torch.randn(n, 5)
        torch.testing.assert_close(cf(x), f(x))
    # Dynamo: one static graph, then a dynamic one; Thunder specialises the dynamic one per shape
    last = cf.thunder_modules()[-1]
    assert thunder.cache_misses(last) == 2 and thunder.cache_hits(last) == 2


def test_tensor_computed_from_sizes_and_used_as_a_size_after_a_split(recwarn):
    # Longformer: chunks = torch.div(seq_len, w, rounding_mode="trunc") - 1 in one region, x.new_zeros((b, chunks + 1,
    # ...)) in a later one. Passed between regions, chunks was an input whose value thunder cannot know, so the
    # second region fell back ("int() argument must be ... not 'TensorProxy'")
    def f(x):
        chunks = torch.div(x.shape[1], 4, rounding_mode="trunc") - 1
        y = torch.cumprod(x * 2, 1)  # no torch-language symbol: a fallback region in between
        z = y.view(x.shape[0], chunks + 1, 4) + y.new_zeros((x.shape[0], chunks + 1, 4))
        return z.sum(-1) * int(chunks)

    cf = thunderfx(f)
    x = torch.randn(2, 16, requires_grad=True)
    actual, expected = cf(x), f(x)
    torch.testing.assert_close(actual, expected)
    _assert_grads_equal(actual, expected, (x,))
    assert not [w for w in recwarn if "ThunderFX" in str(w.message)]
    kinds = [r.kind for r in cf.subgraph_infos[0].regions]
    assert kinds == ["thunder", "fallback", "thunder"], cf.report()


def test_region_thunder_cannot_compile_falls_back_with_the_reason():
    def broken_transform(trace):
        raise NotImplementedError("this transform is broken")

    def f(x):
        return x.sin() * 2

    cf = thunderfx(f, transforms=[broken_transform])
    x = torch.randn(3)
    with pytest.warns(UserWarning, match="this transform is broken"):
        torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))  # the fallback keeps running it
    (region,) = cf.subgraph_infos[0].regions
    assert region.kind == "fallback" and "this transform is broken" in region.reasons[0].reason


def test_region_that_recompiles_for_every_new_size_goes_to_the_fallback():
    # a mixture-of-experts style loop: the rows routed to each expert come from nonzero(), so Dynamo
    # passes their number as a symbolic size and Thunder would compile a program for every new value
    def expert(xs, w):
        return torch.tanh(xs @ w) * xs.shape[0]

    def f(x, w, route):
        out = torch.zeros_like(x)
        for e in range(w.shape[0]):
            (rows,) = torch.nonzero(route == e, as_tuple=True)
            out = out.index_add(0, rows, expert(x[rows], w[e]))
        return out

    cf = thunderfx(f, recompile_limit=3, op_for_op="thunder")
    w = torch.randn(6, 4, 4, requires_grad=True)
    x = torch.randn(40, 4, requires_grad=True)
    route = torch.cat([torch.full((n,), e) for e, n in enumerate([1, 2, 3, 4, 5, 25])])
    with pytest.warns(UserWarning, match=r"compiled 3 programs for this region \(recompile_limit=3\)"):
        actual = cf(x, w, route)
    expected = f(x, w, route)
    torch.testing.assert_close(actual, expected)
    _assert_grads_equal(cf(x, w, route), f(x, w, route), (x, w))
    moved = [r for i in cf.subgraph_infos for r in i.regions if any("recompile_limit" in s.reason for s in r.reasons)]
    assert moved and all(r.kind == "fallback" for r in moved), cf.report()
    # no region holds more programs than the limit, and new sizes compile nothing more
    assert all(thunder.cache_misses(tm) <= 3 for tm in cf.thunder_modules())
    misses = sum(thunder.cache_misses(tm) for tm in cf.thunder_modules())
    route2 = torch.cat([torch.full((n,), e) for e, n in enumerate([6, 7, 8, 9, 1, 9])])
    torch.testing.assert_close(cf(x, w, route2), f(x, w, route2))
    assert sum(thunder.cache_misses(tm) for tm in cf.thunder_modules()) == misses
    assert "recompile_limit=3" in cf.report()


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="fallback='nope'"):
        ThunderCompiler(fallback="nope")
    with pytest.raises(ValueError, match="opaque_ops='maybe'"):
        ThunderCompiler(opaque_ops="maybe")
    with pytest.raises(ValueError, match="unknown executor 'no_such_executor'"):
        thunderfx(lambda x: x, executors=["no_such_executor"])
    with pytest.raises(TypeError, match="thunderfx expects a function or an nn.Module"):
        thunderfx(3)


def test_steady_state_training_compiles_nothing(monkeypatch):
    # Dynamo inlined thunder's global module-registration hook (HF slices ``self.layers[:n]``) and
    # guarded on the size of thunder's tracked-module set, which each compile grows: every call
    # recompiled every graph. Compiles must equal the Thunder regions of the graphs Dynamo handed over.
    transformers = pytest.importorskip("transformers")
    compiles = []
    real_compile_entry = thunder.compiler.compile_entry

    def counting_compile_entry(cd, args, kwargs):
        compiles.append(cd)
        return real_compile_entry(cd, args, kwargs)

    monkeypatch.setattr(thunder.compiler, "compile_entry", counting_compile_entry)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    model = transformers.LlamaForCausalLM(config)
    backend = ThunderCompiler()
    compiled = torch.compile(model, backend=backend)
    counts = []
    for _ in range(4):
        tokens = torch.randint(0, config.vocab_size, (2, 12))  # new values, same shapes
        model.zero_grad()
        loss = compiled(input_ids=tokens, labels=tokens).loss
        loss.backward()
        actual_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(input_ids=tokens, labels=tokens).loss
        expected.backward()
        torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-4)
        for a, p in zip(actual_grads, model.parameters()):
            torch.testing.assert_close(a, p.grad, atol=1e-4, rtol=1e-4)
        counts.append(len(compiles))
    regions = [r for info in backend.subgraph_infos for r in info.regions if r.kind == "thunder"]
    assert regions and counts == [len(regions)] * 4, (counts, backend.report())
    assert len({id(cd) for cd in compiles}) == len(compiles)  # one compile per region, none repeated


def test_code_under_torch_vmap_runs_in_the_fallback_and_trains():
    # transformers 4.x builds attention masks under torch.vmap; a Thunder program (an autograd.Function)
    # cannot run on functorch's batched tensors, so Dynamo's vmap region goes to the fallback
    def f(x, w):
        h = x @ w
        y = torch.vmap(lambda row: row.sin() * 2 + row.sum())(h)
        return (y * h).relu()

    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    backend = ThunderCompiler()
    compiled = torch.compile(f, backend=backend)
    actual, expected = compiled(x, w), f(x, w)
    torch.testing.assert_close(actual, expected)
    _assert_grads_equal(actual, expected, (w,))
    regions = [r for info in backend.subgraph_infos for r in info.regions]
    kinds = {r.kind for r in regions}
    assert {"thunder", "fallback"} <= kinds, backend.report()
    assert "torch.func" in backend.report()
