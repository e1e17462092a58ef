"""Run a ``Program`` eagerly and through ``thunder.jit`` and compare everything a user can observe."""

from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path

import torch

from differential.programs import Program


class DocumentedRefusal(Exception):
    """thunder.jit refused ``program`` (eager ran it) with a clear error that ``docs/sharp_edges.md`` documents as a
    limit: not a silently different answer, so the campaign tallies it apart from the mismatches."""

    def __init__(self, detail: str, program: Program) -> None:
        super().__init__(f"documented refusal: {detail}\n--- repro ---{program!r}")
        self.detail = detail
        self.program = program
        self.cls = f"refusal {detail.splitlines()[0][:90]}"


# thunder's refusals that docs/sharp_edges.md documents, each (a pattern its message starts with) with a phrase of
# the page that documents it (the checker reads the page: a refusal the page does not document stays a mismatch)
_DOCUMENTED_REFUSALS = {
    # the program holds the argument's own elements; eager writes the storage elements past them, of a base the
    # program is not given (campaign 14006)
    re.escape("thunder.jit cannot update in place a tensor restrided (as_strided_) to storage elements past its own"): (
        "restrided to storage elements past its own is refused naming the line"
    ),
    # eager's gradient of the storage elements past the argument's goes into a base the program is not given
    # (campaign 14207)
    r"thunder\.jit cannot run \S*as_strided\S* on an argument that shares its storage with other arguments when one "
    r"of them requires grad": "one reading other storage elements is refused naming the line",
}
_SHARP_EDGES = Path(__file__).resolve().parents[4] / "docs" / "sharp_edges.md"


def _documented_refusal(exc: Exception) -> bool:
    """Whether ``exc`` is one of thunder's refusals that docs/sharp_edges.md documents, naming the user's line."""
    from thunder.tracing.errors import TracingError

    message = str(exc)
    if not isinstance(exc, TracingError) or "<differential program>" not in message:
        return False
    page = _sharp_edges_page()
    return any(re.match(start, message) and phrase in page for start, phrase in _DOCUMENTED_REFUSALS.items())


@functools.cache
def _sharp_edges_page() -> str:
    """docs/sharp_edges.md with its whitespace runs made single spaces (read once per process)."""
    return " ".join(_SHARP_EDGES.read_text().split()) if _SHARP_EDGES.exists() else ""


class Divergence(AssertionError):
    """thunder.jit and eager disagree on ``program``; ``kind`` names what differed."""

    def __init__(self, kind: str, detail: str, program: Program) -> None:
        super().__init__(f"{kind}: {detail}\n--- repro ---{program!r}")
        self.kind = kind
        self.detail = detail
        self.program = program

    @property
    def cls(self) -> str:
        """The mismatch class: the kind, and for errors the exception type and its message's gist."""
        if self.kind.removeprefix("symbolic ") == "runs where eager raises":
            gist = re.sub(r"\b[avt]\d+\b|\d+|'[^']*'|\"[^\"]*\"|\[[^\]]*\]", "_", self.detail.splitlines()[0])
            return f"{self.kind}: {gist.removeprefix('eager raised ')[:80]}"
        if self.kind not in ("error", "backward runs"):
            return self.kind
        line = self.detail.splitlines()[0]
        if self.kind == "backward runs":  # (eager's error: which check thunder missed)
            line = line.removeprefix("eager's backward raised RuntimeError: ").removesuffix("; thunder's ran")
        gist = re.sub(r"\b[avt]\d+\b|\d+|'[^']*'|\"[^\"]*\"|\[[^\]]*\]", "_", line)
        return f"{self.kind}: {gist[:80]}" if self.kind == "backward runs" else f"error {gist[:90]}"


def _leaf(t: torch.Tensor) -> torch.Tensor | None:
    """The leaf requiring grad an input is made from: itself, or the leaf of its non-leaf base."""
    leaf = getattr(t, "fuzz_leaf", t)
    return leaf if leaf.requires_grad and leaf.is_leaf else None


def _leaves(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    leaves = []
    for t in inputs:
        leaf = _leaf(t)
        if leaf is not None and all(leaf is not other for other in leaves):
            leaves.append(leaf)
    return leaves


def _tol(dtype: torch.dtype) -> dict:
    if dtype in (torch.float64, torch.complex128):
        return {"rtol": 1e-7, "atol": 1e-9}
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 1e-2, "atol": 1e-2}
    return {"rtol": 1e-4, "atol": 1e-5}


def _compare(actual, expected, what: str, program: Program, *, check_requires_grad: bool = True) -> None:
    if len(actual) != len(expected):
        raise Divergence("structure", f"{what}: thunder gave {len(actual)} values, eager {len(expected)}", program)
    for i, (a, e) in enumerate(zip(actual, expected)):
        name = f"{what} {i}"
        if not isinstance(a, torch.Tensor):
            raise Divergence("structure", f"{name}: thunder gave {type(a).__name__}, eager a tensor", program)
        if a.dtype != e.dtype:
            raise Divergence("dtype", f"{name}: thunder {a.dtype}, eager {e.dtype}", program)
        if a.shape != e.shape:
            raise Divergence("shape", f"{name}: thunder {tuple(a.shape)}, eager {tuple(e.shape)}", program)
        if (
            check_requires_grad
            and a.requires_grad != e.requires_grad
            # eager lets an integer tensor filled with a 0-dim value that requires grad (a[0] = w.sum(), fill_)
            # require grad, a state its backward rejects with an internal assert: thunder's False is not a defect
            and (e.dtype.is_floating_point or e.dtype.is_complex)
        ):
            raise Divergence(
                "requires_grad", f"{name}: thunder requires_grad={a.requires_grad}, eager {e.requires_grad}", program
            )
        try:
            torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True, **_tol(e.dtype))
        except AssertionError as err:
            if _gelu_at_infinity(program, a.detach(), e.detach()):
                continue
            kind = "input_mutation" if what == "input" else "value"
            detail = f"{name}: {' '.join(str(err).split())[:300]}\nthunder: {a.detach()}\neager:   {e.detach()}"
            raise Divergence(kind, detail, program) from None


CHECKS = ("requires_grad", "input_mutation", "aliasing", "grad", "second_call", "symbolic", "fused")


@functools.cache
def _fusing_executors() -> list:
    """The default executors behind a fusion executor with ``torch_compile``'s region rule (every size) and write-backs,
    whose regions run as the torch executor's calls: the fusion pass (partition, region inputs and outputs, the
    write-backs a region takes over, the channels-last pass a fusion executor turns on) without Inductor's compile
    time, which thousands of programs cannot pay."""
    import thunder
    from thunder.executors import pythonex, torchex
    from thunder.executors.fusion import region_trace
    from thunder.executors.passes import del_last_used
    from thunder.executors.torch_compile import TorchCompileExecutor

    class RegionsAsPython(TorchCompileExecutor):
        compiles_slowly = False

        def unavailable_reason(self) -> str | None:
            return None  # (no C++ compiler needed)

        def fuse_region(self, region):
            return del_last_used(region_trace(region, [torchex.ex, pythonex.ex])).python_callable()

    return [RegionsAsPython("differential_regions_as_python", min_region_numel=0), *thunder.get_default_executors()]


def _shared_storages(outputs, inputs) -> set[tuple[int, int]]:
    """(output index, input index) of each output viewing an input's storage (eager returns views of inputs; a
    write through one reaches the other). Empty storages (no memory to share) are left out."""
    storages = []
    for t in inputs:
        s = t.untyped_storage()
        storages.append(s.data_ptr() if s.nbytes() else None)
    shared = set()
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor) or out.is_nested or out.layout != torch.strided:
            continue
        s = out.untyped_storage()
        if s.nbytes():
            shared.update((i, j) for j, ptr in enumerate(storages) if ptr == s.data_ptr())
    return shared


def _output_relations(outputs, inputs) -> set[tuple]:
    """How the outputs alias each other and the inputs: an output that is an input or an earlier output itself,
    shares an earlier output's storage, or is a view (``_is_view()``); eager's outputs may be views of each other
    (``v0, v0.flatten()``), the very argument (``return x.add_(1)``) or one tensor twice."""
    tensors = [
        o if isinstance(o, torch.Tensor) and not o.is_nested and o.layout == torch.strided else None for o in outputs
    ]
    relations = set()
    for i, a in enumerate(tensors):
        if a is None:
            continue
        relations.add(("is a view", i, a._is_view()))
        relations.update(("is input", i, j) for j, t in enumerate(inputs) if a is t)
        for j, b in enumerate(tensors[:i]):
            if b is None:
                continue
            if a is b:
                relations.add(("is output", i, j))
            elif a.untyped_storage().nbytes() and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
                relations.add(("shares the storage of output", i, j))
    return relations


def _compare_aliasing(actual, expected, t_inputs, e_inputs, program: Program, output_aliasing: bool) -> None:
    t_shared, e_shared = _shared_storages(actual, t_inputs), _shared_storages(expected, e_inputs)
    if t_shared != e_shared:
        detail = "; ".join(
            f"output {i} {'views' if (i, j) in e_shared else 'does not view'} input {j}'s storage in eager, "
            f"{'not ' if (i, j) in e_shared else ''}in thunder"
            for i, j in sorted(t_shared ^ e_shared)
        )
        raise Divergence("aliasing", detail, program)
    if not output_aliasing:
        return
    t_rel, e_rel = _output_relations(actual, t_inputs), _output_relations(expected, e_inputs)
    if t_rel != e_rel:
        detail = "; ".join(
            f"output {i} {what} {j}: {'eager only' if (what, i, j) in e_rel else 'thunder only'}"
            for what, i, j in sorted(t_rel ^ e_rel, key=str)
        )
        raise Divergence("aliasing", detail, program)


def check_program(
    program: Program,
    *,
    skip: frozenset[str] | set[str] = frozenset(),
    cache: str | None = None,
    output_aliasing: bool = False,
) -> bool:
    """Raise ``Divergence`` where ``thunder.jit`` differs from eager on ``program``. Returns False when
    eager itself cannot run the program (the caller should discard it), True otherwise.

    Outputs' values, dtypes and shapes, and thunder errors, are always checked; ``skip`` may name
    checks among ``CHECKS`` to leave out. ``symbolic`` checks the program once more with every size symbolic
    (``cache="symbolic values"``), everything else as above. ``output_aliasing`` also compares how the outputs
    alias each other and the inputs (identity, ``_is_view()``, shared storages: ``_output_relations``); the
    campaigns check it, the CI slice not yet (its seeds still draw a known gap: an expanded argument updated in
    place, then reshaped, is a view in thunder and a copy in eager)."""
    if not _check_program(program, skip, cache, output_aliasing):
        return False
    if "symbolic" not in skip and cache is None:
        try:
            _check_program(program, set(skip) | {"second_call"}, "symbolic values", output_aliasing)
        except Divergence as d:
            raise Divergence(f"symbolic {d.kind}", d.detail, program) from None
    if "fused" not in skip and "executors" not in program.jit_options:
        try:
            _check_program(program, set(skip) | {"second_call"}, cache, output_aliasing, _fusing_executors())
        except Divergence as d:
            raise Divergence(f"fused {d.kind}", d.detail, program) from None
    return True


def _check_program(
    program: Program, skip, cache: str | None, output_aliasing: bool = False, executors: list | None = None
) -> bool:
    import thunder

    fn = program.make_function()
    e_inputs = program.make_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = fn(*program.bind(fn, e_inputs))
        except Exception as refusal:
            if not program.raises:
                return False
            return _raises_as_eager(program, fn, refusal, cache)
        t_inputs = program.make_inputs()
        options = dict(program.jit_options)
        if cache is not None:
            options["cache"] = cache
        if executors is not None:
            options["executors"] = executors
        jfn = thunder.jit(fn, **options)
        try:
            actual = jfn(*program.bind(fn, t_inputs))
        except Exception as exc:
            if _documented_refusal(exc):
                raise DocumentedRefusal(f"{type(exc).__name__}: {exc}", program) from exc
            raise Divergence("error", f"{type(exc).__name__}: {exc}", program) from exc

        _compare(list(actual), list(expected), "output", program, check_requires_grad="requires_grad" not in skip)
        if "input_mutation" not in skip:
            _compare(t_inputs, e_inputs, "input", program, check_requires_grad=False)
        if "aliasing" not in skip:
            _compare_aliasing(list(actual), list(expected), t_inputs, e_inputs, program, output_aliasing)
        if "second_call" not in skip:
            # the cached program on fresh, equal inputs gives the same answer
            again_inputs = program.make_inputs()
            try:
                again = jfn(*program.bind(fn, again_inputs))
            except Exception as exc:
                raise Divergence("second_call", f"{type(exc).__name__}: {exc}", program) from exc
            try:
                _compare(list(again), list(expected), "output", program, check_requires_grad=False)
                _compare(again_inputs, e_inputs, "input", program, check_requires_grad=False)
            except Divergence as d:
                raise Divergence("second_call", d.detail, program) from None
    if "grad" in skip:
        return True

    # the outputs, and the inputs that are not leaves (views of a non-leaf base), read after the call
    e_outs, t_outs = list(expected), list(actual)
    for e, a in zip(e_inputs, t_inputs):
        if hasattr(e, "fuzz_leaf") and e.requires_grad:
            e_outs.append(e)
            t_outs.append(a)
    diff = [i for i, e in enumerate(e_outs) if e.requires_grad and t_outs[i].requires_grad]
    e_leaves = _leaves(e_inputs)
    if not diff or not e_leaves:
        return True
    gen = torch.Generator().manual_seed(1234)
    cotangents = [torch.randn(e_outs[i].shape, generator=gen, dtype=e_outs[i].dtype) for i in diff]
    t_leaves = _leaves(t_inputs)
    try:
        e_grads = torch.autograd.grad([e_outs[i] for i in diff], e_leaves, cotangents, allow_unused=True)
    except RuntimeError as refusal:
        if "INTERNAL ASSERT FAILED" in str(refusal):
            # (a failed assertion inside PyTorch's engine, which asks to be reported as a PyTorch bug: a bool
            # gradient reaching a node, 14119. No gradient to compare, and no refusal thunder should copy)
            return True
        # eager's backward refuses (a value it saved was overwritten in place, no derivative): thunder's must too
        try:
            torch.autograd.grad([t_outs[i] for i in diff], t_leaves, cotangents, allow_unused=True)
        except Exception:
            return True
        gist = str(refusal).split("\n")[0][:200]
        raise Divergence(
            "backward runs", f"eager's backward raised RuntimeError: {gist}; thunder's ran", program
        ) from None
    try:
        t_grads = torch.autograd.grad([t_outs[i] for i in diff], t_leaves, cotangents, allow_unused=True)
    except Exception as exc:
        raise Divergence("error", f"backward: {type(exc).__name__}: {exc}", program) from exc
    reference = None
    for k, (a, e) in enumerate(zip(t_grads, e_grads)):
        name = f"grad of the leaf of a{[i for i, t in enumerate(e_inputs) if _leaf(t) is not None][k]}"
        if (a is None) != (e is None):
            # (a user sees it: .grad stays None, and an optimizer skips the parameter, weight decay included)
            detail = f"{name}: thunder's is {'None' if a is None else 'a tensor'}, eager's {'None' if e is None else e}"
            raise Divergence("grad presence", detail, program)
        a = torch.zeros_like(t_leaves[k]) if a is None else a
        e = torch.zeros_like(e_leaves[k]) if e is None else e
        # a float64 gradient may flow through float32 values (mixed_dtype): float32 tolerances then
        # (and so may inputs of "wide_inputs", whichever the features)
        low = "low_precision" in program.features or _has_input_of(program, torch.float16, torch.bfloat16)
        mixed = "mixed_dtype" in program.features or _has_input_of(program, torch.float32, torch.complex64)
        tol = _tol(torch.float16 if low else torch.float32 if mixed else e.dtype)
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **tol)
        except AssertionError as err:
            if _within_summation_order(a, e) or _hardtanh_at_nan(program, a, e, e_leaves[k], tol):
                continue
            if low:
                if reference is None:
                    reference = _float64_gradients(program, fn, diff, cotangents)
                if reference is not None and _as_accurate(a, e, reference[k], tol):
                    continue
            detail = f"{name}: {' '.join(str(err).split())[:300]}\nthunder: {a}\neager:   {e}"
            raise Divergence("grad", detail, program) from None
    return True


def _has_input_of(program: Program, *dtypes: torch.dtype) -> bool:
    return any(spec.dtype in dtypes for spec in program.inputs)


def _raises_as_eager(program: Program, fn, refusal: Exception, cache: str | None) -> bool:
    """Raises ``Divergence`` unless ``thunder.jit`` raises on ``program``, whose last line eager rejects with
    ``refusal``: a program eager rejects must not return an answer in thunder (its error may differ in words)."""
    import thunder

    options = dict(program.jit_options)
    if cache is not None:
        options["cache"] = cache
    try:
        thunder.jit(fn, **options)(*program.bind(fn, program.make_inputs()))
    except Exception:
        return True
    gist = " ".join(str(refusal).split())[:200]
    raise Divergence("runs where eager raises", f"eager raised {type(refusal).__name__}: {gist}; thunder ran", program)


def _gelu_at_infinity(program: Program, a: torch.Tensor, e: torch.Tensor) -> bool:
    """Whether the values ``a`` and ``e`` differ only where one is NaN and the other infinite, in a program calling
    gelu. Eager's ``gelu`` answers an infinite input by its kernel's loop: the vectorised one gives NaN, the scalar one
    (a short tensor, a tensor's tail, a non-contiguous input) gives infinity (campaign 14014:
    ``F.gelu(torch.full((40,), inf))[0]`` is NaN, ``F.gelu(torch.full((1,), inf))[0]`` is inf). Thunder runs eager's
    kernel on a tensor whose elements may fall in the other loop. Either is eager's; elsewhere the values must agree."""
    if "gelu" not in program.function_source():
        return False
    if a.shape != e.shape or not a.is_floating_point() or a.dtype != e.dtype:
        return False
    differ = ~torch.isclose(a, e, equal_nan=True, **_tol(e.dtype))
    nan_for_infinity = (torch.isnan(a) & torch.isinf(e)) | (torch.isinf(a) & torch.isnan(e))
    return bool(nan_for_infinity[differ].all())


def _hardtanh_at_nan(program: Program, a: torch.Tensor, e: torch.Tensor, leaf: torch.Tensor, tol: dict) -> bool:
    """Whether the gradients ``a`` and ``e`` differ only where the leaf is NaN, in a program calling hardtanh or relu6.
    Eager's ``hardtanh_backward`` answers a NaN input by its kernel's loop: the vectorised one gives 0, the scalar one
    (a tensor's tail, a non-contiguous input) passes the cotangent, so two NaNs of one tensor may get either (campaign
    14016: ``hardtanh_backward(ones(2, 5), x.expand(2, -1), -1, 1)`` gives 0 at the NaN of the first row, 1 at the
    second's). Thunder's kernel reads the contiguous output: 0. Either is eager's; elsewhere the gradients must
    agree."""
    source = program.function_source()
    if "hardtanh" not in source and "relu6" not in source:
        return False
    leaf = leaf.detach()
    if leaf.shape != e.shape or not leaf.is_floating_point():
        return False
    differ = ~torch.isclose(a, e, equal_nan=True, **tol)
    return bool(torch.isnan(leaf)[differ].all())


def _within_summation_order(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Whether the gradients ``a`` and ``e`` differ by no more than summing their contributions in another order can
    make them differ: a few rounding errors of the largest magnitude among them. (Campaign seed 14008, widened: the
    contributions 1e37 - 1e37 + 0.52 gave eager 0 where thunder, summing the two large ones first, gave 0.52.)"""
    if a.shape != e.shape or not a.is_floating_point() or a.dtype != e.dtype or a.numel() == 0:
        return False
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
        return False
    largest = max(a.abs().max().item(), e.abs().max().item())
    gap = (a - e).abs().max().item()
    # (and far below the largest: a disagreement of the gradients' own scale is no rounding)
    return gap <= 64 * torch.finfo(a.dtype).eps * largest and gap * 1e6 < largest


def _float64_gradients(program: Program, fn, diff: list[int], cotangents: list[torch.Tensor]):
    """The leaves' gradients of ``program`` run eagerly with its float16/bfloat16 inputs in float64 (and the same
    cotangents, in float64): the reference low-precision gradients are judged against. None where that run
    differs in structure (it cannot be a reference then)."""
    inputs = program.make_float64_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            outs = list(fn(*program.bind(fn, inputs)))
        except Exception:
            return None
    for t in inputs:
        if hasattr(t, "fuzz_leaf") and t.requires_grad:
            outs.append(t)
    leaves = _leaves(inputs)
    if any(not outs[i].requires_grad for i in diff if i < len(outs)) or max(diff) >= len(outs):
        return None
    wide = [c.to(torch.float64) if c.dtype in (torch.float16, torch.bfloat16) else c for c in cotangents]
    try:
        grads = torch.autograd.grad(
            [outs[i] for i in diff], leaves, [w.to(outs[i].dtype) for w, i in zip(wide, diff)], allow_unused=True
        )
    except RuntimeError:
        return None
    return [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]


def _as_accurate(actual: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor, tol: dict) -> bool:
    """Whether thunder's low-precision ``actual`` is, element by element, within the type's tolerance of the float64
    ``reference`` or at most twice as far from it as eager's ``expected`` is: both round, in their own order
    (thunder may compute a fusion in float32 and round once; eager rounds after every op), and the one closer
    to the exact answer is not the wrong one (the idea of the ``fp64_ref`` check of PyTorch's Inductor)."""
    if reference.shape != actual.shape:
        return False
    r = reference.to(torch.float64)
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    allowed = torch.maximum(2 * (e - r).abs(), tol["atol"] + tol["rtol"] * r.abs())
    # A gradient element is a sum of contributions (the uses of a value, a reduction's backward) each rounded to the
    # low type; how far the sum lands from the exact one scales with the contributions, not with the sum, which
    # cancellation may make small, and the order of the additions decides where it lands (campaign 14010: five
    # bfloat16 contributions of size 1..3 summing to 0.41: the 120 orders land from 0.39 to 0.43; thunder's order
    # was 0.015 off, eager's own 0.007 there and 0.033 at another element). So eager's largest rounding error on
    # this gradient bounds thunder's at every element (twice over, as above) — where that error is itself a
    # rounding's: below 16 of the type's steps at the gradient's largest magnitude. A wrong formula or a lost
    # contribution is off by the contributions' own size and stays a mismatch.
    finite = torch.isfinite(e) & torch.isfinite(r)
    if finite.any():
        eager_worst = (e - r).abs()[finite].max()
        if eager_worst <= 16 * torch.finfo(expected.dtype).eps * r.abs()[finite].max():
            allowed = torch.maximum(allowed, 2 * eager_worst)
    close = ((a - r).abs() <= allowed) | (a.isnan() & e.isnan()) | (a == e)
    return bool(close.all())
