"""Errors the tracer raises about the user's program, each naming the user's source line."""

from __future__ import annotations

import linecache
import os
import sys

_THUNDER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(__import__("torch").__file__)) + os.sep


class DataDependentControlFlowError(RuntimeError):
    """Python needed the value of a tensor while thunder traced the program."""


class TracingError(RuntimeError):
    """The program could not be traced."""


def user_frame(start_depth: int = 2):
    """The innermost frame outside thunder and torch (the user's code), or None."""
    f = sys._getframe(start_depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_THUNDER_DIR) or fn.startswith(_TORCH_DIR)):
            return f
        f = f.f_back
    return None


_DISPATCH_FILES = (os.path.join(_TORCH_DIR, "overrides.py"), os.path.join(_TORCH_DIR, "utils", "_device.py"))


def innermost_frame(start_depth: int = 2, callee=None):
    """The innermost calling frame outside thunder and torch's dispatch (may be in torch, e.g. ``nn.Linear``).

    ``callee``'s own frame (a Python-level torch function such as ``F.silu`` dispatching to thunder) is skipped.
    """
    callee_code = getattr(callee, "__code__", None)
    f = sys._getframe(start_depth)
    while f is not None and (
        f.f_code.co_filename.startswith(_THUNDER_DIR)
        or f.f_code.co_filename in _DISPATCH_FILES
        or f.f_code is callee_code
    ):
        f = f.f_back
    return f


def describe_location(frame, lineno: int | None = None) -> str:
    if frame is None:
        return "an unknown location"
    filename, lineno = frame.f_code.co_filename, lineno if lineno is not None else frame.f_lineno
    text = linecache.getline(filename, lineno).strip()
    where = f'File "{filename}", line {lineno}, in {frame.f_code.co_name}'
    return f"{where}\n    {text}" if text else where


# the one-line change that runs such a program: Dynamo breaks the graph where Python needs a value
THUNDERFX_HINT = (
    "Or run it through ThunderFX, which splits the program where Python needs a tensor's value and compiles the "
    'rest with thunder: replace `thunder.jit(model)` with `torch.compile(model, backend="thunder")` (see '
    "docs/dynamo.md)."
)


def data_dependent_size_error(e: Exception, tb=None, frame=None) -> TracingError:
    """A decision on a size that depends on tensor values (how many elements a mask selects), which is only known
    when the program runs; ``tb`` (the error's traceback) or ``frame`` locate the user's line."""
    if frame is None and tb is not None:
        while tb is not None:  # the innermost frame outside torch and thunder
            f = tb.tb_frame
            name = f.f_code.co_filename.replace(os.sep, "/")
            if "/torch/" not in name and "/thunder/" not in name and "/sympy/" not in name:
                frame = f
                line = tb.tb_lineno
            tb = tb.tb_next
        location = describe_location(frame, line) if frame is not None else "an unknown location"
    else:
        location = describe_location(frame)
    expr = str(e).split("expression ", 1)[-1].split(" (unhinted")[0].split("\n")[0]
    if not expr.strip():  # (an error raised again without its condition)
        what = "a size"
    else:
        what = f"the value of the size {expr}" if expr.isidentifier() else f"whether {expr} holds"
    return TracingError(
        f"thunder.jit needs {what}, but that size depends on tensor values (the output of nonzero, a boolean mask, "
        "torch.where(cond)) and is only known when the program runs (a Python loop over such a tensor, an `if` on "
        "its size); compute without branching on that size, or move that code out of the jitted function.\n"
        f"  {location}\n{THUNDERFX_HINT}"
    )


def data_dependent_error(what: str, frame, origin: str = "") -> DataDependentControlFlowError:
    """The error for Python code that needs a value read from tensor data, at the user's ``frame``; ``origin``:
    where that value was made, when elsewhere (a line of its own)."""
    return DataDependentControlFlowError(
        f"thunder.jit cannot {what}: the value only exists when the program runs, but thunder traces the "
        f"program once with stand-in tensors and specialises on everything Python sees.\n"
        f"  {describe_location(frame)}\n{origin}"
        "Compute the result with tensor operations instead (for example torch.where instead of an if on a tensor), "
        f"or move this code out of the jitted function.\n{THUNDERFX_HINT}"
    )


def runtime_value_argument_error(e: TypeError) -> DataDependentControlFlowError | None:
    """The data-dependent error for a torch call that PyTorch's argument parser refused because it was given a
    value known only at run time (``torch.arange(t.max().item())``: the parser raises before thunder sees the
    call), naming the user's line from ``e``'s traceback; None for any other TypeError."""
    if "RuntimeValueProxy" not in str(e):
        return None
    frame = line = None
    tb = e.__traceback__
    while tb is not None:  # the innermost frame outside torch and thunder
        name = tb.tb_frame.f_code.co_filename
        if not (name.startswith(_THUNDER_DIR) or name.startswith(_TORCH_DIR)):
            frame, line = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    return DataDependentControlFlowError(
        "thunder.jit cannot pass a value computed from tensor data when the program runs (the result of "
        f"Tensor.item, torch.equal or torch.allclose) to a torch call that needs a Python number ({e}): the value "
        "only exists when the program runs, but thunder traces the program once with stand-in tensors.\n"
        f"  {describe_location(frame, line)}\n"
        "Keep the value in a tensor (t.max() instead of t.max().item()), or move this code out of the jitted "
        f"function.\n{THUNDERFX_HINT}"
    )


def _refuse_runtime_value(proxy, what: str):
    origin = f"{proxy.origin} made that value at:\n  {proxy.where}\n" if proxy.where else ""
    raise data_dependent_error(what, user_frame(3), origin)


def _install_runtime_value_refusal() -> None:
    from thunder.core.proxies import set_runtime_value_refusal

    set_runtime_value_refusal(_refuse_runtime_value)


_install_runtime_value_refusal()
