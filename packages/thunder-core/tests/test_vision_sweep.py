"""The vision model sweep (timm and torchvision): train and eval, outputs, gradients and BatchNorm running
statistics vs eager.

Models come from configs with random weights (``thunder.tests.vision_models``; nothing is downloaded).
timm is an optional dependency (the ``vision`` extra, tox env ``core-vision``): without it these tests
skip. Two small models run in the fast suite; the rest are marked slow.
"""

import copy
import importlib.util

import pytest
import torch

import thunder

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="needs timm (the vision extra)")

from thunder.tests.vision_models import MODELS, SMOKE_MODELS, create, example_input  # noqa: E402

PARAMS = [pytest.param(n, marks=() if n in SMOKE_MODELS else pytest.mark.slow) for n in MODELS]


def _assert_close(actual, expected, what: str, **tol):
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what}: {m}")


def _as_accurate_as_eager(name, step, before, x, weights, eager, mine, differ):
    """Gradients that differ from eager's float32 ones by more than the sweep's tolerance must be as close to the
    float64 gradients as eager's are, run contiguous or channels-last (within a factor of 4): thunder runs grouped
    convolution networks in channels-last (thunder.transforms.conv_layout), whose float32 kernels sum in another
    order, and where a gradient cancels to a small result (a stem's weight, a BatchNorm bias) the two land apart."""

    def gradients(model, inputs, w):
        (model(inputs) * w).sum().backward()
        return {n: p.grad.double() for n, p in model.named_parameters()}

    exact = gradients(copy.deepcopy(before).double(), x.double(), weights.double())
    channels_last = copy.deepcopy(before).to(memory_format=torch.channels_last)
    eager_cl = gradients(channels_last, x.contiguous(memory_format=torch.channels_last), weights)
    mine_by_name = dict(mine.named_parameters())
    for pname, pe in eager.named_parameters():
        if pname not in differ:
            continue
        truth = exact[pname]
        eager_error = max((g - truth).abs().max().item() for g in (pe.grad.double(), eager_cl[pname]))
        error = (mine_by_name[pname].grad.double() - truth).abs().max().item()
        assert error <= 4 * eager_error + 1e-6 * (1 + truth.abs().max().item()), (
            f"{name} grad of {pname} (call {step}): {error:.3g} from the float64 gradient, eager's {eager_error:.3g}"
        )


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", PARAMS)
def test_vision_model_matches_eager(name, train):
    eager, mine = create(name).train(train), create(name).train(train)
    jm = thunder.jit(mine)
    for step in range(2):  # the second call reads what the first wrote (running statistics, module caches)
        x = example_input(name, seed=step)
        # in eval mode LeViT/EfficientFormer cache a tensor computed from a parameter: the second call's
        # backward would go through the first call's graph again (an error in eager too), so it runs without grad
        before = copy.deepcopy(eager)  # (the state this call starts from, for _as_accurate_as_eager)
        with torch.set_grad_enabled(train or step == 0):
            out_e, out_m = eager(x), jm(x)
        _assert_close(out_m, out_e, f"{name} output (call {step})", atol=1e-4, rtol=1e-3)
        if not out_e.requires_grad:
            continue
        weights = torch.randn_like(out_e)
        (out_e * weights).sum().backward()
        (out_m * weights).sum().backward()
        differ = []
        for (pname, pe), pm in zip(eager.named_parameters(), mine.parameters()):
            if pe.grad is None:
                assert pm.grad is None, pname
                continue
            if not torch.allclose(pm.grad, pe.grad, atol=1e-4, rtol=1e-2):
                differ.append(pname)
        if differ:
            _as_accurate_as_eager(name, step, before, x, weights, eager, mine, differ)
        for p in (*eager.parameters(), *mine.parameters()):
            p.grad = None
        for (bname, be), bm in zip(eager.named_buffers(), mine.buffers()):
            _assert_close(bm, be, f"{name} buffer {bname} (call {step})", atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # the user's module still runs eagerly, with eager's results
        x = example_input(name, seed=5)
        _assert_close(mine(x), eager(x), f"{name} eager call after thunder's", atol=1e-4, rtol=1e-3)
