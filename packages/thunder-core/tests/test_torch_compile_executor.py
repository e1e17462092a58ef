"""The torch_compile fusion executor (Inductor; on CPU its C++ backend). One Inductor compile in all."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.executors.torch_compile import TorchCompileExecutor, graphs_compiled, torch_compile_ex

# the region rule without its size threshold: small tensors, so these tests compile little
any_size = TorchCompileExecutor("torch_compile_any_size", min_region_numel=0)


@pytest.fixture(autouse=True)
def _no_other_programs_background_work():
    # (these tests count the process's Inductor compiles: an earlier test's background compile must not end among them)
    from thunder.executors import tiers

    assert tiers.wait_until_idle(timeout=600)


def test_registered_by_name_not_default():
    assert thunder.extend.get_executor("torch_compile") is torch_compile_ex
    assert torch_compile_ex not in thunder.get_default_executors()


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_results_and_grads_equal_eager():
    def f(a, b):
        c = a * b + 1
        return torch.tanh(c).sum(-1), torch.relu(c) * 2

    # (fusion="wait": the first call runs the fused program, rather than the unfused one while it compiles)
    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    a = torch.randn(4, 8, requires_grad=True)
    b = torch.randn(4, 8)
    out = jf(a, b)
    ref_a = a.detach().clone().requires_grad_()
    ref = f(ref_a, b)
    for x, y in zip(out, ref):
        torch.testing.assert_close(x, y)
    (out[0].sum() + out[1].sum()).backward()
    (ref[0].sum() + ref[1].sum()).backward()
    torch.testing.assert_close(a.grad, ref_a.grad)

    # the whole program is one region, compiled by torch.compile
    text = str(thunder.last_traces(jf)[-1])
    code = [line.strip() for line in text.splitlines() if not line.strip().startswith("#")]
    assert sum("= torchCompile0.call_boxed(_torchCompile0_inputs)" in line for line in code) == 1
    assert "_torchCompile0_inputs = [a, b]; del a" in code  # (b is saved for the backward)
    assert not [line for line in code if "torch.tanh" in line or "torch.mul" in line]
    assert "# c = ltorch.add(t0, 1)" in text

    # a second call reuses the compiled region
    graphs = graphs_compiled()
    assert graphs > 0
    a2 = torch.randn(4, 8, requires_grad=True)
    out2 = jf(a2, b)
    torch.testing.assert_close(out2[1], f(a2, b)[1])
    assert graphs_compiled() == graphs
    assert thunder.cache_hits(jf) == 1


def test_what_it_fuses():
    def f(a):
        b = a * 2
        r = torch.rand_like(a)
        c = torch.special.bessel_j0(b)  # no torch-language symbol: an opaque fallback op
        return b + r + c

    jf = thunder.jit(f)  # default executors: no compile here
    jf(torch.randn(3))
    trace = thunder.last_traces(jf)[0]
    fusible = {b.sym.name: torch_compile_ex.can_fuse(b) for b in trace.bound_symbols}
    assert fusible["mul"] and fusible["add"]
    assert not fusible["rand"]  # random: Inductor's numbers differ from eager's
    assert not [name for name, ok in fusible.items() if "bessel" in name and ok]
    assert not fusible["python_return"]


def test_unavailable_without_a_cxx_compiler(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CXX", "no-such-compiler")
    reason = TorchCompileExecutor().unavailable_reason()
    assert reason is not None and "C++ compiler" in reason and "no-such-compiler" in reason


def _regions(fn, *args, executor=any_size) -> list[list[str]]:
    """The ``executor``'s regions of ``fn``'s trace: for each, the names of its top-level operations.
    (The fusion pass wraps each region in a callable that compiles nothing until it is called.)"""
    from thunder.executors.passes import claim_executors

    jf = thunder.jit(fn)
    jf(*args)
    trace = thunder.last_traces(jf)[0]
    claimed = claim_executors(trace, [executor, *thunder.get_default_executors()])
    fused = executor.fusion_pass(claimed)
    return [[s.sym.name for s in b.subsymbols] for b in fused.bound_symbols if "fusion" in b.sym.tags]


def test_region_rule_a_lone_matmul_stays_with_pytorch():
    assert _regions(lambda a, b: a @ b, torch.randn(8, 8), torch.randn(8, 8)) == []
    assert _regions(torch.nn.functional.linear, torch.randn(4, 8), torch.randn(3, 8)) == []


no_matmuls = TorchCompileExecutor("torch_compile_no_matmuls", min_region_numel=0, fuse_matmuls=False)


def test_region_rule_a_matmul_joins_the_chain_after_it():
    def f(x, w, b):
        return torch.tanh(torch.nn.functional.linear(x, w) + b).sum(-1) * 2

    args = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3)
    assert _regions(f, *args) == [["linear", "add", "tanh", "sum", "mul"]]
    assert _regions(f, *args, executor=no_matmuls) == [["add", "tanh", "sum", "mul"]]


def test_region_rule_the_regions_on_both_sides_of_a_matmul_are_one():
    def f(x, w):
        h = torch.relu(x * 2 + 1)
        return torch.softmax(h @ w, -1) - 1

    args = torch.randn(4, 8), torch.randn(8, 8)
    (region,) = _regions(f, *args)
    assert {"mul", "add", "relu", "matmul", "softmax", "sub"} <= set(region)
    assert len(_regions(f, *args, executor=no_matmuls)) == 2


def test_region_rule_convolutions_stay_with_pytorch_when_matmuls_fuse():
    def f(x, w):
        return torch.nn.functional.conv2d(torch.relu(x * 2), w).sigmoid() * 3

    regions = _regions(f, torch.randn(1, 2, 6, 6), torch.randn(2, 2, 3, 3))
    assert regions == [["mul", "relu"], ["sigmoid", "mul"]]


def test_region_rule_a_single_operation_is_not_compiled():
    assert _regions(lambda a: torch.tanh(a), torch.randn(4)) == []
    assert _regions(lambda a, b: torch.tanh(a @ b), torch.randn(4, 4), torch.randn(4, 4), executor=no_matmuls) == []


def test_region_rule_views_and_reshapes_do_not_count_as_operations():
    """Inductor copies what eager only views: a region of shape operations, or of one computing operation and
    views, stays with PyTorch; views between two computing operations join their region."""
    x = torch.randn(2, 4, 8)
    assert _regions(lambda a: a.reshape(8, 8).t().permute(1, 0).unsqueeze(0)[..., :3], x) == []
    assert _regions(lambda a: torch.cat([a, a], -1).transpose(0, 1), x) == []
    assert _regions(lambda a: torch.tanh(a).reshape(8, 8).t(), x) == []
    (region,) = _regions(lambda a: torch.tanh(a).reshape(8, 8).t() * 2, x)
    assert {"tanh", "mul"} <= set(region) and "reshape" in region


def test_region_rule_elementwise_and_reduction_chains_are_one_region():
    def f(a, b):
        c = a * b + 1
        return torch.softmax(c, -1), c.mean()

    (region,) = _regions(f, torch.randn(4, 8), torch.randn(4, 8))
    assert {"mul", "add", "softmax", "mean"} <= set(region)


def test_region_rule_a_region_on_small_tensors_stays_unfused():
    """Below ``min_region_numel`` elements (its largest tensor) a region runs as PyTorch's kernels: at that size
    the fused kernel saves less than the call overhead it adds (benchmarks/fusion_payoff.py)."""
    n = torch_compile_ex.min_region_numel

    def f(a, b):
        return torch.tanh(a * b + 1)

    small = torch.randn(2, n // 2 - 1)  # one row short of the threshold
    assert _regions(f, small, small, executor=torch_compile_ex) == []
    large = torch.randn(2, n // 2)
    assert _regions(f, large, large, executor=torch_compile_ex) == [["mul", "add", "tanh"]]
    # a chain ending in a reduction to a small result is still a large region: it computes large tensors
    assert _regions(lambda a: (a * 2).exp().sum(), large, executor=torch_compile_ex) == [["mul", "exp", "sum"]]
    # what it only reads does not count: a lookup in a large table computes a few rows (a decode step's embedding)
    table, idx = torch.randn(n // 64, 64), torch.tensor([[3, 5]])
    assert (
        _regions(lambda t, i: torch.nn.functional.embedding(i, t) * 2 + 1, table, idx, executor=torch_compile_ex) == []
    )
    assert _regions(lambda t, i: torch.nn.functional.embedding(i, t) * 2 + 1, table, idx) == [
        ["embedding", "mul", "add"]
    ]


def test_region_rule_convolution_backward_stays_with_pytorch():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU6())
    jm = thunder.jit(m)
    jm(torch.randn(2, 3, 8, 8)).sum().backward()
    fusible = {b.sym.name: torch_compile_ex.can_fuse(b) for b in thunder.last_backward_traces(jm)[0].bound_symbols}
    assert fusible["convolution_backward"] is False
    assert fusible["native_batch_norm_backward"] and fusible["hardtanh_backward"]


def test_region_rule_always_fuse_ops_compiles_long_chains_at_any_size():
    """A region of ``always_fuse_ops`` (default 4) computing operations is compiled however small its tensors."""
    tiny = torch.randn(2, 3)
    assert torch_compile_ex.always_fuse_ops == 4
    off = TorchCompileExecutor("torch_compile_size_only", always_fuse_ops=None)
    assert _regions(lambda a: torch.tanh(a * 2 + 1).exp(), tiny, executor=off) == []
    four = torch_compile_ex
    assert _regions(lambda a: torch.tanh(a * 2 + 1), tiny, executor=four) == []
    assert _regions(lambda a: torch.tanh(a * 2 + 1).exp(), tiny, executor=four) == [["mul", "add", "tanh", "exp"]]
    # views do not count: three operations and a transpose stay unfused
    assert _regions(lambda a: torch.tanh(a * 2 + 1).t(), tiny, executor=four) == []
    with pytest.raises(ValueError, match="always_fuse_ops must be a positive int, got 0"):
        TorchCompileExecutor("bad", always_fuse_ops=0)


def test_region_rule_a_composite_counts_the_operations_it_decomposes_to():
    """A batch norm is one symbol of a dozen primitives, which Inductor fuses into one pass where PyTorch's kernel
    makes several: a small batch norm and its ReLU compile (two primitives on the same tensors do not)."""
    import torch.nn.functional as F

    c = 8
    args = torch.randn(2, c, 2, 2), torch.randn(c), torch.randn(c), torch.zeros(c), torch.ones(c)

    def bn_relu(x, w, b, running_mean, running_var):
        return torch.relu(F.batch_norm(x, running_mean, running_var, w, b, training=True))

    assert _regions(bn_relu, *args, executor=torch_compile_ex) == [["batch_norm_functional", "relu", "copy_", "copy_"]]
    assert _regions(bn_relu, *args, executor=TorchCompileExecutor("size_only", always_fuse_ops=None)) == []
    assert _regions(lambda a: torch.relu(a + 1), args[0], executor=torch_compile_ex) == []


def test_min_region_numel_must_be_a_non_negative_int():
    with pytest.raises(ValueError, match="min_region_numel must be a non-negative int, got -1"):
        TorchCompileExecutor("bad", min_region_numel=-1)


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_region_compiles_once_per_input_signature_then_dynamic():
    def f(a):
        return torch.tanh(a * 2 + 1)

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait", cache="same input")
    jf(torch.randn(3, 4))
    (bsym,) = [b for b in thunder.last_traces(jf)[-1].bound_symbols if b.sym.name.startswith("torchCompile")]
    region = bsym.sym.call_ctx[bsym.sym.name]
    # the region itself, called with new sizes and dtypes, as a program with symbolic sizes would call it
    shapes = [(3, 4), (5, 4), (3, 4), (2,), (1, 1, 7), (6,)]
    for shape in shapes:
        for dtype in (torch.float32, torch.float64):
            a = torch.randn(shape, dtype=dtype)
            (out,) = region(a)
            torch.testing.assert_close(out, f(a))
    assert len(region.compiled) == 8  # one per signature; the ninth and tenth went to torch.compile(dynamic=True)
    assert region.dynamic is not None
    # non-contiguous and requires_grad inputs share the contiguous signature
    a = torch.randn(4, 3, dtype=torch.float64).t().requires_grad_()
    (out,) = region(a)
    torch.testing.assert_close(out, f(a.detach()))
    assert len(region.compiled) == 8


def _compiled_regions(jf):
    return [
        b.sym.call_ctx[b.sym.name]
        for b in thunder.last_traces(jf)[-1].bound_symbols
        if b.sym.name.startswith("torchCompile")
    ]


def test_a_static_region_compiles_once_and_then_calls_its_graph_directly():
    def f(a, b):
        return torch.tanh(a * 2 + b), (a - b).exp().sum(0)

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    before = graphs_compiled()
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            for x, y in ((a, b), (a.t().contiguous().t(), b), (a, torch.randn(3, 4).t())):  # non-contiguous too
                for got, want in zip(jf(x, y), f(x, y)):
                    torch.testing.assert_close(got, want)
    (region,) = _compiled_regions(jf)
    assert region.static and region._graph is not None
    # one compile per program (the prologue may tell the layouts apart) and per input layout a region learned
    # (the next test), none per call
    assert thunder.wait_for_fusion(jf, timeout=120)
    regions = [
        b.sym.call_ctx[b.sym.name]
        for entry in thunder.compile_data(jf).cache
        for b in entry.computation_traces[-1].bound_symbols
        if b.sym.name.startswith("torchCompile")
    ]
    learned = sum(len(r._layouts) for r in regions)
    assert graphs_compiled() == before + thunder.compile_stats(jf).cache_misses + learned
    # training: the backward's regions too
    x, xe = a.clone().requires_grad_(), a.clone().requires_grad_()
    sum(o.sum() for o in jf(x, b)).backward()
    sum(o.sum() for o in f(xe, b)).backward()
    torch.testing.assert_close(x.grad, xe.grad)


def test_a_static_region_learns_the_layouts_of_its_inputs_and_calls_a_graph_compiled_for_them():
    # a region's inputs arriving permuted in a fixed way (channels-last maps, attention gradients) were copied to
    # contiguous on every call; the region now compiles a graph for the strides it meets, in the background
    def f(a, b):
        return torch.tanh(a * 2 + b)

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    a, b = torch.randn(5, 3, 4, 6).permute(0, 2, 3, 1), torch.randn(5, 3, 4, 6).permute(0, 2, 3, 1)
    with torch.no_grad():
        jf(a.contiguous(), b.contiguous())  # the program and its contiguous graph
        (region,) = _compiled_regions(jf)
        before = graphs_compiled()
        for _ in range(2):  # the first call copies and queues the compile; after the wait, the learned graph runs
            got, want = jf(a, b), f(a, b)
            torch.testing.assert_close(got, want)
            assert thunder.wait_for_fusion(jf, timeout=120)
        assert graphs_compiled() == before + 1
        assert list(region._layouts) == [tuple(x.stride() for x in (a, b))]
        # eager's layout for the result, which the copies lost
        got = jf(a, b)
        assert got.stride() == want.stride() and got.stride() != want.contiguous().stride()
        torch.testing.assert_close(got, want)
        # other layouts, each its own graph: a permutation, an expanded input (read in place, not materialised)
        c = torch.randn(5, 6, 4, 3).permute(0, 2, 1, 3)
        torch.testing.assert_close(jf(c, b.contiguous()), f(c, b.contiguous()))
        e = torch.randn(1, 4, 6, 3).expand(5, 4, 6, 3)
        torch.testing.assert_close(jf(e, b), f(e, b))
        assert thunder.wait_for_fusion(jf, timeout=120)
        assert len(region._layouts) == 3 and graphs_compiled() == before + 3
        for x, y in ((c, b.contiguous()), (e, b), (a, b)):
            torch.testing.assert_close(jf(x, y), f(x, y))
        # no more than MAX_LAYOUTS: then copies, as before
        s = torch.randn(5, 8, 6, 3)[:, ::2]
        torch.testing.assert_close(jf(s, b), f(s, b))
        assert thunder.wait_for_fusion(jf, timeout=120)
        assert len(region._layouts) == region.MAX_LAYOUTS == 4
        t = torch.randn(5, 4, 6, 6)[..., ::2]
        torch.testing.assert_close(jf(t, b), f(t, b))
        assert len(region._layouts) == 4 and graphs_compiled() == before + 4


def _peak_allocated_bytes(fn) -> int:
    """The peak of the bytes PyTorch's CPU allocator holds while ``fn()`` runs, above what it held before (from the
    profiler's record of every allocation and free)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    in_use = peak = 0
    for event in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
        if event.name() == "[memory]":
            in_use += event.nbytes()
            peak = max(peak, in_use)
    return peak


def test_a_region_running_its_own_operations_frees_each_value_after_its_last_use():
    # while a graph for new input strides compiles, the region runs its torch operations, and they held every
    # intermediate until the region returned: a fused training step measured in that state (the first step with new
    # layouts) peaked 28 MiB above the compiled graph's
    def f(a):
        b = a * 2
        c = torch.tanh(b) + 1
        d = c.exp() * c
        e = torch.sigmoid(d) - d
        return (e * 3).sum(0)

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    a = torch.randn(512, 512)
    with torch.no_grad():
        jf(a)  # the program and its contiguous graph
        (region,) = _compiled_regions(jf)
        t = torch.randn(512, 512).t()
        eager_peak = _peak_allocated_bytes(lambda: f(t))
        region_peak = _peak_allocated_bytes(lambda: torch.testing.assert_close(jf(t), f(t)))
        assert region._layouts == {(t.stride(),): None}  # (the call ran the region's own operations)
        # eager's peak for one call; the check above calls eager once more, after the region returned
        assert region_peak <= eager_peak + 512 * 4, (region_peak, eager_peak)
        assert thunder.wait_for_fusion(jf, timeout=120)


def test_a_region_frees_an_input_that_dies_inside_it_before_it_returns():
    # the program called a region with its inputs as arguments, so its own frame held every input until the region
    # returned: a value whose last use was the region's first kernel stayed alive beside the region's later buffers
    # (a training step's cotangents in its fused backward). The call is boxed now and Inductor's graph frees it.
    def f(x, w, z, m):
        y = torch.nn.functional.conv2d(x, w)  # (stays with the torch executor: y is the program's own value)
        s = y.sum()  # y's last use, in the region's first kernel
        return torch.sigmoid((z @ m) * s)  # a matmul's buffer, as large as y, made after it

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    shapes = ((8, 4, 32, 32), (16, 4, 1, 1), (128, 1024), (1024, 1024))
    x, w, z, m = (torch.randn(*shape, dtype=torch.float64) for shape in shapes)
    with torch.no_grad():
        torch.testing.assert_close(jf(x, w, z, m), f(x, w, z, m))
        assert "torchCompile0.call_boxed(" in str(thunder.last_traces(jf)[-1])
        peak = _peak_allocated_bytes(lambda: jf(x, w, z, m))
    # y and the matmul's result are 1 MiB each: both alive at once would be 2 MiB
    nbytes = z.numel() * z.element_size()
    assert peak < 1.5 * nbytes, (peak, nbytes)


def test_a_chain_of_regions_learns_its_layouts_in_one_call_and_one_wait():
    # a region meeting new strides ran its contiguous graph on copies, whose contiguous results hid the layout from
    # the regions after it: a channels-last chain of N regions learned one region per call. It now runs its own
    # torch operations meanwhile, whose results have eager's layout, so every region meets its layout at once.
    def f(x, w):
        y = torch.relu(x * 2 + 1)
        z = torch.nn.functional.conv2d(y, w, groups=4)  # (stays with the torch executor: two regions)
        return torch.sigmoid(z * 3 - 1)

    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 2, 3, 3)
    with torch.no_grad():
        jf(x.contiguous(), w)
        regions = _compiled_regions(jf)
        assert len(regions) == 2
        before = graphs_compiled()
        got, want = jf(x, w), f(x, w)  # (the region's torch operations, on the channels-last maps)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride() != want.contiguous().stride()
        assert thunder.wait_for_fusion(jf, timeout=120)
        assert graphs_compiled() == before + 2 and all(len(r._layouts) == 1 for r in regions)
        got = jf(x, w)  # (the learned graphs)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
        assert graphs_compiled() == before + 2


def _jit_with_symbolic_sizes(f):
    """``f`` jitted with Inductor on every region, compiled before the first call returns, with symbolic sizes."""
    return thunder.jit(
        f, executors=[any_size, *thunder.get_default_executors()], fusion="wait", cache="symbolic values"
    )


def _check_rows_against_eager(jf, f, rows, columns: int) -> None:
    """``jf`` gives ``f``'s answer (without gradients) on inputs of each number of ``rows``."""
    with torch.no_grad():
        for n in rows:
            a = torch.randn(n, columns)
            torch.testing.assert_close(jf(a), f(a))


def test_a_region_with_symbolic_sizes_is_not_static():
    def f(a):
        return torch.tanh(a * 2 + 1)

    jf = _jit_with_symbolic_sizes(f)
    _check_rows_against_eager(jf, f, (3, 5, 7), columns=4)
    regions = _compiled_regions(jf)
    assert regions and not any(r.static for r in regions)


def _symbolic_region(jf):
    (region,) = [r for r in _compiled_regions(jf) if r.symbolic_dims is not None]
    return region


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_a_region_with_symbolic_sizes_compiles_one_graph_for_every_size():
    def f(a, b):
        return torch.tanh(torch.cat([a, b]) * 2 + 1).sum(-1), a.shape[0] * (a - 1).exp()

    jf = _jit_with_symbolic_sizes(f)
    before = graphs_compiled()
    for n in (3, 5, 2, 9, 17):
        a, b = torch.randn(n, 4), torch.randn(n + 1, 4)
        with torch.no_grad():
            for got, want in zip(jf(a, b), f(a, b)):
                torch.testing.assert_close(got, want)
    region = _symbolic_region(jf)
    assert len(region._symbolic) == 1 and not region.compiled and region.dynamic is None
    assert graphs_compiled() == before + 1
    # the guard relates the inputs as the trace does: b has one row more than a
    (graph,) = region._symbolic
    assert "t0.size()[0]" in graph.guard_source and "t1.size()[0]" in graph.guard_source


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_sizes_a_symbolic_graph_does_not_serve_get_another_graph_in_the_background():
    from thunder.executors import tiers

    def f(a):
        return torch.tanh(a * 2 + 1).sum(0)

    jf = _jit_with_symbolic_sizes(f)
    _check_rows_against_eager(jf, f, (3, 4), columns=5)
    with torch.no_grad():
        region = _symbolic_region(jf)
        assert len(region._symbolic) == 1
        # a size of 1 is a case of its own (it broadcasts), which the first graph's guard excludes (and for which
        # thunder traces another program: the region is called as that program's region would be)
        a = torch.randn(1, 5)
        assert not region._symbolic[0].guard(a)
        before = graphs_compiled()
        (out,) = region(a)  # (the region's torch operations, while the graph compiles)
        torch.testing.assert_close(out, f(a))
        assert tiers.wait_until_idle(timeout=600)
        assert len(region._symbolic) == 2 and region._symbolic[1].guard(a)
        assert graphs_compiled() == before + 1
        (out,) = region(a)
        torch.testing.assert_close(out, f(a))


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_symbolic_regions_forward_and_backward_equal_eager():
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1) * x.shape[0]

    jf = _jit_with_symbolic_sizes(f)
    w = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    for n in (3, 7, 4):
        x = torch.randn(n, 6, dtype=torch.float64, requires_grad=True)
        got, want = jf(x, w), f(x, w)
        torch.testing.assert_close(got, want)
        g = torch.randn_like(want)
        torch.testing.assert_close(torch.autograd.grad(got, (x, w), g), torch.autograd.grad(want, (x, w), g))
    regions = [r for r in _compiled_regions(jf) if r.symbolic_dims is not None]
    assert regions and all(len(r._symbolic) == 1 for r in regions)


@pytest.mark.skipif(torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor")
def test_a_region_whose_symbolic_compile_fails_compiles_per_signature(monkeypatch):
    from thunder.executors import symbolic_graphs

    def refuse(*args):
        raise RuntimeError("no symbolic sizes here")

    monkeypatch.setattr(symbolic_graphs, "compile_symbolic_graph", refuse)

    def f(a):
        return torch.tanh(a * 2 + 1)

    jf = _jit_with_symbolic_sizes(f)
    _check_rows_against_eager(jf, f, (3, 5), columns=4)
    region = _symbolic_region(jf)
    assert region._symbolic_failed and len(region.compiled) == 2
