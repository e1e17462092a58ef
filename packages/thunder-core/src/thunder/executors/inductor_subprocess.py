"""Compiling fused regions in a low-priority subprocess, so that the background tier leaves the user's thread alone.

Inductor's compile of a region is about a second of pure Python (lowering, C++ code generation) plus a C++
build. Done on thunder's background thread (``tiers``), that Python holds the GIL while the user's steps run:
each PyTorch kernel of the user's thread waits for the GIL on its return, and a 2-core machine's OpenMP threads
share their cores with the compiler. The LitGPT training step ran at half speed until its fusion was in place.

So before the background worker compiles a job's regions, it sends each region's function (its generated
source and its globals by reference: :class:`PortableFunction`) and its inputs' sizes, strides and dtypes to one
subprocess, started with the lowest CPU priority (``nice`` 19), which compiles it exactly as the worker would
(the same aten graph, Inductor configuration and thread count); that fills Inductor's FX graph cache on disk.
Only then does the worker compile the regions itself, each now a cache hit: ~10-20 ms of Python instead of
~1 s, and this process imports Inductor (seconds of the GIL on a small machine) only once the subprocess is
done. The subprocess is only an accelerator: whatever fails there (it cannot start, a region does not pickle,
its compile raises, it dies), the worker compiles in process as before, and after a crash the subprocess is not
used again.

The subprocess starts when a background job is queued (its imports, seconds, then overlap the first call) and
ends a few seconds (``torch_compile.SUBPROCESS_LINGER_S``) after the worker's queue is empty (a fused program's first calls queue compiles for the input
layouts its regions meet), and at exit. It imports PyTorch and thunder (this file runs as a script in it).

It only uses the CPU time the user's program leaves (see ``_set_priority``): a program that keeps every core
busy (PyTorch's intra-op threads spin while they wait) runs at nearly its unfused speed while its fusion compiles,
and the fused program arrives when the program pauses, or at once when it calls ``thunder.wait_for_fusion``
(which lets the subprocess run at normal priority while it waits, where the system allows it).
On the 4-layer LitGPT training step (2 cores, 2 threads, a fresh Inductor cache), 100 steps took 11.9 s against
9.8 s for plain ``thunder.jit``; compiling in process, 24.5 s against eager's 9.2 s.

Set ``THUNDER_INDUCTOR_SUBPROCESS=0`` to compile in process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import struct
import subprocess
import sys
import threading

__all__ = ["PortableFunction", "warm_cache", "start", "close", "close_after", "prioritized", "compiles_warmed"]

_HEADER = struct.Struct("<Q")


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_exactly(stream, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(stream):
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    data = _read_exactly(stream, _HEADER.unpack(header)[0])
    return None if data is None else pickle.loads(data)


class PortableFunction:
    """A function generated from source (a fused region's), as another process rebuilds it: its source, the
    file name it was compiled under, its name, and its globals by reference (``("module", name)``,
    ``("attr", module, qualname)``) or by value (``("value", object)``, pickled)."""

    def __init__(self, source: str, filename: str, name: str, globals_spec: dict):
        self.source, self.filename, self.name, self.globals_spec = source, filename, name, globals_spec

    @classmethod
    def of(cls, fn, source: str) -> PortableFunction | None:
        """``fn``, compiled from ``source``, made portable; None if one of its globals cannot be."""
        import types

        spec = {}
        for key, value in fn.__globals__.items():
            if key.startswith("__") or key == fn.__name__:
                continue
            if isinstance(value, types.ModuleType):
                spec[key] = ("module", value.__name__)
                continue
            module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
            if module in sys.modules and isinstance(qualname, str) and _resolve(module, qualname) is value:
                spec[key] = ("attr", module, qualname)
                continue
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - not portable: the region compiles in process
                return None
            spec[key] = ("value", value)
        return cls(source, fn.__code__.co_filename, fn.__name__, spec)

    def rebuild(self):
        import importlib

        namespace = {}
        for key, (kind, *rest) in self.globals_spec.items():
            if kind == "module":
                namespace[key] = importlib.import_module(rest[0])
            elif kind == "attr":
                importlib.import_module(rest[0])
                namespace[key] = _resolve(*rest)
            else:
                namespace[key] = rest[0]
        exec(compile(self.source, self.filename, "exec"), namespace)  # noqa: S102 - thunder's own generated code
        return namespace[self.name]


def _resolve(module: str, qualname: str):
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _set_priority(pid: int, lowest: bool) -> None:
    """The compiler takes only the cores the user's threads leave (``lowest``): the idle scheduling class where
    Linux has it (it runs only when nothing else would), and the lowest ``nice`` (which alone still took slices
    from the user's OpenMP threads, and a parallel kernel waits for its slowest thread). Or back to normal, where
    the system lets it (while the user waits for the compiles). Set from this process, after the start: in the
    child before its ``exec``, the idle class kept ``Popen`` waiting for seconds on a busy machine."""
    try:
        if hasattr(os, "SCHED_IDLE"):
            policy = os.SCHED_IDLE if lowest else os.SCHED_OTHER
            os.sched_setscheduler(pid, policy, os.sched_param(0))
        if hasattr(os, "setpriority"):
            os.setpriority(os.PRIO_PROCESS, pid, 19 if lowest else 0)
    except OSError:  # (not allowed: raising a process's priority may need privileges)
        pass


class _Server:
    """The client side: one subprocess, used by one thread at a time."""

    def __init__(self, command: list[str] | None = None, lowest_priority: bool = True):
        self.command = command or [sys.executable, "-u", os.path.abspath(__file__)]
        self.lowest_priority = lowest_priority
        self._closer: threading.Timer | None = None  # (close_after's timer)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.broken = os.environ.get("THUNDER_INDUCTOR_SUBPROCESS", "1") == "0"
        self.warmed = 0

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
            )
            if self.lowest_priority:
                _set_priority(self._proc.pid, lowest=True)
        return self._proc

    def prioritize(self, waiting: bool) -> None:
        """While the user waits for the compiles (``waiting``), the subprocess runs at normal priority if the system
        lets it; after, at the lowest again."""
        proc = self._proc
        if proc is not None and self.lowest_priority and proc.poll() is None:
            _set_priority(proc.pid, lowest=not waiting)

    def warm_cache(self, region: PortableFunction, inputs_meta: list) -> bool:
        import torch

        self._cancel_close()
        with self._lock:
            if self.broken:
                return False
            # (Inductor's configuration only when this process has loaded it, perhaps changed: importing it costs
            # seconds of the GIL, which is what the subprocess is there to spare)
            config_module = sys.modules.get("torch._inductor.config")
            config = config_module.save_config() if config_module is not None else None
            request = ("compile", region, inputs_meta, config, torch.get_num_threads())
            try:
                payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - a region that does not pickle compiles in process
                return False
            try:
                proc = self._start()
                proc.stdin.write(_HEADER.pack(len(payload)))
                proc.stdin.write(payload)
                proc.stdin.flush()
                reply = _recv(proc.stdout)  # (blocks without the GIL)
            except Exception:  # noqa: BLE001 - a dead or unstartable subprocess: compile in process from now on
                reply = None
            if reply is None:
                self.broken = True
                self._stop()
                return False
            if reply[0] == "ok":
                self.warmed += 1
                return True
            return False

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except Exception:  # noqa: BLE001, S110 - a pipe already broken
            pass
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        self._cancel_close()
        with self._lock:
            self._stop()

    def start(self) -> None:
        """Starts the subprocess now if it is not running (its imports take seconds: at the idle priority, they
        cost the caller nothing), and keeps it."""
        self._cancel_close()
        if self.broken or not self._lock.acquire(blocking=False):
            return  # (a request in flight: it runs)
        try:
            self._start()
        except Exception:  # noqa: BLE001 - cannot start: compile in process
            self.broken = True
        finally:
            self._lock.release()

    def close_after(self, seconds: float) -> None:
        """Ends the subprocess after ``seconds`` unless it is used again before."""
        self._cancel_close()
        timer = threading.Timer(seconds, self._close_if_unused)
        timer.daemon = True
        self._closer = timer
        timer.start()

    def _close_if_unused(self) -> None:
        if self._closer is threading.current_thread():
            self.close()

    def _cancel_close(self) -> None:
        timer, self._closer = self._closer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()


_server = _Server()


@atexit.register
def _kill_at_exit() -> None:
    # (without the lock: the worker may be waiting for a reply, and an exiting process does not wait for compiles)
    _server._cancel_close()
    proc = _server._proc
    if proc is not None and proc.poll() is None:
        proc.kill()


def warm_cache(region: PortableFunction, inputs_meta: list) -> bool:
    """Compiles ``region`` for inputs of ``inputs_meta`` (``(shape, stride, dtype, device type)`` each) in the
    compile subprocess (started if needed), filling Inductor's FX graph cache: True if it did; False if the
    subprocess is off, broken, or failed on this region (then the caller's compile does the work)."""
    return _server.warm_cache(region, inputs_meta)


def close() -> None:
    """Ends the compile subprocess if it runs (the next :func:`warm_cache` starts a new one)."""
    _server.close()


def start() -> None:
    """Starts the compile subprocess ahead of the compiles (a background job about to start)."""
    _server.start()


@contextlib.contextmanager
def prioritized():
    """Within: the compile subprocess runs at normal priority (``thunder.wait_for_fusion``: the user waits)."""
    _server.prioritize(True)
    try:
        yield
    finally:
        _server.prioritize(False)


def close_after(seconds: float) -> None:
    """Ends the compile subprocess after ``seconds`` unless a compile uses it before (the worker ran out of work,
    and the first calls of the program it fused may queue more)."""
    _server.close_after(seconds)


def compiles_warmed() -> int:
    """How many graphs the compile subprocess has compiled in this process's life."""
    return _server.warmed


def example_metadata(values) -> list:
    """What compiling for ``values`` needs of them, without a reference to their data: ``(shape, stride, dtype,
    device)`` of each tensor; other values (numbers a graph holds as constants or takes as sizes) as they are."""
    import torch

    return [
        (tuple(v.shape), tuple(v.stride()), v.dtype, v.device) if isinstance(v, torch.Tensor) else v for v in values
    ]


def example_tensors(meta) -> list:
    """Zeros of each ``(shape, stride, dtype, device)`` entry of ``meta`` (``example_metadata``); other entries as
    they are."""
    import torch

    return [
        torch.empty_strided(m[0], m[1], dtype=m[2], device=m[3]).zero_() if isinstance(m, tuple) else m for m in meta
    ]


def compile_graph(fn, inputs: list):
    """``fn`` traced to an aten graph for ``inputs`` (their sizes, strides, dtypes) and compiled by Inductor; a callable
    taking the inputs as one list. The one recipe of both processes: the worker's compile reads the subprocess's from
    Inductor's cache only if both make the same graph under the same configuration."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    graph = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    # Inductor's FX graph cache needs a tracing context with a shape environment
    return compile_aten_graph(graph, inputs, FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True))


def compile_aten_graph(graph, inputs: list, fake_mode):
    """An aten graph (``make_fx`` with Inductor's decompositions) compiled by Inductor for ``inputs`` (real or fake:
    ``fake_mode``'s), in the tracing context Inductor's FX graph cache needs; a callable taking the inputs as one list.
    Also the compile of graphs with symbolic sizes (``symbolic_graphs``)."""
    import torch._guards
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx_inner

    # (no size asserts in the compiled code: torch_compile's region wrapper and the program's prologue check what
    # they would, and they cost ~0.7 µs per input and call)
    with inductor_config.patch(size_asserts=False), torch._guards.tracing(torch._guards.TracingContext(fake_mode)):
        return compile_fx_inner(graph, inputs)


def _serve() -> None:  # pragma: no cover - runs in the subprocess (tests check its effects)
    """The subprocess: reads compile requests from stdin until it closes; answers each on the original stdout."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # (anything Inductor prints must not reach the replies)
    import torch
    from torch._inductor import config as inductor_config

    while True:
        request = _recv(requests)
        if request is None:
            return
        try:
            _, region, meta, config, threads = request
            torch.set_num_threads(threads)
            if config is not None:
                inductor_config.load_config(config)
            with torch.no_grad():
                compile_graph(region.rebuild(), example_tensors(meta))
            reply = ("ok",)
        except BaseException as e:  # noqa: BLE001 - reported; the client compiles in process
            reply = ("error", f"{type(e).__name__}: {e}")
        _send(replies, reply)


if __name__ == "__main__":  # pragma: no cover
    del sys.path[0]  # (this file's folder: its modules are thunder's, not top-level ones)
    _serve()
