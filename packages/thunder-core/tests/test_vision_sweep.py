"""The vision model sweep (timm and torchvision): train and eval, outputs, gradients and BatchNorm running
statistics vs eager.

Models come from configs with random weights (``thunder.tests.vision_models``; nothing is downloaded).
timm is an optional dependency (the ``vision`` extra, tox env ``core-vision``): without it these tests
skip. Two small models run in the fast suite; the rest are marked slow.
"""

import importlib.util

import pytest
import torch

import thunder

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="needs timm (the vision extra)")

from thunder.tests.vision_models import MODELS, SMOKE_MODELS, create, example_input  # noqa: E402

PARAMS = [pytest.param(n, marks=() if n in SMOKE_MODELS else pytest.mark.slow) for n in MODELS]


def _assert_close(actual, expected, what: str, **tol):
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", PARAMS)
def test_vision_model_matches_eager(name, train):
    eager, mine = create(name).train(train), create(name).train(train)
    jm = thunder.jit(mine)
    for step in range(2):  # the second call reads what the first wrote (running statistics, module caches)
        x = example_input(name, seed=step)
        # in eval mode LeViT/EfficientFormer cache a tensor computed from a parameter: the second call's
        # backward would go through the first call's graph again (an error in eager too), so it runs without grad
        with torch.set_grad_enabled(train or step == 0):
            out_e, out_m = eager(x), jm(x)
        _assert_close(out_m, out_e, f"{name} output (call {step})", atol=1e-4, rtol=1e-3)
        if not out_e.requires_grad:
            continue
        weights = torch.randn_like(out_e)
        (out_e * weights).sum().backward()
        (out_m * weights).sum().backward()
        for (pname, pe), pm in zip(eager.named_parameters(), mine.parameters()):
            if pe.grad is None:
                assert pm.grad is None, pname
                continue
            _assert_close(pm.grad, pe.grad, f"{name} grad of {pname} (call {step})", atol=1e-4, rtol=1e-2)
            pe.grad = pm.grad = None
        for (bname, be), bm in zip(eager.named_buffers(), mine.buffers()):
            _assert_close(bm, be, f"{name} buffer {bname} (call {step})", atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # the user's module still runs eagerly, with eager's results
        x = example_input(name, seed=5)
        _assert_close(mine(x), eager(x), f"{name} eager call after thunder's", atol=1e-4, rtol=1e-3)
