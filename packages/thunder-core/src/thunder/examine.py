"""``thunder.examine``: how well thunder covers a user's function or model.

It traces and runs the program with ``thunder.jit``, then reports which torch operations mapped
to native torch-language symbols, which fell back to opaque symbols run by PyTorch (they work,
but no executor can fuse or transform them), and whether thunder's result equals eager PyTorch's.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder.core import pytree
from thunder.core.aliasing_record import AliasingRecord

__all__ = ["examine", "ExamineReport"]


@dataclass
class ExamineReport:
    """What :func:`examine` found.

    ``native`` and ``fallback`` count torch operations by name (``torch.add``, ``Tensor.view``);
    ``matches`` is True when thunder's outputs (and in-place updated inputs) equal eager's, False
    when they differ (``mismatch`` says how), None when the program could not run (``error``).
    """

    native: Counter = field(default_factory=Counter)
    fallback: Counter = field(default_factory=Counter)
    matches: bool | None = None
    mismatch: str | None = None
    error: BaseException | None = None
    # PyTorch backward kernels the compiled backward calls (native_batch_norm_backward, convolution_backward...),
    # by name: composite operations differentiated as eager's kernel pairs rather than through their decompositions
    backward_kernels: Counter = field(default_factory=Counter)
    # fusion regions of the compiled forward and backward programs, by executor name (empty without a fusion
    # executor), and what each cached program runs (thunder.fusion_states): "fused", "unfused", "failed", ...
    fusion_regions: Counter = field(default_factory=Counter)
    fusion_states: list[str] = field(default_factory=list)
    # what the compiled program aliases and writes (thunder.last_aliasing): inputs updated in place, in order
    aliasing: AliasingRecord = field(default_factory=AliasingRecord)

    @property
    def fully_supported(self) -> bool:
        return self.error is None and not self.fallback

    def __str__(self) -> str:
        lines = []
        if self.error is not None:
            lines.append(f"thunder could not run the program: {type(self.error).__name__}: {self.error}")
        lines.append(f"{sum(self.native.values())} torch calls ({len(self.native)} operations) have native symbols")
        if self.fallback:
            lines.append(
                f"{sum(self.fallback.values())} calls to {len(self.fallback)} operations have no symbol and ran opaquely "
                "through PyTorch (correct, but not fused or transformed):"
            )
            lines.extend(f"  {name} ({n} call{'s' if n > 1 else ''})" for name, n in sorted(self.fallback.items()))
        else:
            lines.append("every torch operation has a native symbol")
        if self.backward_kernels:
            kernels = ", ".join(f"{name} ({n})" for name, n in sorted(self.backward_kernels.items()))
            lines.append(f"the backward runs PyTorch's backward kernels: {kernels}")
        if self.fusion_regions:
            regions = ", ".join(f"{n} {name}" for name, n in sorted(self.fusion_regions.items()))
            lines.append(f"fusion regions: {regions} (cached programs: {', '.join(self.fusion_states)})")
        if self.aliasing:
            lines.extend(line[2:] for line in self.aliasing.comment_lines())
        if self.matches is True:
            lines.append("thunder's result matches eager PyTorch")
        elif self.matches is False:
            lines.append(f"thunder's result DIFFERS from eager PyTorch: {self.mismatch}")
        return "\n".join(lines)


def _clean_name(name: str) -> str:
    for prefix, repl in (
        ("torch._VariableFunctionsClass.", "torch."),
        ("torch._C._VariableFunctions.", "torch."),
        ("TensorBase.", "Tensor."),
        ("torch._C.TensorBase.", "Tensor."),
        ("torch._C._nn.", "torch.nn.functional."),
        ("torch._C._special.", "torch.special."),
        ("torch._C._linalg.", "torch.linalg."),
    ):
        if name.startswith(prefix):
            return repl + name[len(prefix) :]
    return name


def _clone(x, memo: dict):
    """``x`` with its tensors cloned and its modules deep-copied, through every container thunder walks
    (named tuples, dataclasses, user objects: the same pytree as ``thunder.jit``'s arguments)."""
    pytree.discover_nodes(x)
    return pytree.tree_map(lambda y: _clone_leaf(y, memo), x)


def _clone_leaf(x, memo: dict):
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x, memo)
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def _state(x) -> list:
    """The tensors a call may update in place: tensor arguments and module state."""
    pytree.discover_nodes(x)
    out = []
    for leaf in pytree.tree_leaves(x):
        if isinstance(leaf, torch.nn.Module):
            out += [t.detach() for t in leaf.state_dict().values()]
        elif isinstance(leaf, torch.Tensor):
            out.append(leaf.detach())
    return out


def examine(
    fn: Any, *args, rtol: float | None = None, atol: float | None = None, executors=None, **kwargs
) -> ExamineReport:
    """Runs ``fn(*args, **kwargs)`` eagerly and under ``thunder.jit`` and reports thunder's coverage.

    ``fn`` is a function or an ``nn.Module``; the arguments (and the module) are copied for the
    eager run, so in-place updates happen once on each copy. Random operations see the same RNG
    state in both runs. Prints the report and returns it as an :class:`ExamineReport`.

    ``executors``: the executor list to jit with (default: the default executors). With a fusion executor the
    report counts its regions and says whether the program runs fused; regions that compile in the background
    (``torch_compile``) are compiled before the call (``fusion="wait"``), so the report is the steady state.
    """
    import thunder

    report = ExamineReport()
    eager_fn, eager_args, eager_kwargs = _clone((fn, args, kwargs), {})
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        expected = eager_fn(*eager_args, **eager_kwargs)
    except Exception as e:
        report.error = e
        print(report)
        return report
    torch.set_rng_state(rng)
    if cuda_rng is not None:
        torch.cuda.set_rng_state_all(cuda_rng)

    jfn = thunder.jit(fn) if executors is None else thunder.jit(fn, executors=executors, fusion="wait")
    try:
        actual = jfn(*args, **kwargs)
    except Exception as e:
        report.error = e
    try:
        log = thunder.last_interpreter_log(jfn)
    except RuntimeError:
        log = []
    for record in log:
        if record.get("kind") == "symbol":
            continue
        name = _clean_name(record["fn"])
        (report.fallback if record["symbol"] == "fallback" else report.native)[name] += 1
    if report.error is None:
        report.backward_kernels = _backward_kernels(jfn)
        report.fusion_regions = _fusion_regions(jfn)
        report.fusion_states = thunder.fusion_states(jfn) if report.fusion_regions else []
        report.aliasing = thunder.last_aliasing(jfn)
        tol = {} if rtol is None and atol is None else {"rtol": rtol or 0.0, "atol": atol or 0.0}
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
            torch.testing.assert_close(
                _state((fn, args, kwargs)), _state((eager_fn, eager_args, eager_kwargs)), equal_nan=True, **tol
            )
            report.matches = True
        except (AssertionError, TypeError, ValueError) as e:
            report.matches = False
            report.mismatch = str(e)
    print(report)
    return report


def _backward_kernels(jfn) -> Counter:
    """The backward kernels (``*_backward`` calls) in the last compiled backward trace of ``jfn``, if any."""
    import thunder

    try:
        traces = thunder.last_backward_traces(jfn)
    except RuntimeError:
        return Counter()
    if not traces:
        return Counter()
    names = Counter()
    for bsym in traces[-1].bound_symbols:
        name = bsym.sym.print_name.rsplit(".", 1)[-1]
        if name.endswith("_backward") or "_backward_data" in name:
            names[name] += 1
    return names


def _fusion_regions(jfn) -> Counter:
    """Fusion regions in the last compiled forward and backward traces of ``jfn``, by executor name."""
    import thunder

    traces = []
    for query in (thunder.last_traces, thunder.last_backward_traces):
        try:
            found = query(jfn)
        except RuntimeError:
            continue
        traces.extend(found[-1:])
    regions = Counter()
    for trace in traces:
        for bsym in trace.bound_symbols:
            if "fusion" in bsym.sym.tags and bsym.sym.executor is not None:
                regions[bsym.sym.executor.name] += 1
    return regions
