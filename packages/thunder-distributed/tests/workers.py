"""Scenarios run by each rank of the test worlds: ``python workers.py RANK WORLD PORT SCENARIO:ARG:ARG ...``.

Each scenario trains or checks something under thunder.distributed and compares it, on every
rank, with single-process eager PyTorch on the full (concatenated) batch. A failed check raises,
so the process exits non-zero and the test shows its output.
"""

from __future__ import annotations

import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import thunder
import thunder.distributed as td
import thunder.dynamo

TOL = dict(rtol=1e-4, atol=1e-5)
# Adam turns float rounding in tiny gradients (different reduction order) into visible steps
GPT_TOL = dict(rtol=1e-3, atol=1e-4)
# bf16 computation: thunder's backward and PyTorch's round some gradients differently (one bf16 step, 2**-8 relative)
BF16_TOL = dict(rtol=1.6e-2, atol=1e-3)
BACKEND = os.environ.get("THUNDER_TEST_BACKEND", "gloo")
DEVICE_TYPE = "cuda" if BACKEND == "nccl" else "cpu"  # where the ranks compute (NCCL: cuda:LOCAL_RANK)


def mlp() -> torch.nn.Module:
    # 7 outputs in the middle layer: a parameter whose dim 0 is not divisible by the world size
    return torch.nn.Sequential(
        torch.nn.Linear(6, 7), torch.nn.Tanh(), torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)
    )


def tiny_gpt() -> torch.nn.Module:
    from thunder.tests.litgpt_model import GPT, Config

    cfg = Config.from_name("llama-tiny")
    cfg.n_layer = 1
    return GPT(cfg)


def make_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return mlp() if kind == "mlp" else tiny_gpt()


def batches(kind: str, steps: int, batch: int = 4):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        if kind == "mlp":
            yield torch.randn(batch, 6, generator=g), torch.randn(batch, 3, generator=g)
        else:
            yield torch.randint(0, 1024, (batch, 8), generator=g), torch.randint(0, 1024, (batch, 8), generator=g)


def loss_fn(kind: str, out, target):
    if kind == "mlp":
        return torch.nn.functional.mse_loss(out, target)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def local(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.shape[0] // world
    return t[rank * n : (rank + 1) * n]


def make_optimizer(name: str, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    return torch.optim.Adam(params, lr=1e-2)


def wrap(model, mode: str, bucketing: str = "none"):
    if mode == "ddp":
        return td.ddp(model, bucket_size_in_mb=0 if bucketing == "none" else 25)
    strategy = {"zero2": td.FSDPType.ZERO2, "zero3": td.FSDPType.ZERO3}[mode]
    return td.fsdp(model, sharding_strategy=strategy, bucketing_strategy=bucketing)


def full_params(tm) -> dict[str, torch.Tensor]:
    sd = td.get_model_state_dict(tm)
    return {n: sd[n] for n, _ in tm._model.named_parameters()}


def trace_text(traces) -> str:
    return str(traces[-1])


def check_close(actual: dict, expected: torch.nn.Module, what: str, tol: dict) -> None:
    for name, p in expected.named_parameters():
        torch.testing.assert_close(
            actual[name].cpu(), p.detach().cpu(), **tol, msg=lambda m, name=name: f"{what}: {name}: {m}"
        )


# --------------------------------------------------------------------------- scenarios


def train(rank: int, world: int, kind: str, mode: str, bucketing: str, opt_name: str, order: str = "before") -> None:
    """Several optimizer steps under ddp/fsdp equal eager training on the full batch."""
    model = make_model(kind)
    reference = copy.deepcopy(model)
    if order == "before":
        tm = thunder.jit(wrap(model, mode, bucketing))
    else:  # transform an already jitted module
        tm = wrap(thunder.jit(model), mode, bucketing)
    opt = make_optimizer(opt_name, tm.parameters())
    ref_opt = make_optimizer(opt_name, reference.parameters())
    dev = next(tm.parameters()).device  # cuda:LOCAL_RANK with NCCL
    for x, y in batches(kind, 3, batch=2 * world):
        loss = loss_fn(kind, tm(local(x, rank, world).to(dev)), local(y, rank, world).to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = loss_fn(kind, reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    check_close(full_params(tm), reference, f"{kind} {mode} {bucketing} {opt_name}", TOL if kind == "mlp" else GPT_TOL)

    forward, backward = trace_text(thunder.last_traces(tm)), trace_text(thunder.last_backward_traces(tm))
    if world == 1:
        for op in ("all_reduce(", "all_gather(", "reduce_scatter(", "wait("):
            assert op not in forward + backward, f"a world of one communicated: {op}"
        return
    if mode == "ddp":
        assert "synchronize(" in forward, forward
        assert "all_reduce(" in backward and "wait(" in backward, backward
        n_buckets = backward.count("all_reduce(")
        n_params = len(list(tm.parameters()))
        if bucketing == "none":
            assert n_buckets == n_params, (n_buckets, n_params)
        else:
            assert n_buckets == 1, backward
        # the waits come after every all-reduce has been issued
        assert backward.rindex("all_reduce(") < backward.index("wait("), backward
    else:
        assert "all_gather(" in forward and "wait(" in forward, forward
        assert "reduce_scatter(" in backward and "wait(" in backward, backward
        regathers = "all_gather(" in backward
        assert regathers == (mode == "zero3"), f"{mode}: all_gather in backward is {regathers}\n{backward}"
        n_gathers = forward.count("all_gather(")
        n_params = len(list(tm.parameters()))
        if bucketing == "none":
            assert n_gathers == n_params, (n_gathers, n_params)
        else:
            assert n_gathers < n_params, forward
        # the optimizer only sees this rank's shards
        for (name, p), (_, ref) in zip(tm._model.named_parameters(), reference.named_parameters()):
            assert p.shape[0] == -(-(ref.shape[0] if ref.ndim else 1) // world), (name, p.shape, ref.shape)


def no_sync(rank: int, world: int, kind: str, mode: str) -> None:
    """Gradient accumulation with no_sync equals eager accumulation on the full micro-batches."""
    model = make_model(kind)
    reference = copy.deepcopy(model)
    tm = thunder.jit(wrap(model, mode))
    micro = list(batches(kind, 3, batch=2 * world))
    with tm.no_sync():
        for x, y in micro[:-1]:
            loss_fn(kind, tm(local(x, rank, world)), local(y, rank, world)).backward()
        if mode == "ddp" and world > 1:
            # inside no_sync the gradients are this rank's own: the ranks differ
            grads = torch.cat([p.grad.reshape(-1) for p in tm.parameters()])
            others = [torch.empty_like(grads) for _ in range(world)]
            dist.all_gather(others, grads)
            assert not torch.allclose(others[0], others[1]), "no_sync still synchronised the gradients"
        if mode != "ddp" and world > 1:
            # no reduce-scatter ran: the shard gradients are still zero, the full gradients wait on this rank
            assert all(p.grad is None or not p.grad.any() for p in tm.parameters()), "no_sync reduced the gradients"
            held = tm._model._thunder_distributed.unreduced
            assert held and sum(t.numel() for t in held.values()) >= sum(p.numel() for p in reference.parameters()), (
                "no_sync kept no unsharded gradients"
            )
    x, y = micro[-1]
    loss_fn(kind, tm(local(x, rank, world)), local(y, rank, world)).backward()
    for x, y in micro:
        loss_fn(kind, reference(x), y).backward()
    for (name, p), (_, ref) in zip(tm._model.named_parameters(), reference.named_parameters()):
        if mode == "ddp":
            torch.testing.assert_close(p.grad, ref.grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")
        else:  # the shard of the full gradient
            from thunder_distributed.fsdp import shard_tensor

            expected, _ = shard_tensor(ref.grad, rank, world)
            torch.testing.assert_close(p.grad, expected, **TOL, msg=lambda m, name=name: f"{name}: {m}")


def checkpoint(rank: int, world: int, kind: str, mode: str, path: str) -> None:
    """Full and sharded state dicts round-trip; a resumed run gives the same loss as continuing."""
    model = make_model(kind)
    reference = copy.deepcopy(model)
    tm = thunder.jit(wrap(model, mode))
    opt = make_optimizer("sgd", tm.parameters())
    data = list(batches(kind, 4, batch=2 * world))

    def step(module, optimizer, x, y):
        loss = loss_fn(kind, module(local(x, rank, world)), local(y, rank, world))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    for x, y in data[:2]:
        step(tm, opt, x, y)
    full = td.get_model_state_dict(tm, rank0_only=True, cpu_offload=True)
    if rank == 0:
        assert set(full) == set(reference.state_dict()), (set(full), set(reference.state_dict()))
        for k, v in reference.state_dict().items():
            assert full[k].shape == v.shape, (k, full[k].shape, v.shape)
        torch.save(full, path)
    else:
        assert full == {}
    sharded = td.get_model_state_dict(tm, full_state_dict=False)
    dist.barrier()

    continued = [step(tm, opt, x, y) for x, y in data[2:]]

    # resume from the full checkpoint in a fresh module
    torch.manual_seed(123)  # different initial weights: loading must overwrite all of them
    fresh = tiny_gpt() if kind != "mlp" else mlp()
    fresh_tm = thunder.jit(wrap(fresh, mode))
    td.load_model_state_dict(fresh_tm, torch.load(path))
    fresh_opt = make_optimizer("sgd", fresh_tm.parameters())
    resumed = [step(fresh_tm, fresh_opt, x, y) for x, y in data[2:]]
    for a, b in zip(continued, resumed):
        torch.testing.assert_close(a, b, **TOL)

    # the sharded state dict loads back into a sharded module
    td.load_model_state_dict(fresh_tm, sharded, full_state_dict=False)
    reloaded = td.get_model_state_dict(fresh_tm)
    for n, v in sharded.items():
        if isinstance(v, DTensor):  # fsdp: DTensor shards with the full shape
            assert v.shape == reference.state_dict()[n].shape, (n, v.shape)
            v = v.full_tensor()
        torch.testing.assert_close(reloaded[n], v, msg=n)
    # a full state dict loads into a plain module and gives the thunder module's outputs
    reference.load_state_dict(td.get_model_state_dict(fresh_tm))
    x, _ = data[0]
    torch.testing.assert_close(fresh_tm(local(x, rank, world)), reference(local(x, rank, world)), **TOL)


def unjitted_ddp(rank: int, world: int, usage: str) -> None:
    """``ddp(model)`` run without thunder.jit (eager, torch.compile, ThunderFX) averages gradients like eager on the full batch."""
    model = make_model("mlp")
    reference = copy.deepcopy(model)
    module = td.ddp(model)
    if usage == "eager":
        run = module
    elif usage == "compile":
        run = torch.compile(module, backend="aot_eager")
    else:
        run = thunder.dynamo.thunderfx(module)
    opt = make_optimizer("sgd", module.parameters())
    ref_opt = make_optimizer("sgd", reference.parameters())
    micro = list(batches("mlp", 4, batch=2 * world))
    for x, y in micro[:2]:  # plain steps
        loss_fn("mlp", run(local(x, rank, world)), local(y, rank, world)).backward()
        opt.step()
        opt.zero_grad()
        loss_fn("mlp", reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    # gradient accumulation: the module's no_sync() keeps them local, the next backward averages the sum
    with module.no_sync():
        x, y = micro[2]
        loss_fn("mlp", run(local(x, rank, world)), local(y, rank, world)).backward()
    if world > 1:
        g = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
        others = [torch.empty_like(g) for _ in range(world)]
        dist.all_gather(others, g)
        assert not torch.allclose(others[0], others[1]), "no_sync still synchronised the gradients"
    x, y = micro[3]
    loss_fn("mlp", run(local(x, rank, world)), local(y, rank, world)).backward()
    opt.step()
    for x, y in micro[2:]:
        loss_fn("mlp", reference(x), y).backward()
    ref_opt.step()
    check_close(dict(module.named_parameters()), reference, f"ddp without thunder.jit ({usage})", TOL)


def bn_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def buffers(rank: int, world: int, mode: str, usage: str = "jit") -> None:
    """BatchNorm running statistics stay equal across ranks, as under PyTorch's DDP (broadcast_buffers=True)."""
    from torch.nn.parallel import DistributedDataParallel

    model = bn_model()
    reference = DistributedDataParallel(copy.deepcopy(model))
    module = wrap(model, mode)
    run = thunder.jit(module) if usage == "jit" else module
    opt = make_optimizer("sgd", run.parameters())
    ref_opt = make_optimizer("sgd", reference.parameters())
    for x, y in batches("mlp", 3, batch=4 * world):
        # each rank sees different data: without broadcasting, its running statistics would differ
        xl, yl = local(x, rank, world), local(y, rank, world)
        loss_fn("mlp", run(xl), yl).backward()
        opt.step()
        opt.zero_grad()
        loss_fn("mlp", reference(xl), yl).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    with torch.no_grad():  # the statistics the next forward uses are rank 0's on every rank (and torch DDP's)
        run(torch.zeros(2, 6))
        reference(torch.zeros(2, 6))
    for (name, b), (_, ref) in zip(model.named_buffers(), reference.module.named_buffers()):
        torch.testing.assert_close(b, ref, **TOL, msg=lambda m, name=name: f"buffer {name}: {m}")
        gathered = [torch.empty_like(b) for _ in range(world)]
        dist.all_gather(gathered, b)
        assert all(torch.equal(gathered[0], g) for g in gathered), f"buffer {name} differs across ranks"
    check_close(full_params(run) if mode != "ddp" else dict(model.named_parameters()), reference.module, "bn", TOL)


DCP_BATCH = 8  # divisible by every world size the checkpoint is resumed at


def dcp_data(first: int = 0, last: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches ``first:last`` of the 4 full batches the checkpoint scenarios train on."""
    return list(batches("mlp", 4, batch=DCP_BATCH))[first:last]


def train_steps(module, opt, data, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """One optimizer step per batch on this rank's rows; each step's loss averaged over the ranks (= the full-batch loss)."""
    losses = []
    dev = next(module.parameters()).device  # cuda:LOCAL_RANK with NCCL
    for x, y in data:
        loss = loss_fn("mlp", module(local(x, rank, world).to(dev)), local(y, rank, world).to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
        losses.append(mean.cpu() / world)
    return losses


def eager_run(opt_name: str, steps: int) -> tuple[torch.nn.Module, dict, list[torch.Tensor]]:
    """Uninterrupted single-process training on the full batches: the model and the optimizer state (by parameter name)
    after ``steps``, and every step's loss."""
    model = make_model("mlp")
    opt = make_optimizer(opt_name, model.parameters())
    losses = train_steps(model, opt, dcp_data(last=steps))
    snapshot = copy.deepcopy(model)
    names = [n for n, _ in model.named_parameters()]
    state = {names[k]: {n: v.clone() for n, v in s.items()} for k, s in opt.state_dict()["state"].items()}
    losses += train_steps(model, opt, dcp_data(first=steps))
    return snapshot, state, losses


def dcp_save(rank: int, world: int, mode: str, path: str) -> None:
    """Two steps, then torch.distributed.checkpoint saves ``module.state_dict()`` (DTensor shards); torch's state-dict API sees full shapes."""
    tm = thunder.jit(wrap(make_model("mlp"), mode))
    train_steps(tm, make_optimizer("sgd", tm.parameters()), dcp_data(last=2), rank, world)
    expected, _, losses = eager_run("sgd", 2)
    sd = tm.state_dict()
    for name, p in expected.named_parameters():
        assert isinstance(sd[name], DTensor) and sd[name].shape == p.shape, (name, type(sd[name]), sd[name].shape)
    dcp.save(sd, checkpoint_id=path)
    # torch's own state-dict API: full tensors with the full shapes and values
    offloaded = get_model_state_dict(tm, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:  # with cpu_offload, torch gives the full state dict to rank 0 only
        check_close(offloaded, expected, "get_model_state_dict(full_state_dict=True, cpu_offload=True)", TOL)
    else:
        assert offloaded == {}, list(offloaded)
    full = get_model_state_dict(tm, options=StateDictOptions(full_state_dict=True))
    check_close(full, expected, "get_model_state_dict(full_state_dict=True)", TOL)
    sharded = get_model_state_dict(tm)
    for name, p in expected.named_parameters():
        assert isinstance(sharded[name], DTensor) and sharded[name].shape == p.shape, name
    # set_model_state_dict with a full state dict shards it again
    set_model_state_dict(tm, {k: v.clone() for k, v in full.items()}, options=StateDictOptions(full_state_dict=True))
    check_close(td.get_model_state_dict(tm), expected, "set_model_state_dict(full)", TOL)
    resumed = train_steps(tm, make_optimizer("sgd", tm.parameters()), dcp_data(first=2), rank, world)
    for step, (a, b) in enumerate(zip(resumed, losses[2:]), 3):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, step=step: f"uninterrupted step {step}: {m}")


def dcp_load(rank: int, world: int, mode: str, path: str) -> None:
    """A fresh module (other weights) loads the checkpoint with DCP, at any world size; the next losses equal the uninterrupted run."""
    torch.manual_seed(123)
    if mode == "plain":
        module = mlp()
    else:
        module = thunder.jit(wrap(mlp(), mode, "layer"))
    sd = module.state_dict()
    dcp.load(sd, checkpoint_id=path)
    module.load_state_dict(sd)
    expected, _, losses = eager_run("sgd", 2)
    params = dict(module.named_parameters()) if mode == "plain" else full_params(module)
    check_close(params, expected, f"loaded at world size {world}", TOL)
    if mode == "plain":
        return
    resumed = train_steps(module, make_optimizer("sgd", module.parameters()), dcp_data(first=2), rank, world)
    for step, (a, b) in enumerate(zip(resumed, losses[2:]), 3):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, step=step: f"resumed step {step}: {m}")


def check_optimizer_state(osd: dict, expected: dict, what: str, tols: dict | None = None) -> None:
    """``osd``'s per-parameter state (DTensors gathered) equals ``expected`` (by parameter name), per key within ``tols``."""
    assert set(osd["state"]) == set(expected), (what, set(osd["state"]), set(expected))
    for name, per_param in expected.items():
        for key, value in per_param.items():
            got = osd["state"][name][key]
            got = got.full_tensor() if isinstance(got, DTensor) else got
            assert got.shape == value.shape, (what, name, key, got.shape, value.shape)
            tol = (tols or {}).get(key, TOL)
            torch.testing.assert_close(
                got.cpu(), value.cpu(), **tol, msg=lambda m, n=name, k=key: f"{what}: {n}.{k}: {m}"
            )


def optim_save(rank: int, world: int, path: str) -> None:
    """Adam over fsdp shards: torch's get/set_optimizer_state_dict give full shapes; DCP saves model and optimizer."""
    tm = thunder.jit(td.fsdp(make_model("mlp")))
    opt = make_optimizer("adam", tm.parameters())
    train_steps(tm, opt, dcp_data(last=2), rank, world)
    _, expected, losses = eager_run("adam", 2)
    full = get_optimizer_state_dict(tm, opt, options=StateDictOptions(full_state_dict=True))
    check_optimizer_state(full, expected, "get_optimizer_state_dict(full_state_dict=True)")
    offloaded = get_optimizer_state_dict(tm, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        check_optimizer_state(offloaded, expected, "get_optimizer_state_dict(full_state_dict=True, cpu_offload=True)")
        assert all(v.device.type == "cpu" for s in offloaded["state"].values() for v in s.values())
    else:
        assert offloaded == {} or offloaded["state"] == {}, offloaded
    sharded = get_optimizer_state_dict(tm, opt)
    for name in expected:
        assert isinstance(sharded["state"][name]["exp_avg"], DTensor), (name, type(sharded["state"][name]["exp_avg"]))
    check_optimizer_state(sharded, expected, "get_optimizer_state_dict()")
    # the optimizer's own state stays shard-shaped (the DTensors are only in the state dict)
    assert all(s["exp_avg"].shape == p.shape for p, s in opt.state.items()), "state_dict() changed the live state"
    dcp.save({"model": get_model_state_dict(tm), "optim": sharded}, checkpoint_id=path)
    set_optimizer_state_dict(tm, opt, full, options=StateDictOptions(full_state_dict=True))
    check_optimizer_state(get_optimizer_state_dict(tm, opt), expected, "after set_optimizer_state_dict(full)")
    resumed = train_steps(tm, opt, dcp_data(first=2), rank, world)
    for step, (a, b) in enumerate(zip(resumed, losses[2:]), 3):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, step=step: f"uninterrupted step {step}: {m}")


def optim_load(rank: int, world: int, path: str) -> None:
    """A fresh fsdp module and Adam load model and optimizer state with DCP at any world size; losses equal the uninterrupted run."""
    torch.manual_seed(123)
    tm = thunder.jit(td.fsdp(mlp(), sharding_strategy="zero3", bucketing_strategy="layer"))
    opt = make_optimizer("adam", tm.parameters())
    sd = {"model": get_model_state_dict(tm), "optim": get_optimizer_state_dict(tm, opt)}
    dcp.load(sd, checkpoint_id=path)
    set_model_state_dict(tm, sd["model"])
    set_optimizer_state_dict(tm, opt, sd["optim"])
    _, expected, losses = eager_run("adam", 2)
    check_optimizer_state(get_optimizer_state_dict(tm, opt), expected, f"loaded at world size {world}")
    resumed = train_steps(tm, opt, dcp_data(first=2), rank, world)
    for step, (a, b) in enumerate(zip(resumed, losses[2:]), 3):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, step=step: f"resumed step {step} at world {world}: {m}")


def misuse(rank: int, world: int) -> None:
    """Clear errors for parameters on different devices, unknown strategies and double preparation."""
    import pytest

    model = mlp()
    model[0].to("meta")
    with pytest.raises(ValueError, match="one device"):
        td.ddp(model)
    with pytest.raises(ValueError, match="sharding_strategy"):
        td.fsdp(mlp(), sharding_strategy="zero5")
    prepared = td.ddp(mlp())
    with pytest.raises(ValueError, match="already prepared"):
        td.fsdp(prepared)
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        td.ddp(torch.nn.parallel.DistributedDataParallel(mlp()))


def interop(rank: int, world: int) -> None:
    """thunder.jit of a module PyTorch already parallelised (DTensor parameters, torch DDP) is a clear error, not a crash."""
    import pytest
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    sharded = mlp()
    fully_shard(sharded, mesh=mesh)
    with pytest.raises(TypeError, match=r"parameter '0\.weight' is a DTensor.*thunder\.distributed\.fsdp"):
        thunder.jit(sharded)
    tensor_parallel = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with pytest.raises(TypeError, match=r"parameter '0\.weight' is a DTensor"):
        thunder.jit(tensor_parallel)
    wrapped = torch.nn.parallel.DistributedDataParallel(mlp())
    with pytest.raises(TypeError, match=r"DistributedDataParallel is not supported.*thunder\.distributed\.ddp"):
        thunder.jit(wrapped)
    # the plain module under thunder's own fsdp still trains after DTensor was imported
    tm = thunder.jit(td.fsdp(mlp()))
    x = torch.randn(2, 6)
    tm(x).sum().backward()
    assert all(p.grad is not None for p in tm.parameters())


class LiveStorageBytes(TorchDispatchMode):
    """The peak bytes of tensor storage allocated by operations run under it and still alive (checked after each operation)."""

    def __init__(self):
        super().__init__()
        self.storages: list[tuple[StorageWeakRef, int]] = []
        self.seen: set[int] = set()
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            a.untyped_storage().data_ptr() for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr == 0 or ptr in inputs:
                continue
            self.storages = [(ref, n) for ref, n in self.storages if not ref.expired()]
            if all(ref.cdata != storage._cdata for ref, _ in self.storages):
                self.storages.append((StorageWeakRef(storage), storage.nbytes()))
        self.storages = [(ref, n) for ref, n in self.storages if not ref.expired()]
        self.peak = max(self.peak, sum(n for _, n in self.storages))
        return out


def deep_mlp() -> torch.nn.Module:
    layers = [torch.nn.Linear(6, 64), torch.nn.Tanh()]
    for _ in range(6):
        layers += [torch.nn.Linear(64, 64), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(64, 3))


def normal_init(m: torch.nn.Module) -> None:
    for p in m.parameters(recurse=False):
        torch.nn.init.normal_(p, std=0.1)


def deferred_init(rank: int, world: int, init: str) -> None:
    """fsdp of a model built on the meta device: each rank's peak stays below the full model; it trains like one built on one process."""
    import pytest

    init_fn = normal_init if init == "init_fn" else None
    torch.manual_seed(7)  # the reference: built and initialised on one process (on the device: its random generator)
    with torch.device(DEVICE_TYPE):
        reference = deep_mlp()
    if init_fn is not None:
        torch.manual_seed(7)
        for m in reference.modules():
            init_fn(m)
    full_bytes = sum(p.numel() * p.element_size() for p in reference.parameters())

    with torch.device("meta"):
        model = deep_mlp()
    torch.manual_seed(7 if rank == 0 else 1000 + rank)  # the other ranks differ: rank 0's random state is shared
    with LiveStorageBytes() as memory:
        td.fsdp(model, param_init_fn=init_fn)
    shard_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert all(not t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert memory.peak >= shard_bytes, (memory.peak, shard_bytes)  # the measurement sees the shards
    if world > 1:
        assert memory.peak < full_bytes, f"peak {memory.peak} bytes at init, the full model has {full_bytes}"
    tm = thunder.jit(model)
    check_close(full_params(tm), reference, f"deferred init ({init})", dict(rtol=0, atol=0))
    opt, ref_opt = make_optimizer("adam", tm.parameters()), make_optimizer("adam", reference.parameters())
    dev = next(tm.parameters()).device
    for x, y in batches("mlp", 3, batch=2 * world):
        loss = loss_fn("mlp", tm(local(x, rank, world).to(dev)), local(y, rank, world).to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = loss_fn("mlp", reference(x.to(dev)), y.to(dev))
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        torch.testing.assert_close(mean.cpu() / world, ref_loss.detach().cpu(), **TOL)
    check_close(full_params(tm), reference, f"deferred init ({init}) after training", TOL)

    class NoReset(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(4))

    with torch.device("meta"):
        no_reset = torch.nn.Sequential(torch.nn.Linear(4, 4), NoReset())
    with pytest.raises(ValueError, match=r"submodule '1' \(NoReset\) has tensors on the meta device.*param_init_fn"):
        td.fsdp(no_reset)
    with pytest.raises(ValueError, match="param_init_fn is for a model built on the meta device"):
        td.fsdp(mlp(), param_init_fn=normal_init)


def mixed_precision(rank: int, world: int, mode: str, bucketing: str) -> None:
    """fsdp with MixedPrecisionPolicy(bf16 params, fp32 reduction) trains like PyTorch's fully_shard with the same policy."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = make_model("mlp")
    reference = copy.deepcopy(model)
    mesh = init_device_mesh(DEVICE_TYPE, (world,))
    for layer in reference:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(reference, mesh=mesh, mp_policy=policy)
    strategy = {"zero2": td.FSDPType.ZERO2, "zero3": td.FSDPType.ZERO3}[mode]
    tm = thunder.jit(td.fsdp(model, sharding_strategy=strategy, bucketing_strategy=bucketing, mixed_precision=policy))
    opt, ref_opt = make_optimizer("adam", tm.parameters()), make_optimizer("adam", reference.parameters())
    dev = next(tm.parameters()).device
    for x, y in batches("mlp", 3, batch=2 * world):
        x, y = local(x, rank, world).to(dev), local(y, rank, world).to(dev)
        out = tm(x)
        ref_out = reference(x)
        assert out.dtype == ref_out.dtype == torch.bfloat16, (out.dtype, ref_out.dtype)
        loss = loss_fn("mlp", out.float(), y)
        ref_loss = loss_fn("mlp", ref_out.float(), y)
        torch.testing.assert_close(loss, ref_loss, **BF16_TOL)
        loss.backward()
        ref_loss.backward()
        for p, ref in zip(tm.parameters(), reference.parameters()):
            assert p.dtype == p.grad.dtype == torch.float32, (p.dtype, p.grad.dtype)  # the optimizer's precision
            torch.testing.assert_close(p.grad[: ref.grad.to_local().shape[0]], ref.grad.to_local(), **BF16_TOL)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    forward, backward = str(thunder.last_traces(tm)[-1]), str(thunder.last_backward_traces(tm)[-1])
    assert "bf16" in forward.split("all_gather(")[1].split("\n")[0], forward  # gathered in bf16
    assert "f32" in backward.split("reduce_scatter(")[1].split("\n")[0], backward  # reduced in fp32
    check_close(full_params(tm), _full_module(reference), f"mixed precision {mode} {bucketing}", BF16_TOL)

    with_policy_of_ints = type("Policy", (), {"param_dtype": torch.int8, "reduce_dtype": None})
    import pytest

    with pytest.raises(TypeError, match="mixed_precision must be a torch.distributed.fsdp.MixedPrecisionPolicy"):
        td.fsdp(mlp(), mixed_precision=with_policy_of_ints())
    with pytest.raises(TypeError, match=r"mixed_precision.param_dtype must be a floating dtype"):
        td.fsdp(mlp(), mixed_precision=MixedPrecisionPolicy(param_dtype=torch.int8))


def _full_module(sharded: torch.nn.Module) -> torch.nn.Module:
    full = mlp()
    full.load_state_dict({k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in sharded.state_dict().items()})
    return full


def expected_tp_slice(name: str, full: torch.Tensor, config, rank: int, size: int) -> torch.Tensor:
    """This rank's slice of a LitGPT parameter (or of its gradient) under litgpt_plan, cut by hand from the full tensor."""
    if name == "transformer.wte.weight" or name.endswith(("mlp.fc_1.weight", "mlp.fc_2.weight", "mlp.fc.weight")):
        return full.chunk(size, 0)[rank]
    if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
        return full.chunk(size, 1)[rank]
    if name.endswith("attn.qkv.weight"):  # queries of every head, then keys, then values of every group
        q_rows, kv_rows = config.n_head * config.head_size, config.n_query_groups * config.head_size
        q, k, v = full.split([q_rows, kv_rows, kv_rows])
        return torch.cat([q.chunk(size)[rank], k.chunk(size)[rank], v.chunk(size)[rank]])
    return full


def tensor_parallel(rank: int, world: int, layout: str, path: str) -> None:
    """LitGPT under tensor_parallel(litgpt_plan) (TP = 2), alone or with fsdp on a 2-D mesh (FSDP 2 x TP 2): AdamW losses
    and every parameter's gradient equal single-process eager on the full batch."""
    from torch.distributed.device_mesh import init_device_mesh

    from thunder_distributed.fsdp import shard_tensor

    tp = 2
    dp = world // tp
    mesh = init_device_mesh(DEVICE_TYPE, (dp, tp), mesh_dim_names=("dp", "tp"))
    dp_rank, tp_rank = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
    model = make_model("gpt")
    reference = copy.deepcopy(model)
    module = td.tensor_parallel(model, td.litgpt_plan(model), mesh["tp"])
    if layout == "fsdp":
        module = td.fsdp(module, process_group=mesh["dp"].get_group())
    tm = thunder.jit(module)
    opt = torch.optim.AdamW(tm.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    dev = next(tm.parameters()).device
    names = [n for n, _ in reference.named_parameters()]
    assert [n for n, _ in tm._model.named_parameters()] == names
    for step, (x, y) in enumerate(batches("gpt", 3, batch=2 * dp)):
        loss = loss_fn("gpt", tm(local(x, dp_rank, dp).to(dev)), local(y, dp_rank, dp).to(dev))
        loss.backward()
        ref_loss = loss_fn("gpt", reference(x), y)
        ref_loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=mesh["dp"].get_group())
        torch.testing.assert_close(mean.cpu() / dp, ref_loss.detach(), **GPT_TOL, msg=lambda m: f"step {step}: {m}")
        for (name, p), ref in zip(tm._model.named_parameters(), reference.parameters()):
            expected = expected_tp_slice(name, ref.grad, reference.config, tp_rank, tp)
            if layout == "fsdp":
                expected = shard_tensor(expected, dp_rank, dp)[0]
            assert p.shape == expected.shape, (name, p.shape, expected.shape)
            torch.testing.assert_close(
                p.grad.cpu(), expected, **GPT_TOL, msg=lambda m, n=name: f"step {step}: {n}: {m}"
            )
        opt.step()
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
    # the split weights are this rank's slices of eager's after training (AdamW's step is about lr = 1e-2 wherever a
    # gradient is tiny, whatever its rounding: an element may differ by a few 1e-4 after 3 steps)
    for (name, p), ref in zip(tm._model.named_parameters(), reference.parameters()):
        expected = expected_tp_slice(name, ref.detach(), reference.config, tp_rank, tp)
        if layout == "fsdp":
            expected = shard_tensor(expected, dp_rank, dp)[0]
        torch.testing.assert_close(p.detach().cpu(), expected, rtol=1e-3, atol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    split = [n for n, p in tm._model.named_parameters() if p.numel() < dict(reference.named_parameters())[n].numel()]
    assert "transformer.h.0.attn.qkv.weight" in split and "transformer.wte.weight" in split, split
    forward, backward = str(thunder.last_traces(tm)[-1]), str(thunder.last_backward_traces(tm)[-1])
    assert "tensor_parallel_copy(" in forward and "tensor_parallel_reduce(" in forward, forward
    assert "tensor_parallel_reduce(" in backward, backward  # the gradient of each copy (colwise input) is summed

    # the state dict: split parameters at their full shapes with eager's values (DTensors; LitGPT's qkv, which no
    # DTensor placement describes, as the full tensor); DCP saves it and a fresh split model and a plain one load it
    from torch.distributed.tensor import Shard

    sd = tm.state_dict()
    for name, ref in reference.named_parameters():
        value = sd[name]
        if name in split and not name.endswith("qkv.weight"):
            assert isinstance(value, DTensor), (name, type(value))
            assert value.placements[0] == Shard(1 if name.endswith("proj.weight") else 0), (name, value.placements)
        full = value.full_tensor() if isinstance(value, DTensor) else value
        torch.testing.assert_close(full.cpu(), ref.detach(), rtol=1e-3, atol=1e-3, msg=lambda m, n=name: f"{n}: {m}")
    # the optimizer's state likewise: Adam's moments at full shapes, eager's values
    full_options = StateDictOptions(full_state_dict=True)
    expected_state = {n: ref_opt.state[p] for n, p in reference.named_parameters()}
    # (Adam's moments of gradients equal to eager's within GPT_TOL: exp_avg ~ 1e-3, exp_avg_sq ~ 1e-6)
    tols = {"exp_avg": dict(rtol=1e-3, atol=1e-5), "exp_avg_sq": dict(rtol=1e-2, atol=1e-9)}
    check_optimizer_state(get_optimizer_state_dict(tm, opt, options=full_options), expected_state, "TP optimizer", tols)
    dcp.save({"model": sd, "optim": get_optimizer_state_dict(tm, opt)}, checkpoint_id=path)
    torch.manual_seed(123)  # other weights: loading must overwrite all of them
    fresh = tiny_gpt()
    fresh_module = td.tensor_parallel(fresh, td.litgpt_plan(fresh), mesh["tp"])
    if layout == "fsdp":
        fresh_module = td.fsdp(fresh_module, process_group=mesh["dp"].get_group())
    fresh_tm = thunder.jit(fresh_module)
    fresh_opt = torch.optim.AdamW(fresh_tm.parameters(), lr=1e-2)
    loaded = {"model": fresh_tm.state_dict(), "optim": get_optimizer_state_dict(fresh_tm, fresh_opt)}
    dcp.load(loaded, checkpoint_id=path)
    fresh_tm.load_state_dict(loaded["model"])
    set_optimizer_state_dict(fresh_tm, fresh_opt, loaded["optim"])
    for (name, p), q in zip(tm._model.named_parameters(), fresh_tm.parameters()):
        assert torch.equal(p, q), f"{name} differs after the DCP round trip"
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][key], fresh_opt.state[q][key]), f"{name} {key} differs after the round trip"
    plain = tiny_gpt()
    plain_sd = {"model": plain.state_dict()}
    dcp.load(plain_sd, checkpoint_id=path)
    plain.load_state_dict(plain_sd["model"])
    check_close(
        dict(plain.named_parameters()),
        reference,
        "the TP checkpoint loaded into a plain model",
        dict(rtol=1e-3, atol=1e-3),
    )


def tensor_parallel_checks(rank: int, world: int) -> None:
    """tensor_parallel without thunder.jit gives eager's loss and gradients; misuse is a clear error naming the entry."""
    import pytest

    model = make_model("gpt")
    reference = copy.deepcopy(model)
    module = td.tensor_parallel(model, td.litgpt_plan(model))
    x, y = next(batches("gpt", 1, batch=2))
    dev = next(module.parameters()).device
    loss = loss_fn("gpt", module(x.to(dev)), y.to(dev))
    loss.backward()
    ref_loss = loss_fn("gpt", reference(x), y)
    ref_loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), ref_loss.detach(), **GPT_TOL)
    for (name, p), ref in zip(module.named_parameters(), reference.parameters()):
        expected = expected_tp_slice(name, ref.grad, reference.config, rank, world)
        torch.testing.assert_close(p.grad.cpu(), expected, **GPT_TOL, msg=lambda m, n=name: f"eager TP: {n}: {m}")

    with pytest.raises(ValueError, match=r"plan\['0'\] = 'diagonal' is not one of colwise, rowwise, vocab, qkv"):
        td.tensor_parallel(mlp(), {"0": "diagonal"})
    with pytest.raises(ValueError, match=r"plan entry 'encoder\.\*' names no submodule"):
        td.tensor_parallel(mlp(), {"encoder.*": "colwise"})
    with pytest.raises(TypeError, match=r"'1' \(Tanh\): style 'colwise' is for torch.nn.Linear"):
        td.tensor_parallel(mlp(), {"1": "colwise"})
    with pytest.raises(
        ValueError, match=r"'0' \(Linear\): size 7 along dim 0 is not divisible by the tensor-parallel size"
    ):
        td.tensor_parallel(mlp(), {"0": "colwise"})  # 7 output features
    with pytest.raises(TypeError, match=r"'2' \(Linear\): style 'qkv' is for LitGPT's CausalSelfAttention.qkv"):
        td.tensor_parallel(mlp(), {"2": "qkv"})
    with pytest.raises(TypeError, match=r"apply it before ddp/fsdp"):
        td.tensor_parallel(td.fsdp(mlp()), {"2": "colwise"})
    with pytest.raises(TypeError, match=r"before thunder.jit"):
        td.tensor_parallel(thunder.jit(mlp()), {"2": "colwise"})
    with torch.device("meta"):
        on_meta = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(
        ValueError, match="meta device; deferred initialisation is not supported with tensor parallelism"
    ):
        td.tensor_parallel(on_meta, {"0": "colwise"})
    with pytest.raises(ValueError, match="2-D DeviceMesh"):
        from torch.distributed.device_mesh import init_device_mesh

        td.tensor_parallel(mlp(), {"2": "colwise"}, init_device_mesh(DEVICE_TYPE, (1, world)))


SCENARIOS = {
    "tensor_parallel": tensor_parallel,
    "tensor_parallel_checks": tensor_parallel_checks,
    "optim_save": optim_save,
    "optim_load": optim_load,
    "mixed_precision": mixed_precision,
    "deferred_init": deferred_init,
    "interop": interop,
    "unjitted_ddp": unjitted_ddp,
    "buffers": buffers,
    "dcp_save": dcp_save,
    "dcp_load": dcp_load,
    "train": train,
    "no_sync": no_sync,
    "checkpoint": checkpoint,
    "misuse": misuse,
}


def raise_on(rank: int, world: int, failing: str) -> None:
    """Rank ``failing`` raises; the others enter a collective it never joins (they must not hang)."""
    if rank == int(failing):
        raise RuntimeError(f"rank {rank} failed on purpose")
    dist.all_reduce(torch.ones(1))
    dist.barrier()


SCENARIOS["raise_on"] = raise_on


def main() -> None:
    """``workers.py RANK WORLD PORT SPEC...``, or ``workers.py env SPEC...`` under torchrun (RANK, WORLD_SIZE... from it).

    Each SPEC is ``scenario:arg:arg...``, run in order.
    """
    from datetime import timedelta

    backend = BACKEND
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if sys.argv[1] == "env":
        specs = sys.argv[2:]
        # a rank left waiting for a dead peer fails after this instead of hanging
        dist.init_process_group(backend, timeout=timedelta(seconds=30))
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world, port, *specs = sys.argv[1:]
        rank, world = int(rank), int(world)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for spec in specs:
            name, *args = spec.split(":")
            print(f"rank {rank}: {spec}", flush=True)
            SCENARIOS[name](rank, world, *args)
            dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
