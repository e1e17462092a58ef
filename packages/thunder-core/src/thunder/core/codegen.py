"""The one printer from traces to Python source, and the one compiler from a trace to a callable."""

from __future__ import annotations

import linecache
import math
import os
from itertools import count

import torch

from thunder.core import devices, dtypes
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.symbolic import SizeProxy, print_size
from thunder.core.trace import TraceCtx

__all__ = ["bsym_lines", "trace_to_python", "compile_trace", "note_user_line"]

_INDENT = "  "


class _Printer:
    """Prints values; objects with no literal form become named constants of the trace.

    ``renamed`` maps the names of variables that would shadow a global the program reads (a parameter named
    ``pad`` in a program calling the operator ``pad``) to the names they print under."""

    def __init__(self, trace: TraceCtx | None, renamed: dict[str, str] | None = None):
        self.trace = trace
        self.torch_mode = False  # print thunder dtypes and devices as their torch counterparts
        self.renamed = renamed

    def name(self, p: Proxy) -> str:
        """The name ``p`` prints under (its own unless it would shadow a global of the program)."""
        if self.renamed:
            return self.renamed.get(p.name, p.name)
        return p.name

    def value(self, x) -> str:
        if isinstance(x, Proxy):
            return self.name(x)
        t = type(x)
        if t is torch.SymInt or t is torch.SymFloat:
            return print_size(x)
        if x is None or t is bool or t is int or t is str:
            return repr(x)
        if t is float:
            if math.isfinite(x):
                return repr(x)
            return f"float('{x}')"
        if t is tuple:
            if len(x) == 1:
                return f"({self.value(x[0])},)"
            return "(" + ", ".join(self.value(y) for y in x) + ")"
        if t is list:
            return "[" + ", ".join(self.value(y) for y in x) + "]"
        if t is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in x.items()) + "}"
        if isinstance(x, torch.dtype):
            return str(x)
        if isinstance(x, dtypes.dtype):
            return str(x.torch_dtype) if self.torch_mode else repr(x)
        if isinstance(x, torch.device):
            return f'torch.device("{x}")'
        if isinstance(x, devices.Device):
            return f'torch.device("{x}")' if self.torch_mode else repr(x)
        if isinstance(x, slice):
            return f"slice({self.value(x.start)}, {self.value(x.stop)}, {self.value(x.step)})"
        if x is Ellipsis:
            return "..."
        if isinstance(x, torch.memory_format):
            return str(x)
        if isinstance(x, tuple):
            # torch.Size, a named tuple or a structseq: torch's operators take any sequence (the traced call
            # saw the caller's object; its type is not kept by the printed program)
            return self.value(tuple(x))
        if isinstance(x, complex):
            return repr(x)
        if isinstance(x, (int, float)):  # subclasses such as numpy scalars or IntEnum
            return self.value(int(x) if isinstance(x, int) else float(x))
        if self.trace is None:
            return f"<{type(x).__name__}>"
        return self.trace.add_constant(x)

    def outputs(self, x) -> str:
        """The left-hand side for an output structure; non-proxy leaves print as ``_``."""
        if isinstance(x, Proxy):
            return self.name(x)
        if isinstance(x, (tuple, list)):
            inner = ", ".join(self.outputs(y) for y in x)
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        return "_"


def _type_comment(out, printer: _Printer) -> str:
    if isinstance(out, (TensorProxy, NumberProxy, SizeProxy)):
        return f'  # {printer.name(out)}: "{out.type_string()}"'
    return ""


def _call_string(bsym: BoundSymbol, printer: _Printer) -> str:
    printer.torch_mode = "torch_args" in bsym.sym.tags
    try:
        args = [printer.value(a) for a in bsym.args]
        args.extend(f"{k}={printer.value(v)}" for k, v in bsym.kwargs.items())
    finally:
        printer.torch_mode = False
    return f"{bsym.sym.print_name}({', '.join(args)})"


def _has_output(out) -> bool:
    if out is None:
        return False
    if isinstance(out, (tuple, list)) and not out:
        return False
    return True


def bsym_lines(bsym: BoundSymbol, indent: int = 1, printer: _Printer | None = None, comment: bool = False):
    """The lines printing ``bsym``; with ``comment`` they are comments (a decomposition)."""
    printer = printer or _Printer(None)
    pad = _INDENT * indent
    if bsym.sym.python_printer is not None and not comment:
        return [pad + line for line in bsym.sym.python_printer(bsym, printer)]
    call = _call_string(bsym, printer)
    out = bsym.output
    if _has_output(out):
        line = f"{printer.outputs(out)} = {call}{_type_comment(out, printer)}"
    else:
        line = call
    return [f"{pad}# {line}" if comment else pad + line]


def _source_comment(source) -> str | None:
    filename, lineno = source
    text = linecache.getline(filename, lineno).strip()
    parts = filename.replace(os.sep, "/").split("/")
    short = "/".join(parts[-2:])
    return f"# {short}:{lineno}: {text}" if text else f"# {short}:{lineno}"


def _emit_bsym(bsym: BoundSymbol, lines: list, indent: int, printer: _Printer, include_decomposition: bool):
    if bsym.header:  # (why a pass put this call here)
        lines.append(f"{_INDENT * indent}# {bsym.header}")
    lines.extend(bsym_lines(bsym, indent, printer))
    if include_decomposition and (bsym.sym.python_printer is None or "fusion" in bsym.sym.tags):
        _emit_subsymbols(bsym, lines, indent + 1, printer)


def _emit_subsymbols(bsym: BoundSymbol, lines: list, indent: int, printer: _Printer):
    for sub in bsym.subsymbols:
        lines.extend(bsym_lines(sub, indent, printer, comment=True))
        _emit_subsymbols(sub, lines, indent + 1, printer)


def _imports(trace: TraceCtx) -> list[str]:
    seen = dict.fromkeys(["import torch"])
    for line in trace.extra_imports:
        seen[line] = None
    for bsym in trace.bound_symbols:
        for line in bsym.sym.imports:
            seen[line] = None
    return list(seen)


def _signature(trace: TraceCtx, printer: _Printer) -> str:
    params = []
    for a in trace.args:
        params.append(a if isinstance(a, str) else printer.name(a))
    if trace.kwargs:
        if "*" not in " ".join(params) and not any(p.startswith("*") for p in params):
            params.append("*")
        for k, v in trace.kwargs.items():
            params.append(k if v is None else f"{k}={printer.value(v)}")
    return ", ".join(params)


# the names every compiled program's namespace holds (``_namespace``) and the builtins printed values call
_NAMESPACE_NAMES = frozenset(("torch", "Tensor", "dtypes", "devices", "math", "float", "slice"))


def _imported_name(line: str) -> list[str]:
    """The names an import line binds (``import torch.nn.functional`` binds ``torch``)."""
    words = line.replace(",", " ").split()
    if not words:
        return []
    if words[0] == "import":
        return [words[-1] if "as" in words else words[1].split(".")[0]]
    names = []
    rest = words[words.index("import") + 1 :] if "import" in words else []
    for i, w in enumerate(rest):
        if w == "as" or (i > 0 and rest[i - 1] == "as"):
            continue
        names.append(rest[i + 2] if i + 2 < len(rest) and rest[i + 1] == "as" else w)
    return names


def _globals_read(trace: TraceCtx, imports: list[str]) -> set[str]:
    """The global names the program's code reads: its imports, its calls' names (an executor's operator prints
    as ``pad(...)``: the name ``pad``), their namespaces, its constants."""
    names = set(_NAMESPACE_NAMES)
    for line in imports:
        names.update(_imported_name(line))
    for bsym in trace.bound_symbols:
        sym = bsym.sym
        if sym.python_printer is None:
            names.add(sym.print_name.split(".", 1)[0])
        if sym.call_ctx:
            names.update(sym.call_ctx)
    names.update(trace.constants)
    return names


def _renamed_variables(trace: TraceCtx, imports: list[str]) -> dict[str, str] | None:
    """Variables of ``trace`` named like a global its code reads, each with the name it prints under instead
    (``pad`` -> ``pad_``: the user's parameter ``pad`` beside the operator ``pad``); None when there are none.

    The set of globals is open-ended (every registered operator), so it is checked where the program text is
    made, against the calls this trace prints; the variable, not the global, is renamed."""
    read = _globals_read(trace, imports)
    clashing = {a.name for a in trace.args if isinstance(a, Proxy) and a.name in read}
    clashing.update(v.name for v in trace.kwargs.values() if isinstance(v, Proxy) and v.name in read)
    for bsym in trace.bound_symbols:
        for p in bsym.flat_outs:
            if p.name in read:
                clashing.add(p.name)
    if not clashing:
        return None
    taken = read | set(trace.names)
    for bsym in trace.bound_symbols:
        taken.update(p.name for p in bsym.flat_args)
        taken.update(p.name for p in bsym.flat_outs)
    renamed = {}
    for name in sorted(clashing):
        new = name + "_"
        while new in taken:
            new += "_"
        taken.add(new)
        renamed[name] = new
    return renamed


def trace_to_python(trace: TraceCtx, *, include_decomposition: bool = True, line_sources: list | None = None) -> str:
    """The program's source. Given ``line_sources``, fills it with each line's user source (``(filename,
    lineno)`` of the call that line runs, or None), by line number less one."""
    imports = _imports(trace)
    printer = _Printer(trace, _renamed_variables(trace, imports))
    body: list[str] = []
    for a in list(trace.args) + [v for v in trace.kwargs.values() if isinstance(v, Proxy)]:
        if isinstance(a, (TensorProxy, SizeProxy)):
            body.append(f'{_INDENT}# {printer.name(a)}: "{a.type_string()}"')
    last_source = None
    body_sources: dict[int, tuple] = {}
    for bsym in trace.bound_symbols:
        src = bsym.source
        if src is not None and src != last_source:
            comment = _source_comment(src)
            if comment:
                body.append(_INDENT + comment)
        last_source = src if src is not None else last_source
        first = len(body)
        _emit_bsym(bsym, body, 1, printer, include_decomposition)
        if line_sources is not None and src is not None:
            body_sources.update(dict.fromkeys(range(first, len(body)), src))
    if not trace.bound_symbols:
        body.append(_INDENT + "pass")
    header = []
    if trace.provenance is not None:
        header.append(repr(trace.provenance))
    record = trace.tags.get("aliasing")  # (thunder.core.aliasing_record: what the program aliases and writes)
    if record:
        header.extend(record.comment_lines())
    header.extend(imports)
    header.append("")
    header.extend(trace.decorators)
    header.append(f"def {trace.fn_name}({_signature(trace, printer)}):")
    if line_sources is not None:
        line_sources.extend([None] * len(header) + [body_sources.get(i) for i in range(len(body))])
    return "\n".join(header + body) + "\n"


_compiled_counter = count()


def _namespace(trace: TraceCtx) -> dict:
    import thunder.core.devices as devices_mod
    import thunder.core.dtypes as dtypes_mod

    # (math: symbolic sizes print as expressions that may use math.floor, math.ceil)
    ns = {"torch": torch, "Tensor": torch.Tensor, "dtypes": dtypes_mod, "devices": devices_mod, "math": math}
    for bsym in trace.bound_symbols:
        ctx = bsym.sym.call_ctx
        if ctx:
            ns.update(ctx)
    ns.update(trace.constants)
    return ns


# each compiled program's user source by line (``trace_to_python``'s ``line_sources``), by the program's file name
_program_sources: dict[str, tuple] = {}


def compile_trace(trace: TraceCtx):
    """Compiles ``trace`` to a Python function (its source is registered so tracebacks show it, and the user's line
    of each of its calls, for ``note_user_line``)."""
    sources: list = []
    src = trace_to_python(trace, include_decomposition=False, line_sources=sources)
    ns = _namespace(trace)
    filename = f"thunder.{trace.fn_name}_{next(_compiled_counter)}"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    if any(sources):
        _program_sources[filename] = tuple(sources)
    exec(compile(src, filename, "exec"), ns)
    fn = ns[trace.fn_name]
    fn.__thunder_trace__ = trace
    return fn


def note_user_line(error: BaseException, running: str = "the call of") -> None:
    """Adds to ``error``, raised while a compiled program ran (a kernel refusing its arguments: an index out of
    bounds, a step of zero), a note naming the user's line of the call that raised it, as eager's traceback would
    show it. Nothing when no compiled program's call raised it, the message names that line already, or Python has
    no exception notes (3.10)."""
    if not hasattr(error, "add_note") or getattr(error, "_thunder_user_line_noted", False):
        return
    where = None
    tb = error.__traceback__
    while tb is not None:  # (the innermost program frame: a program a region or another program called)
        sources = _program_sources.get(tb.tb_frame.f_code.co_filename)
        if sources is not None and 0 < tb.tb_lineno <= len(sources) and sources[tb.tb_lineno - 1] is not None:
            where = sources[tb.tb_lineno - 1]
        tb = tb.tb_next
    if where is None:
        return
    filename, lineno = where
    message = str(error)
    if filename in message and f"line {lineno}" in message:
        return
    text = linecache.getline(filename, lineno).strip()
    location = f'File "{filename}", line {lineno}' + (f"\n    {text}" if text else "")
    error.add_note(f"(raised by the program thunder compiled, running {running}\n  {location})")
    error._thunder_user_line_noted = True
