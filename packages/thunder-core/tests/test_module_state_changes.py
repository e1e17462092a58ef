"""A jitted module that has been called many times (its cached program on the fast path) still sees every change
of its state: each test warms the program up, changes the module the way a user can, and compares the jitted
result (and gradients where they apply) with eager's on the same module, for the first call after the change and
the next.

Every test runs three times: with the prologue's gate of dict version tags (docs/caching.md, "How a module's state is
checked cheaply") comparing the sum of the tags (Python up to 3.11), the same gate comparing the tags one by one (as
from 3.12), and with every check on every call (as where PyTorch provides no tags).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

import thunder
from thunder.tracing import dict_versions


@pytest.fixture(autouse=True, params=["version gate", "version gate, tags compared one by one", "full checks"])
def gate(request, monkeypatch):
    if request.param == "full checks":
        monkeypatch.setattr(dict_versions, "_resolved", [None])
    else:
        assert dict_versions.dict_version_function() is not None, "torch's dict_version does not work here"
    if request.param.endswith("one by one"):  # (as from Python 3.12, where the sum of the tags is not used)
        monkeypatch.setattr(dict_versions, "_growing", [False])
    return request.param


def _uses_gate(jitted) -> bool:
    return "_dict_version" in str(thunder.last_prologue_traces(jitted)[-1])


class _Net(nn.Module):
    """Linear layers, a BatchNorm (buffers read as values) and a plain tensor buffer."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.norm = nn.BatchNorm1d(6)
        self.body = nn.Sequential(nn.Tanh(), nn.Linear(6, 3))
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 3))

    def forward(self, x):
        return self.body(self.norm(self.fc1(x))) + self.offset


def _setup(train: bool = False):
    torch.manual_seed(0)
    model = _Net()
    model.train(train)
    jitted = thunder.jit(model)
    x = torch.randn(5, 4)
    for _ in range(4):  # warm: later calls run on the cached program's fast path
        jitted(x)
    return model, jitted, x


def _same_as_eager(model, jitted, x, *, grads: bool = True, calls: int = 2) -> None:
    for _ in range(calls):
        params = [p for p in model.parameters() if p.requires_grad]
        state = {k: v.clone() for k, v in model.named_buffers()}
        actual = jitted(x)
        g_actual = torch.autograd.grad(actual.sum(), params) if grads and actual.requires_grad else None
        actual_state = {k: v.clone() for k, v in model.named_buffers()}
        with torch.no_grad():  # eager runs from the same buffers (BatchNorm in training updates them)
            for k, v in state.items():
                model.get_buffer(k).copy_(v)
        expected = model(x)
        torch.testing.assert_close(actual, expected)
        assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad
        for k, v in model.named_buffers():
            torch.testing.assert_close(actual_state[k], v)
        if grads and expected.requires_grad:
            g_expected = torch.autograd.grad(expected.sum(), params)
            for a, e in zip(g_actual, g_expected):
                torch.testing.assert_close(a, e)


def test_the_gate_is_in_the_prologue_only_where_tags_work(gate):
    model, jitted, x = _setup()
    assert _uses_gate(jitted) is gate.startswith("version gate")
    summed = "_sum(map(_dict_version" in str(thunder.last_prologue_traces(jitted)[-1])
    assert summed is (gate == "version gate" and dict_versions.tags_only_grow())


def test_changes_in_two_modules_between_calls_are_both_seen():
    # (with the sum of the tags: two changes never cancel out, each makes its tag larger)
    model, jitted, x = _setup()
    model.norm.eps = 0.25
    model.fc1.weight.data = model.fc1.weight.data * 2
    model.body[1].bias.requires_grad_(False)
    _same_as_eager(model, jitted, x)
    model.norm.eps = 1e-5
    model.body[1].bias.requires_grad_(True)
    _same_as_eager(model, jitted, x)


def test_the_tags_sum_only_where_a_changed_dict_gets_a_larger_tag(monkeypatch):
    if dict_versions.dict_version_function() is None:
        pytest.skip("torch's dict_version is not available here")
    versions = iter([10, 11, 9, 12, 13, 14, 15, 16, 17, 18])  # a tag that goes down after a change
    monkeypatch.setattr(dict_versions, "_growing", [])
    assert dict_versions._probe_growth(lambda d: next(versions)) is False
    if sys.version_info < (3, 12):
        assert dict_versions._probe_growth(dict_versions.dict_version_function()) is True
    else:  # (the low bits of a tag can go down there: the tags are compared one by one)
        assert dict_versions.tags_only_grow() is False


def test_a_change_undone_before_the_next_call_is_still_checked():
    # the tags come from one counter: setting an attribute and setting it back changes the tag, the checks run
    # and pass (a hit), and the tags are refreshed so the call after that is back on the gate
    model, jitted, x = _setup()
    hits = thunder.cache_hits(jitted)
    eps = model.norm.eps
    model.norm.eps = 0.25
    model.norm.eps = eps
    _same_as_eager(model, jitted, x)
    assert thunder.cache_hits(jitted) == hits + 2 and thunder.cache_misses(jitted) == 1


def test_an_attribute_replaced_by_an_equal_number_is_a_hit():
    model, jitted, x = _setup()
    hits = thunder.cache_hits(jitted)
    model.norm.eps = float(str(model.norm.eps))  # another float object, equal: the checks pass
    _same_as_eager(model, jitted, x)
    assert thunder.cache_hits(jitted) == hits + 2 and thunder.cache_misses(jitted) == 1


def test_requires_grad_turned_off_and_on():
    model, jitted, x = _setup()
    model.fc1.weight.requires_grad_(False)
    _same_as_eager(model, jitted, x)
    model.fc1.weight.requires_grad_(True)
    _same_as_eager(model, jitted, x)


def test_parameter_data_replaced_with_the_same_metadata():
    model, jitted, x = _setup()
    model.fc1.weight.data = torch.randn(6, 4)
    _same_as_eager(model, jitted, x)


@pytest.mark.parametrize(
    "new",
    [
        lambda w: torch.randn(6, 4, dtype=torch.float64),  # dtype
        lambda w: torch.randn(4, 6).t(),  # strides (a transposed layout)
        lambda w: torch.randn(6, 8)[:, ::2],  # strides (a step)
    ],
    ids=["dtype", "transposed", "strided"],
)
def test_parameter_data_replaced_with_other_metadata(new):
    model, jitted, x = _setup()
    model.fc1.weight.data = new(model.fc1.weight)
    if model.fc1.weight.dtype == torch.float64:
        with pytest.raises(RuntimeError):  # eager: mat1 and mat2 must have the same dtype
            model(x)
        with pytest.raises(Exception):  # noqa: B017 - thunder raises as well (its own message), never a stale result
            jitted(x)
        return
    _same_as_eager(model, jitted, x)


def test_buffer_resized_in_place():
    model, jitted, x = _setup()
    with torch.no_grad():
        model.offset.resize_(1)
        model.offset.fill_(3.0)
    _same_as_eager(model, jitted, x)


def test_parameter_set_to_another_storage():
    model, jitted, x = _setup()
    with torch.no_grad():
        model.body[1].bias.set_(torch.tensor([5.0, 6.0, 7.0]))
    _same_as_eager(model, jitted, x)


def test_parameter_dict_written_directly():
    model, jitted, x = _setup()
    model.fc1._parameters["weight"] = nn.Parameter(torch.randn(6, 4))
    _same_as_eager(model, jitted, x)
    model.fc1._parameters["bias"] = nn.Parameter(torch.randn(6, dtype=torch.float64))
    with pytest.raises(Exception):  # noqa: B017 - eager raises here (float64 bias); never a stale result
        model(x)
    with pytest.raises(Exception):  # noqa: B017
        jitted(x)


def test_parameter_replaced_by_attribute_assignment():
    model, jitted, x = _setup()
    model.body[1].weight = nn.Parameter(torch.randn(3, 6))
    _same_as_eager(model, jitted, x)


def test_whole_module_dtype_changed():
    model, jitted, x = _setup()
    model.double()
    _same_as_eager(model, jitted, x.double())
    model.float()
    _same_as_eager(model, jitted, x)


def test_parameter_shape_changed():
    model, jitted, x = _setup()
    model.body[1] = nn.Linear(6, 2)
    model.offset = torch.zeros(2)
    _same_as_eager(model, jitted, x)


def test_no_grad_and_autocast_modes():
    model, jitted, x = _setup()
    with torch.no_grad():
        _same_as_eager(model, jitted, x, grads=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        actual = jitted(x)
        expected = model(x)
    assert actual.dtype == expected.dtype  # (float32: the bfloat16 result plus the float32 buffer)
    torch.testing.assert_close(actual, expected, atol=2e-2, rtol=2e-2)
    _same_as_eager(model, jitted, x)


def test_new_submodule_in_a_container():
    model, jitted, x = _setup()
    model.body.append(nn.Sigmoid())
    _same_as_eager(model, jitted, x)


def test_new_submodule_attribute_read_by_forward():
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            gate = getattr(self, "gate", None)
            return y if gate is None else gate(y)

    torch.manual_seed(0)
    model = Gated()
    jitted = thunder.jit(model)
    x = torch.randn(2, 4)
    for _ in range(4):
        jitted(x)
    model.gate = nn.Linear(4, 1)
    _same_as_eager(model, jitted, x)
    del model.gate
    _same_as_eager(model, jitted, x)


def test_train_and_eval():
    model, jitted, x = _setup(train=False)
    model.train()
    _same_as_eager(model, jitted, x)
    model.eval()
    _same_as_eager(model, jitted, x)
    model.norm.train()  # one submodule only
    _same_as_eager(model, jitted, x)


def test_buffers_updated_in_place_between_calls():
    model, jitted, x = _setup()
    with torch.no_grad():
        model.norm.running_mean.add_(0.5)
        model.norm.running_var.mul_(3.0)
        model.offset.copy_(torch.tensor([4.0, 5.0, 6.0]))
    _same_as_eager(model, jitted, x)


def test_attribute_changed_on_a_submodule():
    model, jitted, x = _setup()
    model.norm.eps = 0.5
    _same_as_eager(model, jitted, x)
    model.norm.momentum = 0.9
    model.train()
    _same_as_eager(model, jitted, x)


def test_forward_hook_registered_and_removed():
    model, jitted, x = _setup()
    handle = model.body[1].register_forward_hook(lambda mod, inp, out: out * 2)
    _same_as_eager(model, jitted, x)
    handle.remove()
    _same_as_eager(model, jitted, x)


def test_many_alternating_changes_keep_matching():
    # a change, then back, many times: whatever a check caches must follow every state
    model, jitted, x = _setup()
    for i in range(6):
        model.train(i % 2 == 0)
        model.fc1.weight.requires_grad_(i % 3 != 0)
        model.norm.eps = 1e-5 if i % 2 else 1e-3
        _same_as_eager(model, jitted, x, calls=1)


class _Scaled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 10


def test_class_of_a_submodule_reassigned():
    # ``module.__class__ = Other`` changes which forward runs without touching the module's __dict__
    model, jitted, x = _setup()
    model.body[1].__class__ = _Scaled
    _same_as_eager(model, jitted, x)
    model.body[1].__class__ = nn.Linear
    _same_as_eager(model, jitted, x)


def test_class_of_a_module_with_hooks_reassigned():
    model, jitted, x = _setup()
    model.body[1].register_forward_hook(lambda mod, inp, out: out + 1)  # (a module with hooks: its own check line)
    _same_as_eager(model, jitted, x)
    model.body[1].__class__ = _Scaled
    _same_as_eager(model, jitted, x)


def _scaled(t, factor):
    copy = t.detach().clone()
    return copy.mul_(factor) if copy.is_floating_point() else copy


@pytest.mark.parametrize("kind", ["_parameters", "_buffers"])
@pytest.mark.parametrize("same_tensors", [False, True], ids=["new tensors", "same tensors"])
def test_a_modules_parameter_or_buffer_dict_replaced(kind, same_tensors):
    # behind the gate the prologue reads parameters and buffers from the dicts the modules had when traced: a module
    # given a new dict object must not keep reading the old one
    model, jitted, x = _setup()
    owner = model.fc1 if kind == "_parameters" else model.norm
    old = getattr(owner, kind)
    new = {k: (v if same_tensors or v is None else _scaled(v, 1.5)) for k, v in old.items()}
    if kind == "_parameters" and not same_tensors:
        new = {k: nn.Parameter(v) for k, v in new.items()}
    owner.__dict__[kind] = new
    _same_as_eager(model, jitted, x)
    if not same_tensors:  # the old dict, still held by the program, changes too: the new one decides
        for v in old.values():
            if v is not None and v.is_floating_point():
                with torch.no_grad():
                    v.add_(100.0)
        _same_as_eager(model, jitted, x)


class _Configured(nn.Module):
    """Reads a config object (plain data, a dict of numbers, and optionally a list) in its forward."""

    def __init__(self, with_list: bool):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.config = types.SimpleNamespace(scale=2.0, extra={"shift": 1.0}, name="cfg")
        if with_list:
            self.config.offsets = [0.5, 0.25, 0.125]

    def forward(self, x):
        y = self.fc(x) * self.config.scale + self.config.extra["shift"]
        if hasattr(self.config, "offsets"):
            y = y + torch.tensor(self.config.offsets)
        return y


_CONFIG_CHANGES = {
    "attribute set": lambda cfg: setattr(cfg, "scale", 3.0),
    "attribute written in __dict__": lambda cfg: cfg.__dict__.__setitem__("scale", 4.0),
    "dict entry changed in place": lambda cfg: cfg.extra.__setitem__("shift", 5.0),
    "dict replaced by an equal one": lambda cfg: setattr(cfg, "extra", dict(cfg.extra)),
    "dict replaced by another": lambda cfg: setattr(cfg, "extra", {"shift": 7.0}),
    "dict entry added": lambda cfg: cfg.extra.__setitem__("unused", 0),
    "list changed in place": lambda cfg: cfg.offsets.__setitem__(0, 9.0) if hasattr(cfg, "offsets") else None,
}


@pytest.mark.parametrize("with_list", [False, True], ids=["plain config", "config with a list"])
@pytest.mark.parametrize("change", list(_CONFIG_CHANGES))
def test_config_object_changed(change, with_list):
    # a config holding only immutable values and dicts of them is compared only when a version tag of its
    # __dict__ or of those dicts moved; one with a list is compared on every call
    torch.manual_seed(0)
    model = _Configured(with_list)
    jitted = thunder.jit(model)
    x = torch.randn(5, 4)
    for _ in range(3):
        jitted(x)
    _CONFIG_CHANGES[change](model.config)
    _same_as_eager(model, jitted, x)
    _CONFIG_CHANGES[change](model.config)  # (again: the program compiled for the change keeps matching)
    _same_as_eager(model, jitted, x)
