"""ThunderModule shares the original module's state: same tensors, same names, same updates."""

from __future__ import annotations

import copy

import pytest
import torch

import thunder


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.block = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU())
        self.register_buffer("offset", torch.arange(6, dtype=torch.float32))
        self.some_attr = "hello"
        self.scale = 0.5

    def forward(self, x):
        return self.block(self.lin(x)) * self.scale + self.offset

    def helper(self) -> int:
        return 42


@pytest.fixture
def net():
    torch.manual_seed(0)
    m = Net()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def test_forward_matches_eager(net):
    tm = thunder.jit(net)
    x = torch.randn(3, 4)
    torch.testing.assert_close(tm(x), net(x))


def test_is_a_module(net):
    tm = thunder.jit(net)
    assert isinstance(tm, thunder.ThunderModule)
    assert isinstance(tm, torch.nn.Module)


def test_get_parameter_is_identical(net):
    tm = thunder.jit(net)
    for name in ("lin.weight", "lin.bias", "block.0.weight"):
        assert tm.get_parameter(name) is net.get_parameter(name)


def test_get_buffer_is_identical(net):
    tm = thunder.jit(net)
    assert tm.get_buffer("offset") is net.offset


def test_get_submodule_is_identical(net):
    tm = thunder.jit(net)
    assert tm.get_submodule("block.0") is net.block[0]
    assert tm.get_submodule("lin") is net.lin


def test_named_parameters_same_names_and_objects(net):
    tm = thunder.jit(net)
    got = list(tm.named_parameters())
    expected = list(net.named_parameters())
    assert [n for n, _ in got] == [n for n, _ in expected]
    assert all(a is b for (_, a), (_, b) in zip(got, expected))


def test_named_buffers_same_names_and_objects(net):
    tm = thunder.jit(net)
    got = list(tm.named_buffers())
    expected = list(net.named_buffers())
    assert [n for n, _ in got] == [n for n, _ in expected] == ["offset"]
    assert all(a is b for (_, a), (_, b) in zip(got, expected))


def test_parameters_are_identical(net):
    tm = thunder.jit(net)
    got = list(tm.parameters())
    expected = list(net.parameters())
    assert len(got) == len(expected) == 4
    assert all(a is b for a, b in zip(got, expected))


def test_state_dict_keys_and_values(net):
    tm = thunder.jit(net)
    got, expected = tm.state_dict(), net.state_dict()
    assert list(got) == list(expected)
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], rtol=0, atol=0)


def test_load_state_dict_then_call_uses_new_values(net):
    tm = thunder.jit(net)
    x = torch.randn(3, 4)
    tm(x)  # trace and cache with the old values
    torch.manual_seed(1)
    other = Net()
    tm.load_state_dict(other.state_dict())
    torch.testing.assert_close(net.lin.weight, other.lin.weight)
    torch.testing.assert_close(tm(x), other(x).detach())
    assert thunder.cache_misses(tm) == 1


def test_load_state_dict_assign_then_call_uses_new_tensors(net):
    tm = thunder.jit(net)
    x = torch.randn(3, 4)
    tm(x)
    torch.manual_seed(2)
    other = Net()
    for p in other.parameters():
        p.requires_grad_(False)
    tm.load_state_dict(other.state_dict(), assign=True)
    torch.testing.assert_close(tm(x), other(x))


def test_torch_distributed_state_dict_api_uses_the_modules_names(net):
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
    )

    tm = thunder.jit(net)
    got = get_model_state_dict(tm)
    assert list(got) == list(net.state_dict())
    torch.manual_seed(3)
    other = Net()
    set_model_state_dict(tm, other.state_dict())  # keys without "_model." load
    torch.testing.assert_close(net.lin.weight, other.lin.weight, rtol=0, atol=0)
    for p in net.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(tm.parameters())
    tm(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert set(get_optimizer_state_dict(tm, opt)["state"]) == {n for n, _ in net.named_parameters()}


def test_in_place_parameter_update_is_seen(net):
    tm = thunder.jit(net)
    x = torch.randn(3, 4)
    tm(x)
    with torch.no_grad():
        net.lin.weight.mul_(2.0)
    torch.testing.assert_close(tm(x), net(x))


def test_batchnorm_train_updates_running_stats_like_eager():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(5)
    for p in bn.parameters():
        p.requires_grad_(False)
    reference = copy.deepcopy(bn)
    tm = thunder.jit(bn)
    for step in range(3):
        x = torch.randn(8, 5) * (step + 1) + step
        torch.testing.assert_close(tm(x), reference(x))
    torch.testing.assert_close(bn.running_mean, reference.running_mean)
    torch.testing.assert_close(bn.running_var, reference.running_var)
    assert bn.num_batches_tracked.item() == reference.num_batches_tracked.item() == 3


def test_batchnorm_buffers_stay_the_same_objects():
    bn = torch.nn.BatchNorm1d(5)
    mean, var, count = bn.running_mean, bn.running_var, bn.num_batches_tracked
    tm = thunder.jit(bn)
    with torch.no_grad():
        tm(torch.randn(4, 5))
    assert tm.get_buffer("running_mean") is mean and bn.running_mean is mean
    assert bn.running_var is var and bn.num_batches_tracked is count


def test_batchnorm_train_eval_switch_matches_eager():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(5)
    for p in bn.parameters():
        p.requires_grad_(False)
    reference = copy.deepcopy(bn)
    tm = thunder.jit(bn)
    x = torch.randn(8, 5) + 3
    torch.testing.assert_close(tm(x), reference(x))  # train: batch statistics
    tm.eval()
    reference.eval()
    assert not bn.training
    torch.testing.assert_close(tm(x), reference(x))  # eval: running statistics
    tm.train()
    reference.train()
    torch.testing.assert_close(tm(x), reference(x))
    torch.testing.assert_close(bn.running_mean, reference.running_mean)
    assert bn.num_batches_tracked.item() == 2


def test_train_eval_propagates_to_original(net):
    tm = thunder.jit(net)
    tm.eval()
    assert not net.training and not net.block[0].training
    tm.train()
    assert net.training and net.block[0].training


def test_attribute_falls_back_to_module(net):
    tm = thunder.jit(net)
    assert tm.some_attr == "hello"
    assert tm.scale == 0.5
    assert tm.helper() == 42
    assert tm.lin is net.lin


def test_missing_attribute_raises_attribute_error(net):
    tm = thunder.jit(net)
    with pytest.raises(AttributeError, match="no_such_attr"):
        tm.no_such_attr  # noqa: B018


def test_changed_python_attribute_retraces(net):
    tm = thunder.jit(net)
    x = torch.randn(3, 4)
    tm(x)
    net.scale = 2.0
    torch.testing.assert_close(tm(x), net(x))


def test_jit_of_thunder_module_wraps_original(net):
    tm = thunder.jit(net)
    tm2 = thunder.jit(tm)
    assert tm2._model is net
    x = torch.randn(3, 4)
    torch.testing.assert_close(tm2(x), net(x))
