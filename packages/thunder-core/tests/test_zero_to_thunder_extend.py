"""The "Extending Thunder" part of the Zero to Thunder tutorial (shared/seeds/zero_to_thunder.md), on CPU.

Differences from the notebook, all forced by running on CPU with the pinned packages:

- the Unsloth Triton kernel is replaced by a pure-PyTorch stand-in with the same interface
  (transposed row layout, ``(BLOCK_SIZE, num_warps)`` launch settings, the negated-sine backward),
  and the checker accepts CPU tensors instead of CUDA ones;
- the model is the small ``llama-tiny`` config instead of ``llama2-like``;
- litgpt 0.5.13's ``apply_rope`` wants ``cos``/``sin`` with a batch dimension, ``(1, T, head_size)``,
  so ``test_apply_rope`` slices them from the model's ``(block_size, head_size)`` caches.
"""

from __future__ import annotations

import re

import litgpt
import pytest
import torch

import thunder
from thunder import TensorProxy
from thunder.tests.litgpt_model import GPT, Config


def apply_rope_impl(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return litgpt.model.apply_rope(x, cos, sin)


def apply_rope_meta(x: TensorProxy, cos: TensorProxy, sin: TensorProxy) -> TensorProxy:
    return TensorProxy(like=x)


# ---------------------------------------------------------------- a pure-PyTorch stand-in for Unsloth's kernel

MAX_FUSED_SIZE = 65536


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def calculate_settings(n: int) -> tuple[int, int]:
    BLOCK_SIZE = next_power_of_2(n)
    if BLOCK_SIZE > MAX_FUSED_SIZE:
        raise RuntimeError(f"Cannot launch Triton kernel since n = {n} exceeds the maximum CUDA blocksize.")
    num_warps = 4
    if BLOCK_SIZE >= 32768:
        num_warps = 32
    elif BLOCK_SIZE >= 8192:
        num_warps = 16
    elif BLOCK_SIZE >= 2048:
        num_warps = 8
    return BLOCK_SIZE, num_warps


def _rope_embedding(Q, cos, sin, seqlen: int, head_dim: int, n_heads: int, BACKWARD_PASS: bool) -> None:
    """What the Triton kernel does, in place on ``Q`` of shape ``(batch * seqlen, n_heads * head_dim)``."""
    half = head_dim // 2
    rows = Q.view(-1, seqlen, n_heads, head_dim)
    cos1 = cos[:seqlen, :half].reshape(1, seqlen, 1, half)
    sin1 = sin[:seqlen, :half].reshape(1, seqlen, 1, half)
    if BACKWARD_PASS:
        sin1 = -sin1
    Q1 = rows[..., :half].to(sin1.dtype)
    Q2 = rows[..., half:].to(sin1.dtype)
    out1, out2 = Q1 * cos1 - Q2 * sin1, Q2 * cos1 + Q1 * sin1  # both before storing: Q1, Q2 may be views
    rows[..., :half] = out1
    rows[..., half:] = out2


def fast_rope_embedding_forward(Q, cos, sin):
    Q = Q.transpose(1, 2).clone()
    cos, sin = cos.squeeze(), sin.squeeze()
    batch, seq_len, n_heads, head_dim = Q.shape
    Q = Q.reshape(batch * seq_len, n_heads * head_dim)
    assert seq_len <= cos.shape[0]
    BLOCK_SIZE, num_warps = calculate_settings(head_dim // 2)
    _rope_embedding(Q, cos, sin, seq_len, head_dim, n_heads, BACKWARD_PASS=False)
    Q = Q.view(batch, seq_len, n_heads, head_dim).transpose(1, 2)
    return Q, (BLOCK_SIZE, num_warps)


def fast_rope_embedding_backward(BLOCK_SIZE, num_warps, cos, sin, dY):
    dY = dY.transpose(1, 2)
    batch, seq_len, n_heads, head_dim = dY.shape
    dY = dY.reshape(batch * seq_len, n_heads * head_dim)
    cos, sin = cos.squeeze(), sin.squeeze()
    _rope_embedding(dY, cos, sin, seq_len, head_dim, n_heads, BACKWARD_PASS=True)
    dY = dY.view(batch, seq_len, n_heads, head_dim)
    dY = dY.transpose(1, 2)
    return dY


def fast_rope_embedding_forward_meta(Q, cos, sin):
    batch, n_heads, seq_len, head_dim = Q.shape
    assert seq_len <= cos.shape[-2]
    BLOCK_SIZE, num_warps = calculate_settings(head_dim // 2)
    return TensorProxy(like=Q), (BLOCK_SIZE, num_warps)


def fast_rope_embedding_backward_meta(BLOCK_SIZE, num_warps, cos, sin, dY):
    return TensorProxy(like=dY)


# ---------------------------------------------------------------- the tutorial's cells


@pytest.fixture
def tut():
    """The executor with ``apply_rope`` (replacing litgpt's) and the Unsloth-style operators registered."""
    my_ex = thunder.extend.OperatorExecutor("my_ex", version="0.0.1")
    thunder.extend.register_executor(my_ex)
    apply_rope = my_ex.register_operator(
        "apply_rope", like=apply_rope_meta, fn=apply_rope_impl, replaces=litgpt.model.apply_rope
    )
    unsloth_apply_rope_forward = my_ex.register_operator(
        "unsloth_apply_rope_forward", meta=fast_rope_embedding_forward_meta, fn=fast_rope_embedding_forward
    )
    unsloth_apply_rope_backward = my_ex.register_operator(
        "unsloth_apply_rope_backward", meta=fast_rope_embedding_backward_meta, fn=fast_rope_embedding_backward
    )

    def apply_rope_to_unsloth(x: TensorProxy, cos: TensorProxy, sin: TensorProxy) -> TensorProxy:
        assert len(x.shape) == 4
        res, *_ = unsloth_apply_rope_forward(x, cos, sin)
        return res

    def apply_rope_to_unsloth_checker(x: TensorProxy, cos: TensorProxy, sin: TensorProxy) -> bool:
        if len(x.shape) != 4:
            return False
        return (
            x.device.devicetype == thunder.devices.DeviceType.CPU
            and cos.device.devicetype == thunder.devices.DeviceType.CPU
            and sin.device.devicetype == thunder.devices.DeviceType.CPU
        )

    def unsloth_apply_rope_grad(x: TensorProxy, cos: TensorProxy, sin: TensorProxy):
        from thunder.core.transforms import get_grad, put_grads

        res, (BLOCK_SIZE, num_warps) = unsloth_apply_rope_forward(x, cos, sin)
        grad_res = get_grad(res)
        grad_x = unsloth_apply_rope_backward(BLOCK_SIZE, num_warps, cos, sin, grad_res)
        put_grads((x,), (grad_x,))
        return res

    class Tut:
        pass

    t = Tut()
    t.my_ex, t.apply_rope = my_ex, apply_rope
    t.to_unsloth, t.checker, t.grad = apply_rope_to_unsloth, apply_rope_to_unsloth_checker, unsloth_apply_rope_grad
    torch.manual_seed(0)
    t.m = GPT(Config.from_name("llama-tiny"))
    t.Q = torch.randn(2, 4, 32, 64)  # (batch, heads, sequence, head size)
    yield t
    thunder.extend.deregister_executor(my_ex)


def test_apply_rope(x, m):
    T = x.size(-2)
    return litgpt.model.apply_rope(x, m.cos[:T].unsqueeze(0), m.sin[:T].unsqueeze(0))


test_apply_rope.__test__ = False  # the tutorial's name; not a pytest test


def _executors(tut):
    return (tut.my_ex,) + thunder.get_default_executors()


def test_stand_in_matches_litgpt():
    torch.manual_seed(0)
    m = GPT(Config.from_name("llama-tiny"))
    Q = torch.randn(2, 4, 32, 64)
    cos, sin = m.cos[:32].unsqueeze(0), m.sin[:32].unsqueeze(0)
    out, settings = fast_rope_embedding_forward(Q, cos, sin)
    torch.testing.assert_close(out, litgpt.model.apply_rope(Q, cos, sin))
    assert settings == (32, 4)
    Qg = Q.clone().requires_grad_()
    go = torch.randn_like(Q)
    (want,) = torch.autograd.grad(litgpt.model.apply_rope(Qg, cos, sin), Qg, go)
    torch.testing.assert_close(fast_rope_embedding_backward(32, 4, cos, sin, go), want)


def test_apply_rope_operator_replaces_litgpt(tut):
    original = litgpt.model.apply_rope
    thunder_apply_rope = thunder.jit(test_apply_rope, executors=_executors(tut))
    expected = test_apply_rope(tut.Q, tut.m)
    actual = thunder_apply_rope(tut.Q, tut.m)
    assert (expected - actual).abs().max().item() == 0.0
    code = [line.strip() for line in str(thunder.last_traces(thunder_apply_rope)[-1]).splitlines()]
    calls = [line for line in code if "apply_rope(" in line and not line.startswith("#")]
    assert len(calls) == 1 and calls[0].startswith("t") and " = apply_rope(x, " in calls[0]
    assert calls[0].endswith("# " + calls[0].split(" = ")[0] + ': "cpu f32[2, 4, 32, 64]"')
    assert litgpt.model.apply_rope is original  # the replacement is only in place while tracing


def test_unsloth_implementation(tut):
    tut.my_ex.register_implementation(tut.apply_rope, checker=tut.checker, execution_transform=tut.to_unsloth)
    thunder_apply_rope = thunder.jit(test_apply_rope, executors=_executors(tut))
    expected = test_apply_rope(tut.Q, tut.m)
    actual = thunder_apply_rope(tut.Q, tut.m)
    torch.testing.assert_close(actual, expected)
    code = [line.strip() for line in str(thunder.last_traces(thunder_apply_rope)[-1]).splitlines()]
    calls = [line for line in code if "apply_rope" in line and not line.startswith("#")]
    assert len(calls) == 1
    # as in the notebook: (t2, (_, _)) = unsloth_apply_rope_forward(x, t_1_cos, t_1_sin)
    assert re.fullmatch(r"\(t\d+, \(_, _\)\) = unsloth_apply_rope_forward\(x, t\d+, t\d+\)", calls[0]), calls

    # a 3-d input fails the checker: apply_rope runs as itself
    x3 = tut.Q[0]
    actual3 = thunder_apply_rope(x3, tut.m)
    torch.testing.assert_close(actual3, test_apply_rope(x3, tut.m))
    code = [line.strip() for line in str(thunder.last_traces(thunder_apply_rope)[-1]).splitlines()]
    assert [line for line in code if " = apply_rope(x, " in line]
    assert not [line for line in code if "unsloth" in line]


def test_unsloth_in_the_model(tut):
    tut.my_ex.register_implementation(tut.apply_rope, checker=tut.checker, execution_transform=tut.to_unsloth)
    m = tut.m
    for p in m.parameters():
        p.requires_grad_(False)
    thunder_model = thunder.jit(m, executors=_executors(tut))
    inp = torch.randint(1, m.config.vocab_size, (1, 32))
    actual = thunder_model(inp)
    expected = m(inp)
    torch.testing.assert_close(actual, expected)
    lines = [s for s in str(thunder.last_traces(thunder_model)[-1]).split("\n") if "apply_rope" in s]
    calls = [s.strip() for s in lines if not s.strip().startswith("#")]
    # q and k in each of the two layers
    assert len(calls) == 4
    assert all(", (_, _)) = unsloth_apply_rope_forward(" in s and s.endswith(", cos, sin)") for s in calls)


def test_unsloth_backward(tut):
    tut.my_ex.register_implementation(
        tut.apply_rope, checker=tut.checker, execution_transform=tut.to_unsloth, grad_transform=tut.grad
    )
    Q = tut.Q.requires_grad_()
    thunder_apply_rope = thunder.jit(test_apply_rope, executors=_executors(tut))
    expected = test_apply_rope(Q, tut.m)
    go = torch.ones_like(expected)
    (gr_expected,) = torch.autograd.grad(expected, Q, go)
    actual = thunder_apply_rope(Q, tut.m)
    (gr_actual,) = torch.autograd.grad(actual, Q, go)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(gr_actual, gr_expected)

    fwd = str(thunder.last_traces(thunder_apply_rope)[-1])
    assert "= unsloth_apply_rope_forward(x, " in fwd
    bwd = [line.strip() for line in str(thunder.last_backward_traces(thunder_apply_rope)[-1]).splitlines()]
    calls = [line for line in bwd if "unsloth_apply_rope_backward(" in line and not line.startswith("#")]
    # the launch settings computed in the forward are constants of the backward trace
    assert len(calls) == 1 and "= unsloth_apply_rope_backward(32, 4, " in calls[0]
