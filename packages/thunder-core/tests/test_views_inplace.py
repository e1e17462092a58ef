"""Views, aliases and in-place updates against eager PyTorch.

The matrix: every view op of PyTorch's view-op list (plus the ops that return their input itself)
x in-place ops x the ways the result is used. Each case runs the same function eagerly and through
``thunder.jit`` on equal inputs and compares the returned values and the caller's tensors afterwards.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _real():
    return torch.arange(24.0).reshape(2, 3, 4)


def _complex():
    return torch.complex(torch.arange(24.0), -torch.arange(24.0)).reshape(2, 3, 4)


def _pairs():
    return torch.arange(24.0).reshape(2, 3, 4, 1).expand(2, 3, 4, 2).contiguous()


# name -> (input factory, view function); from PyTorch's "Tensor Views" documentation, plus the ops that
# return their input itself in eager
VIEWS = {
    "basic_index": (_real, lambda x: x[1, :, 1:3]),
    "step_slice": (_real, lambda x: x[:, ::2]),
    "ellipsis_none": (_real, lambda x: x[..., None, 0]),
    "select": (_real, lambda x: x.select(1, 2)),
    "as_strided": (_real, lambda x: x.as_strided((3, 2), (1, 5), 2)),
    "detach": (_real, lambda x: x.detach()),
    "data": (_real, lambda x: x.data),
    "diagonal": (_real, lambda x: x.diagonal(0, 1, 2)),
    "expand": (_real, lambda x: x[:, :1].expand(2, 3, 4)),
    "movedim": (_real, lambda x: x.movedim(0, 2)),
    "narrow": (_real, lambda x: x.narrow(2, 1, 2)),
    "permute": (_real, lambda x: x.permute(2, 0, 1)),
    "squeeze": (_real, lambda x: x[:1].squeeze(0)),
    "unsqueeze": (_real, lambda x: x.unsqueeze(1)),
    "transpose": (_real, lambda x: x.transpose(0, 2)),
    "swapaxes": (_real, lambda x: x.swapaxes(1, 2)),
    "t": (_real, lambda x: x[0].t()),
    "T": (_real, lambda x: x[0].T),
    "mT": (_real, lambda x: x.mT),
    "H": (_complex, lambda x: x[0].H),
    "mH": (_complex, lambda x: x.mH),
    "adjoint": (_complex, lambda x: x.adjoint()),
    "real": (_complex, lambda x: x.real),
    "imag": (_complex, lambda x: x.imag),
    "view_as_real": (_complex, lambda x: torch.view_as_real(x)),
    "view_as_complex": (_pairs, lambda x: torch.view_as_complex(x)),
    "view": (_real, lambda x: x.view(6, 4)),
    "view_as": (_real, lambda x: x.view_as(torch.empty(4, 6))),
    "reshape_contiguous": (_real, lambda x: x.reshape(-1)),
    "flatten_contiguous": (_real, lambda x: x.flatten(1)),
    "unflatten": (_real, lambda x: x.unflatten(2, (2, 2))),
    "unfold": (_real, lambda x: x.unfold(2, 2, 2)),
    "unfold_overlapping": (_real, lambda x: x.unfold(2, 2, 1)),
    "unbind": (_real, lambda x: x.unbind(1)[1]),
    "split": (_real, lambda x: x.split(2, dim=2)[1]),
    "split_with_sizes": (_real, lambda x: x.split([1, 3], dim=2)[1]),
    "chunk": (_real, lambda x: x.chunk(2, dim=1)[0]),
    "tensor_split": (_real, lambda x: torch.tensor_split(x, 2, dim=2)[1]),
    "view_chain": (_real, lambda x: x.transpose(0, 1)[1:].select(2, 3)),
    "contiguous_self": (_real, lambda x: x.contiguous()),
    "to_same_dtype": (_real, lambda x: x.to(x.dtype)),
    "float_of_float": (_real, lambda x: x.float()),
    "dropout_p0": (_real, lambda x: F.dropout(x, 0.0)),
    "type_as_self": (_real, lambda x: x.type_as(x)),
}


def _setitem(v):
    v[...] = 5


# in-place ops applied to the view (or to the base, for "read_view")
INPLACE = {
    "add_": lambda v: v.add_(1),
    "mul_": lambda v: v.mul_(3),
    "fill_": lambda v: v.fill_(7),
    "copy_": lambda v: v.copy_(torch.ones_like(v) * 2),
    "setitem": _setitem,
}


def _function(view, op, use):
    if use == "read_base":

        def f(x):
            op(view(x))
            return x * 1
    elif use == "read_view":  # the base is updated, the view (taken before) is read

        def f(x):
            v = view(x)
            op(x)
            return v * 1
    elif use == "return_view":

        def f(x):
            v = view(x)
            op(v)
            return v
    elif use == "mutate_input":

        def f(x):
            op(view(x))
    elif use == "local_base":  # the base is created inside the function

        def f(x):
            y = x * 2
            v = view(y)
            op(v)
            return y + 0, v * 1
    else:
        raise AssertionError(use)
    return f


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _run_both(f, make):
    x_eager, x_thunder = make(), make()
    try:
        expected = f(x_eager)
    except RuntimeError:
        with pytest.raises(Exception):  # noqa: B017 - eager raised: thunder must raise too
            thunder.jit(f)(x_thunder)
        return
    got = thunder.jit(f)(x_thunder)
    assert _same(expected, got), (expected, got)
    assert _same(x_eager, x_thunder), ("the caller's tensor differs", x_eager, x_thunder)


@pytest.mark.parametrize("use", ["read_base", "read_view", "return_view", "mutate_input", "local_base"])
@pytest.mark.parametrize("op", list(INPLACE))
@pytest.mark.parametrize("view", list(VIEWS))
def test_view_inplace_matrix(view, op, use):
    make, view_fn = VIEWS[view]
    if view == "unfold_overlapping" and op != "fill_" and use != "read_view":
        # eager updates overlapping windows element by element in its kernel's order; thunder refuses
        with pytest.raises(RuntimeError, match="single memory location"):
            thunder.jit(_function(view_fn, INPLACE[op], use))(make())
        return
    _run_both(_function(view_fn, INPLACE[op], use), make)


# ---------------------------------------------------------------- copies that look like views


def test_reshape_of_non_contiguous_copies():
    def f(x):
        y = x.T.reshape(-1)
        y.add_(1)
        z = x.T.flatten()
        z.mul_(2)
        return y, z

    _run_both(f, lambda: torch.arange(6.0).reshape(2, 3))


def test_advanced_index_copies():
    def f(x):
        y = x[torch.tensor([0, 1])]
        y.fill_(3)
        return x * 1, y

    _run_both(f, lambda: torch.arange(6.0).reshape(2, 3))


# ---------------------------------------------------------------- layout queries


@pytest.mark.parametrize("transposed", [False, True])
def test_layout_queries_answer_for_the_real_input(transposed):
    def f(x):
        return x * (1 if x.is_contiguous() else 2), x.stride(), x.storage_offset()

    def make(t):
        base = torch.arange(13.0)[1:].reshape(3, 4)
        return base.T if t else base

    jf = thunder.jit(f)
    for t in (transposed, not transposed):  # the second layout must not reuse the first's trace
        assert _same(f(make(t)), jf(make(t)))


def test_layout_of_views_follows_eager():
    def f(x):
        return x.T.stride(), x[:, 1:].is_contiguous(), x.select(1, 1).storage_offset(), x.T.contiguous().stride()

    x = torch.zeros(3, 4)
    assert thunder.jit(f)(x) == f(x)


# ---------------------------------------------------------------- aliased arguments


def test_same_tensor_twice():
    def f(a, b):
        a.add_(1)
        return b * 2

    jf = thunder.jit(f)
    x, y = torch.zeros(3), torch.zeros(3)
    assert torch.equal(jf(x, x), f(y, y))
    assert torch.equal(x, y)
    # traced with two tensors first, then called with one tensor twice: a new trace, eager's answer
    jg = thunder.jit(f)
    a, b = torch.zeros(3), torch.zeros(3)
    jg(a, b)
    x, y = torch.zeros(3), torch.zeros(3)
    assert torch.equal(jg(x, x), f(y, y))
    assert torch.equal(x, y)


def test_module_parameter_passed_as_argument():
    lin = torch.nn.Linear(3, 3, bias=False)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, w):
            with torch.no_grad():
                w.mul_(2)
            return self.lin.weight.sum()

    m = M()
    expected = lin.weight.detach().sum() * 2
    got = thunder.jit(m)(lin.weight)
    assert torch.allclose(got, expected)


# ---------------------------------------------------------------- generated code


def test_view_of_updated_tensor_read_with_advanced_indexing():
    def f(x, idx):
        v = x[:, 1:]
        x.add_(1)
        return v[idx], v[:, idx]

    x = torch.arange(12.0).reshape(3, 4)
    idx = torch.tensor([0, 2])
    expected = f(x.clone(), idx)
    assert _same(thunder.jit(f)(x.clone(), idx), expected)


# ---------------------------------------------------------------- in-place ops that change metadata


@pytest.mark.parametrize(
    "name",
    ["unsqueeze_", "squeeze_", "t_", "transpose_", "resize_smaller", "resize_larger_prefix", "set_", "as_strided_"],
)
def test_metadata_changing_inplace(name):
    def f(x):
        y = x.clone()[:1]
        z = x * 1
        if name == "unsqueeze_":
            y.unsqueeze_(0)
        elif name == "squeeze_":
            y.squeeze_(0)
        elif name == "t_":
            z = z[0:2, 0:2].clone()
            z.t_()
            z[0].fill_(-1)
            return z * 1
        elif name == "transpose_":
            z.transpose_(0, 1)
            z[0].fill_(-1)
            return z * 1, z.shape
        elif name == "resize_smaller":
            z.resize_(2, 2)
            return z * 1
        elif name == "resize_larger_prefix":
            z.resize_(20)
            return z[:12] * 1, z.shape
        elif name == "set_":
            w = torch.zeros(5)
            w.set_(z)
            w.add_(1)
            return z * 1, w * 1
        elif name == "as_strided_":
            z.as_strided_((2, 2), (1, 3))
            z.fill_(0)
            return z * 1
        y.add_(1)
        return y * 1, y.shape

    _run_both(f, lambda: torch.arange(12.0).reshape(3, 4))


def _update_a_read_b(a, b):
    a.add_(1)
    return b * 2


def _update_both(a, b):
    b.mul_(3)
    a[0] = -1
    return a + 0, b + 0


@pytest.mark.parametrize("fn", [_update_a_read_b, _update_both])
@pytest.mark.parametrize(
    "views",
    [lambda x: (x, x[0]), lambda x: (x[:, 0], x[0]), lambda x: (x.T, x[1:]), lambda x: (x[0], x[1])],
    ids=["base_and_row", "column_and_row", "transposed_and_rows", "disjoint_rows"],
)
def test_overlapping_arguments(fn, views):
    x_eager, x_thunder = torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3)
    expected = fn(*views(x_eager))
    got = thunder.jit(fn)(*views(x_thunder))
    assert _same(expected, got)
    assert _same(x_eager, x_thunder)


def test_aliasing_pattern_is_part_of_the_cache_key():
    jf = thunder.jit(_update_a_read_b)
    jf(torch.zeros(2, 3), torch.zeros(3))  # traced with separate tensors
    x_eager, x_thunder = torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3)
    assert _same(jf(x_thunder, x_thunder[0]), _update_a_read_b(x_eager, x_eager[0]))
    assert _same(x_eager, x_thunder)
    # and back to separate tensors: not the aliased entry
    a, b = torch.zeros(2, 3), torch.ones(3)
    assert _same(jf(a, b), b * 2)


# ---------------------------------------------------------------- small ops from the issue


def test_copy_from_a_number():
    def f(x):
        y = x.clone()
        y.copy_(1.5)
        return y

    for dtype in (torch.float32, torch.int64, torch.bool):
        x = torch.zeros(3, dtype=dtype)
        assert _same(thunder.jit(f)(x), f(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.mT,
        lambda x: x.mH,
        lambda x: torch.movedim(x, -1, 0),
        lambda x: x.squeeze(-1),
        lambda x: x.squeeze(0),
        lambda x: x.unsqueeze(-1),
    ],
    ids=["mT", "mH", "movedim", "squeeze_neg", "squeeze_0", "unsqueeze"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # eager deprecates mT/mH on 0-d tensors
def test_zero_dim_shape_ops(fn):
    x = torch.tensor(2.5)
    assert _same(thunder.jit(fn)(x), fn(x))


def test_cat_promotes_with_empty_inputs():
    b = torch.tensor([True, False])

    def f(a):
        return torch.cat([torch.zeros(0, dtype=torch.float64), a]), torch.cat([a, torch.zeros(0, dtype=torch.int32)])

    assert _same(thunder.jit(f)(b), f(b))


# ---------------------------------------------------------------- tensors held outside the inputs

_GLOBAL_BUFFER = torch.zeros(2, 6)


def test_inplace_update_of_a_global_tensor_is_written_back():
    def f(k, pos):
        _GLOBAL_BUFFER.index_copy_(1, pos, k)
        _GLOBAL_BUFFER[:, 0] += 1
        return _GLOBAL_BUFFER[:, :3] * 1

    jf = thunder.jit(f)
    k, pos = torch.ones(2, 1), torch.tensor([1])
    expected_buffer = _GLOBAL_BUFFER.clone()
    expected_buffer.index_copy_(1, pos, k)
    expected_buffer[:, 0] += 1
    out = jf(k, pos)
    assert _same(out, expected_buffer[:, :3])
    assert _same(_GLOBAL_BUFFER, expected_buffer)


def test_stand_in_from_an_earlier_trace_is_a_clear_error():
    holder = {}

    def f(x):
        holder["t"] = x * 2  # a tensor made while tracing kept past the call (like a lazily allocated cache)
        return x + 1

    try:
        thunder.jit(f)(torch.ones(3))
    except Exception:  # the object changed while tracing: thunder may refuse the program itself
        pass

    def g(y):
        return holder["t"] + y

    with pytest.raises(Exception, match="earlier trace"):
        thunder.jit(g)(torch.ones(3))


def test_hf_static_cache_decode_after_eager_prefill():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 4))

    def decode(step_fn):
        cache = transformers.StaticCache(config=cfg, max_cache_len=8)
        logits = []
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(4), use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            for step in range(2):
                pos = torch.tensor([4 + step])
                out = step_fn(input_ids=token, past_key_values=cache, cache_position=pos, use_cache=True)
                logits.append(out.logits)
                token = out.logits[:, -1:].argmax(-1)
        return logits, cache.layers[0].keys.clone()

    expected, expected_keys = decode(model)
    got, got_keys = decode(thunder.jit(model))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(got_keys, expected_keys)


def test_setitem_value_with_leading_unit_dims():
    def f(a):
        v = torch.sin(a)
        v[0] = a
        return v

    a = torch.arange(3.0).reshape(1, 3)
    assert _same(thunder.jit(f)(a), f(a))


def test_slice_assignment_is_differentiable():
    def f(a, b):
        x = a * 1
        x[..., :1] = b[..., 1:2] * 2
        return x * a

    grads = []
    for run in (f, thunder.jit(f)):
        a = torch.arange(6.0).reshape(2, 3).requires_grad_()
        b = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
        run(a, b).sum().backward()
        grads.append((a.grad, b.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_add_alpha_on_bool_tensors_is_taken_as_bool():
    def f(a):
        v = a > 0
        v.add_(v, alpha=-1)
        return v, torch.add(v, v, alpha=0)

    a = torch.tensor([1.0, -1.0, 2.0])
    assert _same(thunder.jit(f)(a), f(a))


@pytest.mark.parametrize(
    "fn",
    [
        lambda b, i: torch.square(b),
        lambda b, i: torch.nn.functional.hardtanh(i, -2, 2),
        lambda b, i: torch.einsum("i,j->ij", b, b),
    ],
    ids=["square_bool", "hardtanh_int", "einsum_bool_outer"],
)
def test_traced_dtypes_of_the_issue(fn):
    b, i = torch.tensor([True, False, True]), torch.arange(-4, 4)

    def g(b, i):
        out = fn(b, i)
        return out, out.dtype  # the traced dtype, read inside the program

    expected, got = g(b, i), thunder.jit(g)(b, i)
    assert _same(got[0], expected[0]) and got[1] == expected[1]


# ---------------------------------------------------------------- deferred shadow runs of view ops


def _chain_then_update(x):
    # views of views, none updated until the last line: their aliasing is learned only when it matters
    y = x.view(2, 3, 2)
    z = y.transpose(0, 2)
    w = z[..., :3]  # the same sizes as z: still a new tensor in eager
    parts = x.split(1)
    w.mul_(2)
    return x.clone(), y.clone(), parts[0].clone(), parts[1] + 0


def _list_argument_changed_after_the_view(x):
    shape = [3, 4]
    y = x.view(shape)
    shape[0], shape[1] = 4, 3  # eager's y is (3, 4) whatever the list holds now
    y[0].add_(1)
    return x + 0, y + 0


def _view_returned_then_base_updated(x):
    y = x[1:]
    x.add_(1)
    return y


@pytest.mark.parametrize(
    "fn", [_chain_then_update, _list_argument_changed_after_the_view, _view_returned_then_base_updated]
)
def test_views_whose_aliasing_is_learned_late(fn):
    _run_both(fn, lambda: torch.arange(12.0).reshape(2, 6) if fn is _chain_then_update else torch.arange(12.0))


def test_view_output_of_an_input_shares_the_callers_memory():
    # a view returned without any update: it must still alias the caller's tensor, as in eager
    def f(x):
        return x.view(3, 4).t()

    x = torch.arange(12.0)
    out = thunder.jit(f)(x)
    x.add_(1)
    torch.testing.assert_close(out, x.view(3, 4).t())


@pytest.mark.parametrize(
    "conversion, keeps_identity",
    [
        (lambda x: x.float(), True),
        (lambda x: x.to(torch.float32), True),
        (lambda x: x.type_as(x), True),
        (lambda x: x.to(torch.float32, copy=True), False),
        (lambda x: x.to(torch.float32, False, True), False),
        (lambda x: x.double(), False),
        (lambda x: x.to(memory_format=torch.contiguous_format), True),
    ],
)
def test_conversions_return_their_argument_as_eager_does(conversion, keeps_identity):
    def f(x):
        y = conversion(x)
        return y is x, y + 0

    x = torch.randn(3)
    assert f(x)[0] is keeps_identity  # (the table is eager's answer)
    same, value = thunder.jit(f)(x)
    assert same is keeps_identity
    torch.testing.assert_close(value, conversion(x) + 0)
