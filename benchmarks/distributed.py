"""Distributed training of a small LitGPT on CPU processes (gloo): DDP, FSDP ZeRO-2/3 vs PyTorch's, tensor parallelism.

Prints one JSON object: for a single-process ``thunder.jit`` run (the reference) and for
``thunder.distributed.ddp``/``fsdp`` on ``--world`` processes, and for PyTorch's own
``DistributedDataParallel`` (``torch_ddp``) and FSDP2 ``fully_shard`` per block and root
(``fsdp2``) on the eager model in the same run, and for ``thunder.distributed.tensor_parallel`` with
``litgpt_plan`` (``tp``: tensor-parallel over the ``--world`` processes, every rank the same batch;
``tp_fsdp``: 4 processes, a 2-D mesh of dp 2 x tp 2, fsdp over dp), the median step time (forward,
cross-entropy, backward, AdamW step) and, per rank, the memory of a step: the most heap bytes in
use (glibc ``mallinfo2``, sampled after every aten operation, as in ``training_step.py``) above
those in use when the step starts, and the bytes held by this rank's parameters, gradients and
optimizer state (sum of the tensors' ``nbytes``): what ZeRO shards. Each configuration runs in
its own processes, started by this script, talking over the loopback interface only, each with
one thread (``OMP_NUM_THREADS=1``).

    python benchmarks/distributed.py [--layers 2] [--steps 5] [--warmup 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

MODES = ("reference", "ddp", "zero2", "zero3", "torch_ddp", "fsdp2", "tp", "tp_fsdp")
TP_FSDP_WORLD = 4  # tp_fsdp: dp 2 x tp 2
MIB = 2**20


def _log(msg: str) -> None:
    print(f"[distributed.py] {msg}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local(t):
    """This rank's part of ``t`` (a DTensor's local shard under FSDP2)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(tensors) -> int:
    return sum(_local(t).nbytes for t in tensors if t is not None)


def _optimizer_state_bytes(optimizer) -> int:
    import torch

    return sum(
        _local(v).nbytes for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    )


def run_worker(mode: str, rank: int, world: int, port: int, args: argparse.Namespace) -> dict:
    """One rank of one configuration: builds, compiles and trains the model; returns its figures."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import thunder
    from thunder.tests.litgpt_model import GPT, Config

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from training_step import _heap_in_use, peak_bytes_of  # the same measurement as training_step.py

    torch.set_num_threads(1)
    distributed = mode != "reference"
    if distributed:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        config = Config.from_name("llama-tiny", n_layer=args.layers)
        model = GPT(config)
        full_param_bytes = _nbytes(model.parameters())
        data_rank = rank  # which part of the batch this rank trains on
        if mode in ("tp", "tp_fsdp"):
            from torch.distributed.device_mesh import init_device_mesh

            import thunder.distributed as td

            tp = world if mode == "tp" else 2
            mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
            data_rank = mesh["dp"].get_local_rank()  # the ranks of a tp group train on the same batch
            model = td.tensor_parallel(model, td.litgpt_plan(model), mesh["tp"])
            if mode == "tp_fsdp":
                model = td.fsdp(model, process_group=mesh["dp"].get_group())
        if mode == "ddp":
            import thunder.distributed as td

            model = td.ddp(model)
        elif mode in ("zero2", "zero3"):
            import thunder.distributed as td

            strategy = td.FSDPType.ZERO2 if mode == "zero2" else td.FSDPType.ZERO3
            model = td.fsdp(model, sharding_strategy=strategy)
        if mode == "torch_ddp":
            tm = torch.nn.parallel.DistributedDataParallel(model)
        elif mode == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for block in model.transformer.h:
                fully_shard(block)
            tm = fully_shard(model)
        else:
            tm = thunder.jit(model)
        optimizer = torch.optim.AdamW(tm.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1 + data_rank)  # each rank (tp: each tp group) its own part of the batch
        x = torch.randint(0, config.padded_vocab_size, (args.batch, args.seq), generator=g)
        y = torch.randint(0, config.padded_vocab_size, (args.batch, args.seq), generator=g)
        grad_bytes: list[int] = []

        def step() -> float:
            logits = tm(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            grad_bytes.append(_nbytes(p.grad for p in tm.parameters()))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.item()

        def sync() -> None:
            if distributed:
                dist.barrier()

        result: dict = {"rank": rank}
        sync()
        t0 = time.perf_counter()
        losses = [step()]
        result["first_step_s"] = time.perf_counter() - t0  # compiles the training program
        for _ in range(args.warmup - 1):
            losses.append(step())
        times = []
        for _ in range(args.steps):
            sync()
            t0 = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t0)
        result["median_step_s"] = statistics.median(times)
        result["step_times_s"] = times
        result["losses"] = losses

        param_bytes = _nbytes(tm.parameters())
        opt_bytes = _optimizer_state_bytes(optimizer)
        result["param_mib"] = param_bytes / MIB
        result["grad_mib"] = grad_bytes[-1] / MIB
        result["optimizer_state_mib"] = opt_bytes / MIB
        result["model_state_mib"] = (param_bytes + grad_bytes[-1] + opt_bytes) / MIB
        result["full_param_mib"] = full_param_bytes / MIB

        in_use = _heap_in_use()
        sync()
        if in_use is not None:
            result["heap_at_step_start_mib"] = in_use() / MIB
        peak = peak_bytes_of(step)
        if peak is not None:
            result["step_peak_mib"] = peak / MIB
            # parameters and optimizer state are held when the step starts; the gradients are made in it
            result["training_peak_mib"] = (param_bytes + opt_bytes + peak) / MIB
        sync()
        return result
    finally:
        if distributed:
            dist.destroy_process_group()


def _launch(mode: str, world: int, args: argparse.Namespace) -> list[dict]:
    """Runs ``mode`` on ``world`` new processes (one for the reference); returns each rank's figures."""
    port = _free_port()
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONWARNINGS="ignore::FutureWarning",
    )
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo binds to the loopback interface only
    common = ["--layers", str(args.layers), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    common += ["--batch", str(args.batch), "--seq", str(args.seq)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, "--rank", str(rank), "--world", str(world)]
            + ["--port", str(port), *common],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)),
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    deadline = time.monotonic() + args.timeout
    try:
        # a rank that fails leaves the others blocked in a collective: stop them all then
        while any(p.poll() is None for p in procs):
            failed = [rank for rank, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                sys.exit(
                    f"distributed.py: {mode} rank {failed[0]} failed (status {procs[failed[0]].returncode}); "
                    "its stderr is above"
                )
            if time.monotonic() > deadline:
                sys.exit(f"distributed.py: {mode} took more than --timeout {args.timeout} s")
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outputs = [p.stdout.read() for p in procs]
    for rank, p in enumerate(procs):
        if p.returncode != 0:
            sys.exit(f"distributed.py: {mode} rank {rank} exited with status {p.returncode}; its stderr is above")
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def _summary(ranks: list[dict]) -> dict:
    """The figures of a configuration: the slowest rank's step time, the largest per-rank memory."""
    out = {"median_step_s": max(r["median_step_s"] for r in ranks)}
    for key in ("step_peak_mib", "training_peak_mib", "model_state_mib", "param_mib", "grad_mib"):
        if all(key in r for r in ranks):
            out[key] = max(r[key] for r in ranks)
    out["optimizer_state_mib"] = max(r["optimizer_state_mib"] for r in ranks)
    out["first_step_s"] = max(r["first_step_s"] for r in ranks)
    out["per_rank"] = ranks
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (the first one compiles)")
    p.add_argument("--batch", type=int, default=2, help="sequences per rank")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    p.add_argument("--world", type=int, default=2, help="processes per distributed configuration")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--timeout", type=float, default=300, help="seconds a configuration may take")
    p.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be at least 1")
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.rank, args.world, args.port, args)))
        return
    try:
        import thunder  # noqa: F401
        import thunder.distributed  # noqa: F401
    except ImportError as e:
        sys.exit(f"distributed.py needs thunder-core and thunder-distributed installed: {e}")

    out: dict = {
        "model": f"LitGPT llama-tiny, {args.layers} layers, n_embd 256, vocabulary 1024, float32, CPU",
        "batch_per_rank": f"{args.batch} x {args.seq} tokens",
        "tensor_parallel": (
            "tp and tp_fsdp: the ranks of a tp group share one batch (tp trains the reference's batch per step); "
            "tp_fsdp has 2 tp groups, so 2 batches per step"
        ),
        "world_size": args.world,
        "tp_fsdp_world_size": TP_FSDP_WORLD,
        "optimizer": "AdamW",
        "timing": f"median of {args.steps} steps after {args.warmup} warm-up steps; max over ranks",
        "memory": (
            "per rank, max over ranks: step_peak_mib = peak heap bytes in use during a step above those at its "
            "start (mallinfo2 after every aten op); model_state_mib = nbytes of parameters + gradients + "
            "optimizer state on the rank; training_peak_mib = parameters + optimizer state + step_peak_mib"
        ),
    }
    t_all = time.perf_counter()
    for mode in args.modes:
        world = {"reference": 1, "tp_fsdp": TP_FSDP_WORLD}.get(mode, args.world)
        _log(f"{mode}: {world} process(es)")
        t0 = time.perf_counter()
        out[mode] = _summary(_launch(mode, world, args))
        _log(f"{mode}: done in {time.perf_counter() - t0:.1f} s, median step {out[mode]['median_step_s']:.3f} s")
    for ours, theirs in (("ddp", "torch_ddp"), ("zero2", "fsdp2"), ("zero3", "fsdp2")):
        if ours in out and theirs in out:
            out[ours][f"step_over_{theirs}"] = out[ours]["median_step_s"] / out[theirs]["median_step_s"]
            if "training_peak_mib" in out[ours] and "training_peak_mib" in out[theirs]:
                out[ours][f"training_peak_over_{theirs}"] = (
                    out[ours]["training_peak_mib"] / out[theirs]["training_peak_mib"]
                )
    if "reference" in out:
        ref = out["reference"]
        for mode in args.modes:
            if mode == "reference":
                continue
            r = out[mode]
            r["step_over_reference"] = r["median_step_s"] / ref["median_step_s"]
            r["model_state_over_reference"] = r["model_state_mib"] / ref["model_state_mib"]
            if "training_peak_mib" in r and "training_peak_mib" in ref:
                r["training_peak_over_reference"] = r["training_peak_mib"] / ref["training_peak_mib"]
    import torch

    out["total_s"] = time.perf_counter() - t_all
    out["torch"] = torch.__version__
    out["machine"] = {"cpu_count": os.cpu_count(), "platform": sys.platform}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
