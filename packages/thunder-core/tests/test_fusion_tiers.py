"""Tiered compilation (thunder.executors.tiers): a new program runs unfused while a fusion executor that
compiles slowly compiles its regions in the background; the fused program is swapped in when ready.

Most tests use ``SlowFusion``, a fusion executor whose regions run through the torch executor after a
simulated compile (a wait on the first call), so the tiers are checked without Inductor's seconds; one
test runs the real torch_compile executor.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import pytest
import torch
from differential.programs import FEATURES, programs
from hypothesis import HealthCheck, given, settings

import thunder
from thunder.executors import pythonex, tiers, torchex
from thunder.executors.fusion import region_trace
from thunder.executors.torch_compile import TorchCompileExecutor, graphs_compiled, torch_compile_ex
from thunder.extend import FusionExecutor


class SlowFusion(FusionExecutor):
    """Fuses elementwise torch ops; a region's first call "compiles" (waits for ``release`` to be set).
    With ``fail``, building a region fails."""

    region_name = "slowFusion"
    compiles_slowly = True
    fusible = {"add", "mul", "sub", "tanh", "relu", "exp", "sum", "neg"}

    def __init__(self, *, fail: bool = False):
        super().__init__("slow_fusion")
        self.release = threading.Event()
        self.fail = fail
        self.compiled_on: list[str] = []  # the thread that compiled each region
        self.fused_calls = 0

    def can_fuse(self, bsym) -> bool:
        return bsym.sym.name in self.fusible and bsym.sym.id.startswith("torch.")

    def fuse_region(self, region):
        if self.fail:
            raise RuntimeError("simulated compiler crash")
        fn = region_trace(region, [torchex.ex, pythonex.ex]).python_callable()
        compiled = []

        def run(*args):
            if not compiled:
                self.release.wait(60)
                self.compiled_on.append(threading.current_thread().name)
                compiled.append(True)
                return fn(*args)
            self.fused_calls += 1
            return fn(*args)

        return run


def _fn(a, b):
    c = a * b + 1
    return torch.tanh(c).sum(-1), torch.relu(c) * 2


def _region_calls(trace) -> int:
    return sum("= slowFusion" in line and not line.strip().startswith("#") for line in str(trace).splitlines())


def _check_against_eager(jf, fn, *args):
    """Outputs and gradients of ``jf`` equal ``fn``'s in eager on fresh copies of ``args``."""
    mine = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, expected = jf(*mine), fn(*ref)
    for x, y in zip(out, expected):
        torch.testing.assert_close(x, y)
    sum(o.sum() for o in out).backward()
    sum(o.sum() for o in expected).backward()
    for x, y in zip(mine, ref):
        if x.requires_grad:
            torch.testing.assert_close(x.grad, y.grad)


def test_first_call_runs_unfused_then_the_fused_program_is_swapped_in():
    ex = SlowFusion()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)

    _check_against_eager(jf, _fn, a, b)  # returns while the regions are still "compiling"
    assert thunder.fusion_states(jf) == ["unfused"]
    assert _region_calls(thunder.last_traces(jf)[-1]) == 0
    _check_against_eager(jf, _fn, a, b)  # still the unfused program, still eager's answer
    assert thunder.cache_misses(jf) == 1

    ex.release.set()
    assert thunder.wait_for_fusion(jf, timeout=60)
    assert thunder.fusion_states(jf) == ["fused"]
    # the regions compiled on the background thread, from example inputs, not on a user call
    assert ex.compiled_on and set(ex.compiled_on) == {"thunder-background-fusion"}
    assert ex.fused_calls == 0

    _check_against_eager(jf, _fn, a, b)
    forward_regions = _region_calls(thunder.last_traces(jf)[-1])
    backward_regions = _region_calls(thunder.last_backward_traces(jf)[-1])
    assert forward_regions >= 1 and backward_regions >= 1
    assert ex.fused_calls == forward_regions + backward_regions  # every region of the fused program ran
    assert len(ex.compiled_on) == forward_regions + backward_regions
    assert thunder.cache_misses(jf) == 1  # the swap is not a recompilation
    assert thunder.compile_stats(jf).background_fusions == 1


class CountingFusion(SlowFusion):
    """Counts the regions built (the worker's first step) and the thread each was built on."""

    def __init__(self):
        super().__init__()
        self.built_on: list[str] = []

    def fuse_region(self, region):
        self.built_on.append(threading.current_thread().name)
        return super().fuse_region(region)


def _watch_first_call_release(monkeypatch, ex: CountingFusion) -> list:
    """Records, when thunder lets the worker start after a first call: whether that call produced its result,
    whether the worker had built anything or been released before."""
    seen = []
    release = thunder.compiler._release_after_first_call

    def watched(entry, result, call_seconds):
        job = entry.held_fusion_job
        seen.append((result is not None, list(ex.built_on), job.released.is_set()))
        release(entry, result, call_seconds)

    monkeypatch.setattr(thunder.compiler, "_release_after_first_call", watched)
    return seen


def test_the_worker_starts_only_after_the_first_call_returned(monkeypatch):
    ex = CountingFusion()
    seen = _watch_first_call_release(monkeypatch, ex)
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    out = jf(a, b)
    for x, y in zip(out, _fn(a, b)):
        torch.testing.assert_close(x, y)
    # the call ran with nothing built and the job held; without a backward to wait for, it is released at once
    assert seen == [(True, [], False)]
    ex.release.set()
    assert thunder.wait_for_fusion(jf, timeout=60)
    assert thunder.fusion_states(jf) == ["fused"] and set(ex.built_on) == {"thunder-background-fusion"}


def test_a_training_call_holds_the_worker_until_its_backward_has_run(monkeypatch):
    ex = CountingFusion()
    ex.release.set()
    seen = _watch_first_call_release(monkeypatch, ex)
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    out = jf(a, b)
    assert seen == [(True, [], False)]
    time.sleep(0.3)  # (less than the hold's fallback deadline: the job waits for the backward)
    assert ex.built_on == [] and thunder.fusion_states(jf) == ["unfused"]
    (out[0].sum() + out[1].sum()).backward()
    a_ref = a.detach().clone().requires_grad_()
    expected = _fn(a_ref, b)
    (expected[0].sum() + expected[1].sum()).backward()
    torch.testing.assert_close(a.grad, a_ref.grad)
    deadline = time.monotonic() + 60  # released by the backward, long before the fallback deadline
    while not ex.built_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ex.built_on
    assert thunder.wait_for_fusion(jf, timeout=60)
    assert thunder.fusion_states(jf) == ["fused"]
    _check_against_eager(jf, _fn, a, b)


def test_a_forward_whose_backward_never_comes_is_fused_after_the_hold(monkeypatch):
    monkeypatch.setattr(thunder.compiler, "_FUSION_HOLD_S", 0.2)
    ex = CountingFusion()
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    out = jf(torch.randn(4, 8, requires_grad=True), torch.randn(4, 8))
    assert out[0].requires_grad
    deadline = time.monotonic() + 60
    while thunder.fusion_states(jf) != ["fused"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert thunder.fusion_states(jf) == ["fused"]


def test_wait_compiles_the_fused_program_before_the_first_call_returns():
    ex = SlowFusion()
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()], fusion="wait")
    _check_against_eager(jf, _fn, torch.randn(3, 5, requires_grad=True), torch.randn(3, 5))
    assert thunder.fusion_states(jf) == ["fused"]
    assert _region_calls(thunder.last_traces(jf)[-1]) >= 1
    assert ex.compiled_on and set(ex.compiled_on) == {threading.current_thread().name}


def test_off_has_one_program_whose_regions_compile_when_they_first_run():
    ex = SlowFusion()
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()], fusion="off")
    _check_against_eager(jf, _fn, torch.randn(3, 5, requires_grad=True), torch.randn(3, 5))
    assert thunder.fusion_states(jf) == ["not tiered"]
    assert _region_calls(thunder.last_traces(jf)[-1]) >= 1


def test_no_slow_executor_means_no_tiers():
    jf = thunder.jit(_fn)
    jf(torch.randn(2, 3), torch.randn(2, 3))
    assert thunder.fusion_states(jf) == ["not tiered"]
    assert thunder.wait_for_fusion(jf, timeout=0)


def test_an_unknown_fusion_mode_is_a_clear_error():
    jf = thunder.jit(_fn, executors=[SlowFusion(), *thunder.get_default_executors()], fusion="later")
    with pytest.raises(ValueError, match=r"fusion='later'.*'background', 'wait', 'off'"):
        jf(torch.randn(2, 3), torch.randn(2, 3))


def test_a_failed_background_build_warns_once_and_keeps_the_unfused_program():
    ex = SlowFusion(fail=True)
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_against_eager(jf, _fn, a, b)
        assert thunder.wait_for_fusion(jf, timeout=60)
        # a second program (its first dimension now symbolic), also failing
        _check_against_eager(jf, _fn, a[:2].detach().requires_grad_(), b[:2])
        assert thunder.wait_for_fusion(jf, timeout=60)
    messages = [str(w.message) for w in caught if "fused program" in str(w.message)]
    assert len(messages) == 1 and "simulated compiler crash" in messages[0] and "_fn" in messages[0]
    assert thunder.fusion_states(jf) == ["failed", "failed"]
    assert thunder.compile_stats(jf).background_fusion_failures == 2
    _check_against_eager(jf, _fn, a, b)


def test_in_place_effects_are_the_same_in_both_tiers():
    def f(x, y):
        x.mul_(2)
        z = x * y + 1
        y.add_(z.tanh())
        return z.exp()

    ex = SlowFusion()
    jf = thunder.jit(f, executors=[ex, *thunder.get_default_executors()])
    x0, y0 = torch.randn(5, 3), torch.randn(5, 3)
    results = []
    for release in (False, True):
        if release:
            ex.release.set()
            assert thunder.wait_for_fusion(jf, timeout=60)
        x, y, xr, yr = x0.clone(), y0.clone(), x0.clone(), y0.clone()
        out = jf(x, y)
        expected = f(xr, yr)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close((x, y), (xr, yr))
        results.append(thunder.fusion_states(jf)[0])
    assert results == ["unfused", "fused"]
    assert ex.fused_calls >= 1


def test_user_threads_calling_during_the_swap_get_eager_answers():
    ex = SlowFusion()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    jm = thunder.jit(model, executors=[ex, *thunder.get_default_executors()])
    x = torch.randn(16, 8)
    expected = model(x)
    torch.testing.assert_close(jm(x), expected)
    errors: list[BaseException] = []

    def caller():
        try:
            for _ in range(200):
                torch.testing.assert_close(jm(x), expected)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    ex.release.set()  # the swap happens while the threads call
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert thunder.wait_for_fusion(jm, timeout=60)
    torch.testing.assert_close(jm(x), expected)
    assert thunder.fusion_states(jm) == ["fused"] and thunder.cache_misses(jm) == 1


def _join_workers() -> None:
    for t in threading.enumerate():
        if t.name == "thunder-background-fusion":
            t.join(10)


def test_no_background_thread_or_program_outlives_the_work():
    ex = SlowFusion()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    _join_workers()  # (a worker finishing an earlier test's job restores the interval when it ends)
    user_interval = sys.getswitchinterval()
    jf(torch.randn(2, 3), torch.randn(2, 3))
    # while the worker compiles (its first region waits for ``release``), the user's thread gets the GIL back sooner
    lowered = min(user_interval, tiers.WORKER_SWITCH_INTERVAL_S)
    for _ in range(600):
        if sys.getswitchinterval() == lowered:
            break
        time.sleep(0.05)
    assert sys.getswitchinterval() == lowered
    ex.release.set()
    assert thunder.wait_for_fusion(jf, timeout=60)
    _join_workers()
    assert not [t for t in threading.enumerate() if t.name == "thunder-background-fusion" and t.is_alive()]
    assert sys.getswitchinterval() == user_interval  # restored when the work is done
    cd = weakref.ref(thunder.compile_data(jf))
    del jf
    gc.collect()
    assert cd() is None


def test_a_process_with_pending_compiles_exits_promptly(tmp_path):
    script = tmp_path / "pending.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, torch, thunder
            sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
            from test_fusion_tiers import SlowFusion, _fn
            ex = SlowFusion()  # never released: its compile would take an hour
            ex.release.wait = lambda timeout=None: __import__("time").sleep(3600)
            jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
            out = jf(torch.ones(2, 3), torch.ones(2, 3))
            assert thunder.fusion_states(jf) == ["unfused"]
            print("ran", float(out[0].sum()))
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ran"), proc.stdout


@pytest.mark.skipif(
    torch.cuda.is_available() or torch_compile_ex.unavailable_reason() is not None,
    reason="discover() fuses with Inductor on a machine without CUDA that has a C++ compiler",
)
def test_discover_default_fuses_in_the_background_with_eager_answers_in_both_tiers():
    """thunder.discover()'s CPU default: the first calls run unfused, Inductor compiles the region in the background,
    and both tiers give eager's outputs, gradients and in-place effects; the swap triggers no recompile."""
    from torch._dynamo.utils import counters

    def f(x, w, b):
        x.mul_(0.5)  # an in-place update of an input: stays out of the region, in both tiers
        h = torch.nn.functional.linear(x, w)  # a matmul: joins the region after it
        return (torch.tanh(h + b) * 2 - 1).sum(-1)  # large enough for the region rule: one Inductor region

    executors = thunder.discover()
    assert torch_compile_ex in executors
    jf = thunder.jit(f, executors=executors)
    n = torch_compile_ex.min_region_numel
    torch.manual_seed(0)
    x0, w, b = torch.randn(n // 64, 64), torch.randn(64, 64, requires_grad=True), torch.randn(64)

    def check():
        x, xr = x0.clone(), x0.clone()
        wr = w.detach().clone().requires_grad_()
        w.grad = None
        out, expected = jf(x, w, b), f(xr, wr, b)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, xr)  # the in-place update reached the caller's tensor
        out.sum().backward()
        expected.sum().backward()
        # w's gradient sums 4096 float32 products: their order (fused or not) moves it by ~1e-5
        torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)

    check()
    assert thunder.fusion_states(jf) in (["unfused"], ["fused"])
    assert thunder.wait_for_fusion(jf, timeout=600)
    assert thunder.fusion_states(jf) == ["fused"]
    graphs = counters["stats"]["unique_graphs"], graphs_compiled()
    assert graphs_compiled() > 0  # (Inductor compiled the region without Dynamo)
    check()
    # the background compile's graphs serve the real calls
    assert (counters["stats"]["unique_graphs"], graphs_compiled()) == graphs
    code = [line for line in str(thunder.last_traces(jf)[-1]).splitlines() if not line.strip().startswith("#")]
    assert sum("= torchCompile" in line for line in code) == 1
    assert not any("linear(" in line for line in code)  # (in the region)
    assert thunder.cache_misses(jf) == 1


class FuseWhatInductorWould(SlowFusion):
    """Claims what the torch_compile executor would; regions run through the torch executor."""

    def can_fuse(self, bsym) -> bool:
        return torch_compile_ex.can_fuse(bsym)


def _assert_as_eager(actual, expected, program) -> None:
    for got, want in zip(actual, expected):
        assert len(got) == len(want), program.repro()
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, program.repro()
            torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m: f"{m}\n{program.repro()}")


def _eager_answers(fn, program):
    """``_outputs_and_grads`` of ``fn`` in eager on the program's inputs; None where eager rejects the program."""
    try:
        return _outputs_and_grads(fn, program.make_inputs())
    except Exception:  # noqa: BLE001 - any error of eager's: the program is not one to compare
        return None


def _outputs_and_grads(fn, inputs):
    """``fn``'s outputs, the inputs after the call and the inputs' gradients of the float outputs' sum."""
    outs = list(fn(*inputs))
    leaves = [t for t in inputs if t.requires_grad and t.is_leaf]
    total = sum(o.double().sum() for o in outs if o.requires_grad and o.dtype.is_floating_point)
    grads = torch.autograd.grad(total, leaves, allow_unused=True) if leaves and torch.is_tensor(total) else ()
    return [o.detach() for o in outs], [t.detach() for t in inputs], [g for g in grads if g is not None]


@settings(max_examples=15, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
# (captured inputs are rebound as globals at each call: the program then traces again, a tier of its own)
@given(programs(frozenset(FEATURES) - {"captured_inputs"}))
def test_both_tiers_give_eager_answers_on_random_programs(program):
    fn = program.make_function()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _eager_answers(fn, program)
        if expected is None:  # eager rejects the program: nothing to compare
            return
        ex = FuseWhatInductorWould()
        jf = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
        tiers_seen = []
        for release in (False, True):
            if release:
                ex.release.set()
                assert thunder.wait_for_fusion(jf, timeout=60)
            actual = _outputs_and_grads(jf, program.make_inputs())
            tiers_seen.append(thunder.fusion_states(jf)[0])
            _assert_as_eager(actual, expected, program)
    # (a program with no region that waits to compile may be swapped before its first call runs)
    assert tiers_seen == ["unfused", "fused"] or (not ex.compiled_on and tiers_seen[1] == "fused")


def test_a_region_whose_example_call_raises_compiles_at_its_first_real_call():
    """Zeros are not valid for every input (a saved RNG state): the region is left to its first real call."""

    class PickyFusion(SlowFusion):
        def fuse_region(self, region):
            run = super().fuse_region(region)

            def picky(*args):
                if all(not a.any() for a in args if isinstance(a, torch.Tensor)):
                    raise RuntimeError("these values make no sense")
                return run(*args)

            return picky

    ex = PickyFusion()
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    _check_against_eager(jf, _fn, a, b)
    assert thunder.wait_for_fusion(jf, timeout=60)
    assert thunder.fusion_states(jf) == ["fused"] and not ex.compiled_on
    _check_against_eager(jf, _fn, a, b)
    assert ex.compiled_on and set(ex.compiled_on) == {threading.current_thread().name}


def test_the_backward_for_the_outputs_that_were_differentiated_compiles_in_the_background():
    """A model output nobody differentiates (an HF model's cache, an auxiliary value) gets no gradient, and the
    backward that leaves its branches out is a program of its own: the fused program's is built and compiled with
    the forward's, so the first fused step compiles nothing on the caller's thread (it compiled five Inductor
    regions there, 1.3 s, in the HF Llama training step). The full backward, which no call ran, compiles when a
    call first needs it."""
    ex = SlowFusion()
    ex.release.set()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()])

    def step(f, a, b, both=False):
        a = a.detach().clone().requires_grad_()
        first, second = f(a, b)
        (first.sum() + (second.sum() if both else 0)).backward()
        return first, second, a.grad

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    expected = step(_fn, a, b)
    for x, y in zip(step(jf, a, b), expected):  # the unfused program
        torch.testing.assert_close(x, y)
    assert thunder.wait_for_fusion(jf, timeout=60) and thunder.fusion_states(jf) == ["fused"]
    worker_compiles = len(ex.compiled_on)
    assert worker_compiles and threading.current_thread().name not in ex.compiled_on
    for x, y in zip(step(jf, a, b), expected):  # the fused program's forward and the backward it ran before
        torch.testing.assert_close(x, y)
    assert threading.current_thread().name not in ex.compiled_on and ex.fused_calls
    for x, y in zip(step(jf, a, b, both=True), step(_fn, a, b, both=True)):
        torch.testing.assert_close(x, y)
    assert ex.compiled_on[worker_compiles:] and set(ex.compiled_on[worker_compiles:]) == {
        threading.current_thread().name
    }


def test_a_program_traced_while_a_job_compiles_waits_for_one_region_not_the_job():
    # a job of 20 regions of 0.1 s each; the worker holds the compile lock for each region in turn
    started, done = threading.Event(), threading.Event()

    def region():
        started.set()
        time.sleep(0.1)

    job = tiers.FusionJob(
        build=lambda: None,
        regions=lambda program: [(region, [])] * 20,
        install=lambda program: done.set(),
        fail=lambda e: None,
        lock=thunder.compiler._compile_lock,
    )
    tiers.submit(job)
    job.release()
    assert started.wait(30)
    x = torch.randn(3)
    t0 = time.perf_counter()
    out = thunder.jit(lambda t: t.cos() + 1)(x)
    seconds = time.perf_counter() - t0
    torch.testing.assert_close(out, x.cos() + 1)
    # before: a plain lock let the worker take it back after each region, and the trace waited ~2 s for the job
    assert not done.is_set(), f"the trace waited for the whole job ({seconds:.2f} s)"
    assert job.done.wait(60) and done.is_set()


def test_a_fusion_wait_compile_with_a_thread_waiting_to_trace_does_not_deadlock():
    ex = SlowFusion()
    ex.release.set()
    other_done = threading.Event()
    jf = thunder.jit(_fn, executors=[ex, *thunder.get_default_executors()], fusion="wait")
    original_build = ex.fuse_region

    def fuse_region_with_a_waiter(region):
        # while this thread holds the compile lock, another thread starts a compile and waits for the lock
        if not other_done.is_set() and not getattr(fuse_region_with_a_waiter, "started", False):
            fuse_region_with_a_waiter.started = True
            threading.Thread(target=lambda: (thunder.jit(torch.sin)(torch.ones(2)), other_done.set())).start()
            time.sleep(0.2)
        return original_build(region)

    ex.fuse_region = fuse_region_with_a_waiter
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    for x, y in zip(jf(a, b), _fn(a, b)):
        torch.testing.assert_close(x, y)
    assert thunder.fusion_states(jf) == ["fused"]
    assert other_done.wait(60)


def test_the_users_random_draws_during_a_background_compile_are_not_replayed():
    # Inductor saves the process's RNG state before it compiles a graph and restores it after: on the background
    # worker that rolled back every draw the user's thread made meanwhile, which then drew the same numbers again
    # (dropout masks, data) where eager draws new ones
    def f(a):
        return torch.tanh(a * 2.375 + 1) * a.exp()

    jf = thunder.jit(f, executors=["torch_compile", *thunder.get_default_executors()])
    a = torch.randn(512, 256)
    torch.manual_seed(1234)
    jf(a)
    draws = []
    deadline = time.monotonic() + 120
    while "unfused" in thunder.fusion_states(jf) and time.monotonic() < deadline:
        draws.append(torch.rand(3))
        time.sleep(0.0005)
    assert thunder.wait_for_fusion(jf, timeout=120)
    draws.append(torch.rand(3))
    torch.manual_seed(1234)
    expected = [torch.rand(3) for _ in draws]
    assert len(draws) > 10
    for got, want in zip(draws, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


_any_size_inductor = TorchCompileExecutor("torch_compile_any_size_tiers", min_region_numel=0)


@settings(max_examples=12, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(programs(frozenset({"elementwise", "broadcast", "view", "view_inputs", "reduction", "softmax", "detach"})))
def test_inductor_regions_and_the_layouts_they_learn_give_eager_answers_on_random_programs(program):
    # real Inductor regions on every region (min_region_numel=0); strided arguments make a region learn their
    # layout on the first fused call and call the graph compiled for it from the next
    _check_inductor_regions_against_eager(program, calls=3)


def _check_inductor_regions_against_eager(program, calls: int, **options) -> None:
    """``program`` jitted with Inductor on every region (``thunder.jit`` ``options`` added) gives eager's outputs
    and gradients on each of ``calls`` calls, waiting after each for the compiles the call queued."""
    fn = program.make_function()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _eager_answers(fn, program)
        if expected is None:  # eager rejects the program: nothing to compare
            return
        jf = thunder.jit(fn, executors=[_any_size_inductor, *thunder.get_default_executors()], fusion="wait", **options)
        for _ in range(calls):
            actual = _outputs_and_grads(jf, program.make_inputs())
            assert thunder.wait_for_fusion(jf, timeout=300)
            _assert_as_eager(actual, expected, program)


def _users_compiled_function_runs_while_held(region_fn, entered, release):
    """Compiles ``region_fn``'s region on the worker and, once the compile sets ``entered`` (a hook then holds it until
    ``release``), calls a user's ``torch.compile``'d function in this thread: it gives eager's answer. Returns the
    region and its input after the compile is done."""
    from thunder.executors import tiers
    from thunder.executors.torch_compile import _InductorRegion

    def user_fn(x):
        return torch.sin(x) * 2

    compiled = torch.compile(user_fn, backend="eager")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), user_fn(x))
    region = _InductorRegion(region_fn, static=True)
    a = torch.randn(3, 5)
    job = tiers.submit_compile(lambda: region._inductor_graph([a]))
    try:
        assert entered.wait(120)
        torch.testing.assert_close(compiled(x), user_fn(x))
    finally:
        release.set()
    assert job.done.wait(300)
    return region, a


def _hold_once(entered, release) -> None:
    if not entered.is_set():
        entered.set()
        release.wait(60)


def test_a_users_compiled_function_runs_while_the_worker_traces_a_region():
    # FX's tracer marks the whole process as tracing; the user's torch.compile'd function, called in another thread
    # while the worker traced a region, raised "Detected that you are using FX to symbolically trace a
    # dynamo-optimized function" (benchmarks/vision.py's torch.compile of MaxViT beside thunder's fused model)
    import threading

    tracing, release = threading.Event(), threading.Event()

    def region_fn(a):
        _hold_once(tracing, release)  # (inside make_fx's tracing of the region: held open while the user calls)
        return torch.tanh(a) + 1

    _users_compiled_function_runs_while_held(region_fn, tracing, release)


def test_a_users_compiled_function_runs_while_fxs_tracer_sets_itself_up_for_a_region(monkeypatch):
    # the flag FX's tracer raises for the whole process is also up while it sets itself up (before the region's
    # operations run, where thunder lowers it): a user's torch.compile'd function called in another thread then
    # raised Dynamo's "Detected that you are using FX to symbolically trace a dynamo-optimized function"
    import threading

    import torch.fx._symbolic_trace as fx_trace

    setting_up, release = threading.Event(), threading.Event()
    create_args = fx_trace.Tracer.create_args_for_root

    def held_open(self, *args, **kwargs):
        if not setting_up.is_set():
            assert fx_trace.is_fx_tracing()  # (the window this test is about)
        _hold_once(setting_up, release)
        return create_args(self, *args, **kwargs)

    monkeypatch.setattr(fx_trace.Tracer, "create_args_for_root", held_open)
    region, a = _users_compiled_function_runs_while_held(lambda a: (torch.tanh(a) - 1,), setting_up, release)
    torch.testing.assert_close(region._inductor_graph([a])([a.clone()])[0], torch.tanh(a) - 1)


@settings(max_examples=8, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(programs(frozenset({"elementwise", "broadcast", "view", "reduction", "softmax", "size_values"})))
def test_inductor_regions_with_symbolic_sizes_give_eager_answers_on_random_programs(program):
    # cache="symbolic values": the regions' sizes are symbols, compiled once with Inductor and guarded per call
    # (thunder.executors.symbolic_graphs)
    _check_inductor_regions_against_eager(program, calls=2, cache="symbolic values")


def test_a_users_module_runs_while_a_region_compile_traces_with_fx():
    # FX's tracers replace torch.nn.Module.__call__ for the whole process while they trace; Inductor's bounds analysis
    # traces with FX's base Tracer while it generates a region's code on the worker, and a model called meanwhile in
    # the main thread raised "module is not installed as a submodule" (benchmarks/vision.py, tv_densenet121 fused)
    import threading

    from thunder.executors.torch_compile import _other_threads_module_calls_unaffected

    tracing, release, failures = threading.Event(), threading.Event(), []

    class Traced(torch.nn.Module):
        def forward(self, a):
            _hold_once(tracing, release)
            return a + 1

    def compile_on_another_thread():
        try:
            with _other_threads_module_calls_unaffected():
                graph = torch.fx.symbolic_trace(Traced())
            torch.testing.assert_close(graph(torch.ones(2)), torch.full((2,), 2.0))
        except Exception as e:  # (reported below)
            failures.append(e)

    users = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    x = torch.randn(4, 3)
    worker = threading.Thread(target=compile_on_another_thread)
    worker.start()
    try:
        assert tracing.wait(60)
        assert torch.nn.Module.__call__ is not torch.nn.Module._wrapped_call_impl  # (FX's replacement is in place)
        torch.testing.assert_close(users(x), torch.relu(x @ users[0].weight.T + users[0].bias))
        assert users[0].weight is users._modules["0"]._parameters["weight"]
    finally:
        release.set()
        worker.join(60)
    assert not failures, failures
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl
