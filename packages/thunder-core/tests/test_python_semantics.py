"""Python that user code runs inside ``thunder.jit`` answers as in eager (issue 27, part 2).

Each test runs the same function eagerly and jitted and compares what Python sees and returns.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch

import thunder


def _what_python_sees(x, p):
    return (
        x * 2,
        type(x).__name__,
        x.__class__.__name__,
        x.type(),
        x.is_cuda,
        x.device.type,
        isinstance(x, torch.Tensor),
        isinstance(p, torch.nn.Parameter),
        "half" if x.type() == "torch.FloatTensor" else "other",
    )


def test_tensor_class_and_type_string_are_the_real_ones():
    x = torch.randn(3)
    p = torch.nn.Parameter(torch.randn(2))
    expected = _what_python_sees(x, p)
    actual = thunder.jit(_what_python_sees)(x, p)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1:] == expected[1:]
    assert expected[1:3] == ("Tensor", "Tensor") and expected[3] == "torch.FloatTensor"


def _branches_on_the_class(x, w):
    y = x * 2
    plain = x + 1 if x.__class__ is torch.Tensor else x - 1
    param = w * 3 if w.__class__ is torch.nn.Parameter else w * 5
    return plain, param, (y.__class__ is torch.Tensor, isinstance(w, torch.nn.Parameter), w.__class__.__name__)


def test_class_attribute_is_the_real_tensors_class():
    # x.__class__ read torch.Tensor's stand-in class (TracingTensor), so code that branched on it took the other side
    x = torch.randn(3)
    w = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    jf = thunder.jit(_branches_on_the_class)
    for a, b in ((x, w), (x, x), (w, x)):  # each pair its own program: the class is part of the input's check
        actual, expected = jf(a, b), _branches_on_the_class(a, b)
        torch.testing.assert_close(actual[:2], expected[:2])
        assert actual[2] == expected[2]
    assert thunder.cache_misses(jf) == 3
    jf(x, w)
    assert thunder.cache_hits(jf) == 1


def test_class_attribute_of_a_module_parameter_is_parameter():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            return x * self.weight if self.weight.__class__ is torch.nn.Parameter else x

    m, x = Scale(), torch.randn(3)
    torch.testing.assert_close(thunder.jit(m)(x), m(x))


def test_type_conversion_with_a_tensor_type():
    def f(x):
        return x.type(torch.DoubleTensor) + 1, x.type(torch.float16), x.type("torch.HalfTensor"), x.type(x.type())

    x = torch.randn(3)
    for a, e in zip(thunder.jit(f)(x), f(x)):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e)


def test_type_conversion_with_an_unknown_type_name_is_refused():
    def f(x):
        return x.type("torch.NoSuchTensor")

    with pytest.raises(ValueError, match="NoSuchTensor"):
        f(torch.randn(2))
    with pytest.raises(ValueError, match="NoSuchTensor"):
        thunder.jit(f)(torch.randn(2))


def flagged(x):
    return x + 1 if flagged.add else x - 1


def test_function_attribute_change_recompiles():
    jf = thunder.jit(flagged)
    x = torch.randn(3)
    for value in (True, False, True):
        flagged.add = value
        torch.testing.assert_close(jf(x), flagged(x))
    assert thunder.cache_misses(jf) == 2


def test_changed_defaults_are_used():
    def scaled(x, k=1.0, *, shift=0.0):
        return x * k + shift

    jf = thunder.jit(scaled)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), scaled(x))
    scaled.__defaults__ = (2.0,)
    torch.testing.assert_close(jf(x), scaled(x))
    scaled.__kwdefaults__ = {"shift": 3.0}
    torch.testing.assert_close(jf(x), scaled(x))
    assert thunder.cache_misses(jf) == 3


def test_defaults_of_a_called_helper_are_guarded():
    def helper(x, k=1.0):
        return x * k

    def f(x):
        return helper(x) + 1

    jf = thunder.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    helper.__defaults__ = (5.0,)
    torch.testing.assert_close(jf(x), f(x))


@pytest.mark.parametrize("inplace", [True, False])
def test_addcmul_and_addcdiv_with_a_zero_dim_tensor_value(inplace):
    def f(x, a, b, t):
        y = x.clone()
        y = y.addcmul_(a, b, value=t) if inplace else torch.addcmul(y, a, b, value=t)
        return y * 2, torch.addcdiv(x, a, b.abs() + 1, value=t)

    x, a, b = (torch.randn(4, requires_grad=True) for _ in range(3))
    t = torch.tensor(0.25, dtype=torch.float64)  # read as a number: the result stays float32
    expected, actual = f(x, a, b, t), thunder.jit(f)(x, a, b, t)
    for e, r in zip(expected, actual):
        assert r.dtype == e.dtype
        torch.testing.assert_close(r, e)
    ge = torch.autograd.grad(sum(o.sum() for o in expected), (x, a, b))
    gr = torch.autograd.grad(sum(o.sum() for o in actual), (x, a, b))
    for e, r in zip(ge, gr):
        torch.testing.assert_close(r, e)


def test_addcmul_casts_a_tensor_value_to_an_integer_input_as_eager():
    def f(x, t):
        return torch.addcmul(x, x, x, value=t)

    xi, t = torch.arange(4), torch.tensor(2.5)
    expected = f(xi, t)
    actual = thunder.jit(f)(xi, t)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected)


def test_addcmul_value_that_requires_grad_is_refused_as_in_eager():
    def f(x, t):
        return torch.addcmul(x, x, x, value=t)

    x, t = torch.randn(3), torch.tensor(0.5, requires_grad=True)
    with pytest.raises(TypeError) as eager:
        f(x, t)
    with pytest.raises(TypeError, match="value"):
        thunder.jit(f)(x, t)
    assert "value" in str(eager.value)


def _seeded(x):
    torch.manual_seed(3)
    return x * torch.rand(3)


def _state_replayed(x):
    state = torch.get_rng_state()
    a = torch.rand(3)
    torch.set_rng_state(state)
    return x + a - torch.rand(3)


def _forked(x):
    with torch.random.fork_rng():
        torch.random.manual_seed(1)
        a = torch.rand(3)
    return x * a + torch.rand(3)


@pytest.mark.parametrize("fn", [_seeded, _state_replayed, _forked], ids=lambda f: f.__name__)
def test_random_state_changes_inside_apply_on_every_call(fn):
    jf = thunder.jit(fn)
    for call in range(3):
        torch.manual_seed(100 + call)  # the caller's state differs per call
        torch.rand(call + 1)
        x = torch.randn(3, requires_grad=True)
        before = torch.get_rng_state()
        expected = fn(x)
        after_eager = torch.get_rng_state()
        torch.set_rng_state(before)
        actual = jf(x)
        torch.testing.assert_close(actual, expected)
        # the caller's generator is left where eager leaves it
        assert torch.equal(torch.get_rng_state(), after_eager)
        torch.testing.assert_close(torch.autograd.grad(actual.sum(), x), torch.autograd.grad(expected.sum(), x))
    assert thunder.cache_misses(jf) == 1


class _Outputs(collections.OrderedDict):
    def total(self):
        return sum(v.sum() for v in self.values())


def test_returned_dict_subclass_holds_real_tensors():
    def f(x):
        out = _Outputs(double=x * 2)
        out["square"] = x * x
        out.note = "kept"
        return out

    x = torch.randn(3, requires_grad=True)
    expected, actual = f(x), thunder.jit(f)(x)
    assert type(actual) is _Outputs and list(actual) == list(expected) and actual.note == "kept"
    for k in expected:
        assert type(actual[k]) is torch.Tensor
        torch.testing.assert_close(actual[k], expected[k])
    torch.testing.assert_close(torch.autograd.grad(actual.total(), x), torch.autograd.grad(expected.total(), x))


def test_returned_closure_captures_real_tensors():
    def f(x):
        y = x.exp()
        pair = [x * 3, 1.5]

        def scale(z):
            return z * y + pair[0] * pair[1]

        return scale, y.sum()

    jf = thunder.jit(f)
    x = torch.randn(3, requires_grad=True)
    (escale, esum), (ascale, asum) = f(x), jf(x)
    z = torch.randn(3)
    torch.testing.assert_close(asum, esum)
    torch.testing.assert_close(ascale(z), escale(z))
    assert ascale.__name__ == "scale"
    torch.testing.assert_close(torch.autograd.grad(ascale(z).sum(), x), torch.autograd.grad(escale(z).sum(), x))
    x2 = torch.randn(3)  # a cached call returns a closure over this call's values
    torch.testing.assert_close(jf(x2)[0](z), f(x2)[0](z))


def test_numpy_constants_trace_and_untranslated_numpy_on_a_tensor_is_refused_naming_the_line():
    np = pytest.importorskip("numpy")

    def constant(x):
        return x + torch.from_numpy(np.arange(3, dtype=np.float32))

    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(constant)(x), constant(x))

    def on_tensor(x):
        return torch.from_numpy(np.fft.rfft(x.numpy()))  # no torch translation (test_numpy_on_tensors.py)

    with pytest.raises(Exception, match="NumPy") as info:
        thunder.jit(on_tensor)(x)
    message = str(info.value)
    assert "np.fft.rfft(x.numpy())" in message and "x.sum() for np.sum" in message


def test_torch_div_of_two_numbers_is_a_0d_tensor_as_in_eager():
    # Longformer: torch.div(hidden_states.size(1), window_overlap, rounding_mode="trunc"); thunder raised "div needs
    # a tensor"
    def f(x):
        n = torch.div(x.shape[1], 2, rounding_mode="trunc")
        m = torch.div(7, 2)
        k = torch.div(7.0, 2, rounding_mode="floor")
        return x * n + m + k, n, m, k

    x = torch.randn(2, 6)
    for actual, expected in zip(thunder.jit(f)(x), f(x)):
        assert type(actual) is type(expected) and actual.dtype == expected.dtype and actual.shape == expected.shape
        torch.testing.assert_close(actual, expected)


def _reads_a_value_computed_from_sizes(x):
    # Longformer's chunking: a 0-d tensor from sizes, used where Python needs a number
    n = torch.div(x.shape[1], 4, rounding_mode="trunc")
    chunks = n - 1
    y = x.view(x.shape[0], n, 4)  # a size (__index__)
    z = x.new_zeros((x.shape[0], chunks + 1, 4))
    scale = float(n) + math.floor(n / 3) + n.item()
    return y * scale + z, int(chunks), bool(n > 2), chunks.tolist(), x[:, chunks]


def test_value_of_a_tensor_computed_from_sizes_is_known_while_tracing():
    jf = thunder.jit(_reads_a_value_computed_from_sizes)
    for width in (16, 12, 16):  # each size its own program (the value follows the size); the third call hits
        x = torch.randn(2, width)
        actual, expected = jf(x), _reads_a_value_computed_from_sizes(x)
        torch.testing.assert_close(actual[0], expected[0])
        torch.testing.assert_close(actual[4], expected[4])
        assert actual[1:4] == expected[1:4] and type(actual[1]) is int
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (2, 1)


def test_value_computed_from_a_symbolic_size_specialises_it():
    jf = thunder.jit(_reads_a_value_computed_from_sizes, cache="symbolic values")
    for width in (16, 12, 20, 12):
        x = torch.randn(2, width)
        actual, expected = jf(x), _reads_a_value_computed_from_sizes(x)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1:4] == expected[1:4]
    assert thunder.cache_hits(jf) == 1  # (the last call: a width seen before)


@pytest.mark.parametrize(
    "read",
    [
        lambda x: int(x.sum()),
        lambda x: float(torch.rand(())),
        lambda x: bool(x[0] > 0),
        lambda x: int(x.shape[0] + x[0]),
    ],
    ids=["sum", "random", "element", "mixed"],
)
def test_value_that_depends_on_tensor_data_is_still_refused(read):
    def f(x):
        return x * read(x)

    with pytest.raises(
        thunder.tracing.errors.DataDependentControlFlowError, match="value only exists when the program runs"
    ):
        thunder.jit(f)(torch.randn(3))


def test_tensor_where_method_takes_the_tensor_where_true():
    # x.where(mask, y) is torch.where(mask, x, y); thunder called torch.where(x, mask, y) (Longformer's masks)
    def f(x, m, y):
        return x.where(m, y), x.where(condition=m, other=2.0), (m.float()).where(m, y)

    x, y = torch.randn(5), torch.randn(5)
    m = x > 0
    for a, e in zip(thunder.jit(f)(x, m, y), f(x, m, y)):
        torch.testing.assert_close(a, e)


def test_new_ones_with_size_keyword():
    def f(x):
        return x.new_ones(size=(2, 3)), x.new_zeros((1, 2)), x.new_empty(3).shape

    x = torch.randn(2, dtype=torch.float64)
    actual, expected = thunder.jit(f)(x), f(x)
    for a, e in zip(actual[:2], expected[:2]):
        torch.testing.assert_close(a, e)  # (values, shapes and the float64 dtype of x)
    assert actual[2] == expected[2]
