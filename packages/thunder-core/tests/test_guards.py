"""A cached program is never stale: everything a trace read is checked (or read at call time).

Each test changes something after the first call and compares the jitted result with eager.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import thunder
from thunder.tracing.errors import TracingError


def _x():
    return torch.randn(2, 3)


def test_replaced_submodule_is_used():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m[0] = nn.Linear(3, 3)
    torch.testing.assert_close(jm(x), m(x))


def test_deleted_submodule_is_noticed():
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    del m[1]
    torch.testing.assert_close(jm(x), m(x))


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3, bias=False)
        self.b = nn.Linear(3, 3, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_untied_weights_are_used():
    m = _Tied()
    jm = thunder.jit(m)
    x = _x()
    torch.testing.assert_close(jm(x), m(x))
    m.b.weight = nn.Parameter(torch.randn(3, 3))
    torch.testing.assert_close(jm(x), m(x))


def test_untied_by_writing_the_parameter_dict():
    m = _Tied()
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m.b._parameters["weight"] = nn.Parameter(torch.randn(3, 3))
    torch.testing.assert_close(jm(x), m(x))


def test_monkeypatched_forward_is_used():
    m = nn.Linear(3, 3)
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m.forward = lambda inp: inp * 2
    torch.testing.assert_close(jm(x), x * 2)


class _Attrs(nn.Module):
    def __init__(self):
        super().__init__()
        self.dims = (0,)
        self.dt = torch.float32
        self.fn = torch.sin
        self.t = torch.ones(3)
        self.scales = [1.0]

    def forward(self, x):
        return self.fn(x.sum(self.dims, keepdim=True).to(self.dt)) + self.t * self.scales[0]


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "dims", (1,)),
        lambda m: setattr(m, "dt", torch.float64),
        lambda m: setattr(m, "fn", torch.cos),
        lambda m: setattr(m, "t", torch.full((3,), 5.0)),
        lambda m: m.t.mul_(3),
        lambda m: m.scales.__setitem__(0, 3.0),
    ],
    ids=["tuple", "dtype", "function", "tensor", "tensor-in-place", "list"],
)
def test_module_attribute_of_any_type(change):
    m = _Attrs()
    jm = thunder.jit(m)
    x = _x()
    torch.testing.assert_close(jm(x), m(x))
    change(m)
    expected = m(x)
    out = jm(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)


def test_tensor_attribute_is_an_input_not_a_constant():
    m = _Attrs()
    jm = thunder.jit(m)
    jm(_x())
    assert any("_tensor_constant" in str(t) for t in thunder.last_traces(jm)) is False


class _Config:
    def __init__(self):
        self.scale = 2.0
        self.inner = type("Inner", (), {})()
        self.inner.shift = 1.0


class _UsesConfig(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        return x * self.config.scale + self.config.inner.shift


def test_config_object_attributes():
    config = _Config()
    m = _UsesConfig(config)
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    config.scale = 3.0
    torch.testing.assert_close(jm(x), m(x))
    config.inner.shift = -4.0
    torch.testing.assert_close(jm(x), m(x))


def test_forward_hooks_on_root_run():
    m = nn.Linear(3, 3)
    m.register_forward_hook(lambda mod, inp, out: out * 10)
    jm = thunder.jit(m)
    x = _x()
    torch.testing.assert_close(jm(x), m(x))
    handle = m.register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
    torch.testing.assert_close(jm(x), m(x))
    handle.remove()
    torch.testing.assert_close(jm(x), m(x))


def test_hook_added_to_submodule_after_jit():
    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m[0].register_forward_hook(lambda mod, inp, out: out * 0 + 2)
    torch.testing.assert_close(jm(x), m(x))


def test_hook_dict_replaced_on_submodule_after_jit():
    # the prologue checks many modules' hooks in one line; a hook dict replaced (not mutated) is seen too
    from collections import OrderedDict

    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Sequential(nn.Linear(3, 3)))
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m[2][0]._forward_hooks = OrderedDict({0: lambda mod, inp, out: out * 0 + 3})
    torch.testing.assert_close(jm(x), m(x))
    m[2][0]._forward_hooks = OrderedDict()
    torch.testing.assert_close(jm(x), m(x))


def test_submodule_training_flag_and_instance_forward_after_jit():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.Sequential(nn.Tanh()))
    m.eval()
    jm = thunder.jit(m)
    x = _x()
    torch.testing.assert_close(jm(x), m(x))
    m[2][0].forward = lambda t: t * 5
    torch.testing.assert_close(jm(x), m(x))
    del m[2][0].forward
    m[1].train()
    torch.manual_seed(0)
    expected = m(x)
    torch.manual_seed(0)
    assert (jm(x) == 0).any() and (expected == 0).any()  # dropout runs again in both
    m[1].eval()
    torch.testing.assert_close(jm(x), m(x))


def test_submodules_of_a_container_removed_without_registration_hooks():
    m = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.Tanh(), nn.Sigmoid()))
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m[1]._modules.pop("1")  # bypasses the module registration hooks
    torch.testing.assert_close(jm(x), m(x))


SCALE = 2.0
OFFSET = torch.ones(3)


def _reads_globals(x):
    return x * SCALE + OFFSET


def test_globals_rebound():
    global SCALE, OFFSET
    jf = thunder.jit(_reads_globals)
    x = _x()
    old = SCALE, OFFSET
    try:
        jf(x)
        SCALE = 3.0
        torch.testing.assert_close(jf(x), _reads_globals(x))
        OFFSET = torch.zeros(3)
        torch.testing.assert_close(jf(x), _reads_globals(x))
    finally:
        SCALE, OFFSET = old


def _helper(x):
    return x * SCALE


def _calls_helper(x):
    return _helper(x) + 1


def test_globals_of_called_helpers():
    global SCALE
    jf = thunder.jit(_calls_helper)
    x = _x()
    old = SCALE
    try:
        jf(x)
        SCALE = -1.5
        torch.testing.assert_close(jf(x), _calls_helper(x))
    finally:
        SCALE = old


def test_closure_variable_rebound():
    k = 2.0

    def g(x):
        return x * k

    jg = thunder.jit(g)
    x = _x()
    jg(x)
    k = 5.0
    torch.testing.assert_close(jg(x), g(x))


def test_torch_size_argument_does_not_recompile():
    jf = thunder.jit(lambda x, s: x.reshape(s))
    x = _x()
    for _ in range(3):
        jf(x, torch.Size([3, 2]))
    assert thunder.cache_misses(jf) == 1
    assert jf(x, torch.Size([6])).shape == (6,)


def test_negative_zero_is_not_zero():
    jf = thunder.jit(lambda x, s: 1 / (x * s))
    x = torch.ones(2)
    torch.testing.assert_close(jf(x, 0.0), 1 / (x * 0.0))
    torch.testing.assert_close(jf(x, -0.0), 1 / (x * -0.0))
    assert torch.isneginf(jf(x, -0.0)).all()


class _SideEffects(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.initialized = False
        self.seen = []

    def forward(self, x):
        self.calls += 1
        if not self.initialized:
            self.initialized = True
        self.seen.append(x.shape[0])
        return x + self.calls


def test_forward_setting_attributes_applies_them_every_call():
    m, ref = _SideEffects(), _SideEffects()
    jm = thunder.jit(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            x = _x()
            torch.testing.assert_close(jm(x), ref(x))
    assert (m.calls, m.initialized, m.seen) == (ref.calls, ref.initialized, ref.seen)


class _LazyInit(nn.Module):
    def __init__(self):
        super().__init__()
        self.ready = False
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        if not self.ready:
            self.ready = True
        return self.lin(x)


def test_lazy_init_flag_compiles_twice_then_hits():
    m = _LazyInit()
    jm = thunder.jit(m)
    for _ in range(4):
        x = _x()
        torch.testing.assert_close(jm(x), m.lin(x))
    assert m.ready
    assert thunder.cache_misses(jm) == 2


COUNTER = 0


def _bumps_global(x):
    global COUNTER
    COUNTER += 1
    return x * 2


def test_function_rebinding_a_global_it_reads():
    global COUNTER
    COUNTER = 0
    jf = thunder.jit(_bumps_global)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            jf(_x())
    assert COUNTER == 3


def test_global_forward_hook_added_after_jit():
    from torch.nn.modules.module import register_module_forward_hook

    m = nn.Linear(3, 3)
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    handle = register_module_forward_hook(lambda mod, inp, out: out + 100)
    try:
        torch.testing.assert_close(jm(x), m(x))
    finally:
        handle.remove()
    torch.testing.assert_close(jm(x), m(x))


def test_module_backward_hook_is_a_clear_error():
    m = nn.Linear(3, 3)
    m.register_full_backward_hook(lambda mod, grad_in, grad_out: None)
    with pytest.raises(RuntimeError, match="backward hooks"):
        thunder.jit(m)(_x())


def _prints(x):
    print("tracing")
    return x * 2


def _draws(x):
    import random

    return x * random.random()


@pytest.mark.parametrize("fn, what", [(_prints, "print"), (_draws, "random")])
def test_trace_only_python_warns_naming_the_line(fn, what, capsys):
    with pytest.warns(UserWarning, match=what) as record:
        thunder.jit(fn)(_x())
    message = next(str(w.message) for w in record if what in str(w.message))
    assert __file__ in message and "line" in message


class _HoldsTensors(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = [torch.ones(3), torch.full((3,), 2.0)]
        self.table = {"shift": torch.ones(3)}

    def forward(self, x):
        return x * self.pair[0] + self.pair[1] + self.table["shift"]


def test_tensors_in_module_held_containers_are_read_at_call_time():
    m = _HoldsTensors()
    jm = thunder.jit(m)
    x = torch.randn(3)
    torch.testing.assert_close(jm(x), m(x))
    m.pair[0] = torch.full((3,), 5.0)
    torch.testing.assert_close(jm(x), m(x))
    m.table["shift"] = torch.zeros(3)
    torch.testing.assert_close(jm(x), m(x))


class _KV:
    def __init__(self):
        self.keys = torch.zeros(1, 2)


class _HoldsCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = _KV()

    def forward(self, v):
        self.cache.keys = torch.cat([self.cache.keys, v])
        return self.cache.keys.sum(0)


def test_object_held_by_module_is_updated_every_call():
    m, ref = _HoldsCache(), _HoldsCache()
    jm = thunder.jit(m)
    for _ in range(3):
        v = torch.randn(1, 2)
        torch.testing.assert_close(jm(v), ref(v))
        torch.testing.assert_close(m.cache.keys, ref.cache.keys)


CALL_LOG: list = []
STATE = {"n": 0}


def _mutates_global_containers(x):
    CALL_LOG.append(1)
    STATE["n"] += 1
    return x * 2


def test_function_changing_global_containers_it_reads():
    CALL_LOG.clear()
    STATE["n"] = 0
    jf = thunder.jit(_mutates_global_containers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            x = _x()
            torch.testing.assert_close(jf(x), x * 2)
    assert len(CALL_LOG) == 3 and STATE["n"] == 3


_STORE: dict = {}


def test_tensor_stored_into_a_global_container_is_a_clear_error():
    # eager leaves a real tensor in the dict; a stand-in left there after tracing would be silently wrong
    def f(x):
        _STORE["t"] = x * 2
        return x + 1

    with pytest.raises(TracingError, match="'_STORE'"):
        thunder.jit(f)(torch.ones(3))


# ---------------------------------------------------------------- the identity test in front of value checks
# Module attributes and globals holding immutable values are checked by one identity test per call; the value
# checks run only when an object was replaced. These exercise that fallback.


class _Scaled(nn.Module):
    def __init__(self, scale, shift=None):
        super().__init__()
        self.scale = scale
        self.shift = shift
        self.name = "scaled"

    def forward(self, x):
        y = x * self.scale
        return y if self.shift is None else y + self.shift


def _scaled_int_input():
    return torch.arange(6).reshape(2, 3)


def test_attribute_replaced_by_an_equal_object_is_still_a_hit():
    m = _Scaled(1.5)
    jm = thunder.jit(m)
    x = _x()
    jm(x)
    m.scale = float("1.5")  # a new float object, equal value and type: the value check passes
    m.name = "".join(["scal", "ed"])  # (a new str object)
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 1


@pytest.mark.parametrize("new", [2.0, True], ids=["int-to-float", "int-to-bool"])
def test_attribute_replaced_by_an_equal_value_of_another_type_recompiles(new):
    m = _Scaled(2 if new is not True else 1)
    jm = thunder.jit(m)
    x = _scaled_int_input()
    assert jm(x).dtype == m(x).dtype
    m.scale = new  # 2 == 2.0 and 1 == True, but an int tensor times a float is a float tensor
    expected = m(x)
    out = jm(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)
    assert thunder.cache_misses(jm) == 2


def test_attribute_deleted_from_the_instance_reads_the_class_attribute():
    class WithDefault(_Scaled):
        shift = 10.0

    m = WithDefault(2.0, shift=None)
    jm = thunder.jit(m)
    x = _x()
    torch.testing.assert_close(jm(x), m(x))
    del m.shift  # now the class attribute, 10.0
    torch.testing.assert_close(jm(x), m(x))


def test_recompile_warning_names_the_attribute_behind_the_identity_test():
    m = _Scaled(1.0)
    jm = thunder.jit(m, recompile_limit=1)
    x = _x()
    jm(x)
    m.scale = 3.0
    with pytest.warns(UserWarning, match=r"scale"):
        jm(x)
    torch.testing.assert_close(jm(x), m(x))


def test_global_replaced_by_an_equal_object_then_by_another_value():
    global SCALE
    jf = thunder.jit(_reads_globals)
    x = _x()
    old = SCALE
    try:
        jf(x)
        SCALE = float(repr(old))  # equal value, new object
        torch.testing.assert_close(jf(x), _reads_globals(x))
        assert thunder.cache_misses(jf) == 1
        SCALE = old + 1
        torch.testing.assert_close(jf(x), _reads_globals(x))
        assert thunder.cache_misses(jf) == 2
    finally:
        SCALE = old
