"""Models that need graph breaks, trained through ``torch.compile(model, backend="thunder")``.

Used by ``thunderfx.py --models``. Each model is built from a tiny config with random weights
(nothing is downloaded; dropout off) and trained for a few steps on one batch (forward, loss,
backward; no optimizer update, so every step computes the same thing). For each model it reports:

- ``compiles_first_call`` / ``compiles_after_warmup`` / ``compiles_steady``: ``thunder.compiler.compile_entry``
  calls after the first step, after the warm-up steps and during as many further ThunderFX steps, run
  before any other backend compiles in the process (0 = no recompilation in a steady state; the number
  of Thunder regions Dynamo handed over is beside it);
- ``compiles_while_timed``: the same count over the round-robin timed steps. Dynamo keeps one cache
  per code object for all the backends of a process, so ThunderFX can compile again there when another
  backend's compile added the only entry of a frame it reaches (transformers 5's MoE models: Dynamo
  reports a ``BACKEND_MATCH`` failure): a cost of comparing backends in one process, not of a
  steady state, so it is reported, not failed on;
- ``first_call_s``: the first step of the freshly compiled model, compilation included;
- ``step_median_s`` of eager, Dynamo alone (``backend="eager"``: what graph breaks cost before any
  backend runs), ThunderFX and (unless ``--no-inductor``) ``torch.compile`` with Inductor, timed
  round-robin, and the ratios ``thunderfx_over_eager`` / ``dynamo_eager_over_eager`` /
  ``thunderfx_over_inductor``; ``--clock cpu`` times the process's CPU time instead of wall time
  (steadier on a shared machine, for one-thread runs: ``OMP_NUM_THREADS=1``);
- ``max_abs_diff_loss`` / ``max_abs_diff_grad``: ThunderFX's first step against eager.

``--smoke`` runs the smallest sizes and few steps, and exits with status 1 when a model fails,
differs from eager or compiles in a steady-state step (what CI checks); the figures are printed
either way. ``thunder_jit`` records what ``thunder.jit`` says about the same model.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch

# ---------------------------------------------------------------- models: (model, loss(call) -> tensor)


def _hf_causal_lm(config_name: str, model_name: str, **extra) -> Callable:
    def build(smoke: bool):
        import transformers

        config = getattr(transformers, config_name)(
            vocab_size=128,
            hidden_size=32 if smoke else 64,
            intermediate_size=64 if smoke else 128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            **extra,
        )
        model = getattr(transformers, model_name)(config)
        ids = torch.randint(0, 128, (2, 16 if smoke else 64))
        return model, lambda call: call(input_ids=ids, labels=ids).loss

    return build


def _longformer(smoke: bool):
    import transformers

    config = transformers.LongformerConfig(
        hidden_size=32 if smoke else 64,
        num_hidden_layers=1 if smoke else 2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=100,
        attention_window=[4] * (1 if smoke else 2),
        max_position_embeddings=140,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.LongformerForMaskedLM(config)
    ids = torch.randint(0, 100, (2, 16 if smoke else 64))
    return model, lambda call: call(input_ids=ids, labels=ids).loss


def _electra(smoke: bool):
    import transformers

    config = transformers.ElectraConfig(
        vocab_size=100,
        embedding_size=32,
        hidden_size=32 if smoke else 64,
        num_hidden_layers=1 if smoke else 2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.ElectraForPreTraining(config)
    ids = torch.randint(0, 100, (2, 16 if smoke else 64))
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # padding: the loss takes the unpadded positions with a boolean mask
    labels = torch.randint(0, 2, ids.shape)
    return model, lambda call: call(input_ids=ids, attention_mask=mask, labels=labels).loss


def _litgpt_mixtral(smoke: bool):
    from litgpt import GPT, Config

    config = Config(
        block_size=64,
        vocab_size=128,
        padded_vocab_size=128,
        n_layer=2,
        n_head=4,
        n_embd=32 if smoke else 64,
        n_query_groups=2,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMoE",
        intermediate_size=48 if smoke else 96,
        n_expert=4,
        n_expert_per_token=2,
    )
    model = GPT(config)
    ids = torch.randint(0, 128, (2, 16 if smoke else 64))

    def loss(call):
        logits = call(ids)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())

    return model, loss


MODELS: dict[str, Callable] = {
    "llama": _hf_causal_lm("LlamaConfig", "LlamaForCausalLM"),
    "mixtral": _hf_causal_lm("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": _hf_causal_lm(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
    ),
    "longformer": _longformer,
    "electra": _electra,
    "litgpt_mixtral": _litgpt_mixtral,
}

# ---------------------------------------------------------------- measuring


class _CompileCounter:
    """Counts ``thunder.compiler.compile_entry`` calls (one per program Thunder compiles)."""

    def __init__(self):
        import thunder.compiler

        self.module = thunder.compiler
        self.original = thunder.compiler.compile_entry
        self.count = 0

    def __enter__(self):
        def counting(*args, **kwargs):
            self.count += 1
            return self.original(*args, **kwargs)

        self.module.compile_entry = counting
        return self

    def __exit__(self, *exc):
        self.module.compile_entry = self.original
        return False


def _step(model, call, loss_fn):
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(call)
    loss.backward()
    return loss.detach(), [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def _max_diff(a, b) -> float:
    pairs = [(x, y) for x, y in zip(a, b) if x is not None or y is not None]
    if any(x is None or y is None for x, y in pairs):
        return float("inf")  # a gradient missing on one side
    return max((float((x - y).abs().max()) for x, y in pairs), default=0.0)


def run_model(name: str, *, smoke: bool, steps: int, warmup: int, inductor: bool, log, clock=time.perf_counter) -> dict:
    import thunder
    from thunder.dynamo import ThunderCompiler

    torch.manual_seed(0)
    base, loss_fn = MODELS[name](smoke)
    result: dict = {}
    try:
        _step(base, thunder.jit(copy.deepcopy(base)), loss_fn)
        result["thunder_jit"] = "ran"
    except Exception as e:
        result["thunder_jit"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"

    eager = copy.deepcopy(base)
    ref_loss, ref_grads = _step(eager, eager, loss_fn)
    variants = {"eager": (eager, eager)}

    torch._dynamo.reset()
    model = copy.deepcopy(base)
    backend = ThunderCompiler()
    compiled = torch.compile(model, backend=backend)
    with _CompileCounter() as counter:
        t0 = time.perf_counter()
        loss, grads = _step(model, compiled, loss_fn)
        result["first_call_s"] = round(time.perf_counter() - t0, 4)
        result["compiles_first_call"] = counter.count
        result["max_abs_diff_loss"] = float((loss - ref_loss).abs())
        result["max_abs_diff_grad"] = _max_diff(grads, ref_grads)
        for _ in range(warmup):
            _step(model, compiled, loss_fn)
        result["compiles_after_warmup"] = counter.count
        for _ in range(max(2, warmup)):  # steady: ThunderFX alone, as a user runs it
            _step(model, compiled, loss_fn)
        result["compiles_steady"] = counter.count - result["compiles_after_warmup"]
        variants["thunderfx"] = (model, compiled)
        dyn_model = copy.deepcopy(base)
        dyn = torch.compile(dyn_model, backend="eager")
        for _ in range(1 + warmup):
            _step(dyn_model, dyn, loss_fn)
        variants["dynamo_eager"] = (dyn_model, dyn)
        if inductor:
            ind_model = copy.deepcopy(base)
            ind = torch.compile(ind_model)
            for _ in range(1 + warmup):
                _step(ind_model, ind, loss_fn)
            variants["inductor"] = (ind_model, ind)
        before = counter.count
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(steps):
            for k, (m, call) in variants.items():
                t0 = clock()
                _step(m, call, loss_fn)
                times[k].append(clock() - t0)
        result["compiles_while_timed"] = counter.count - before
    regions = [r for info in backend.subgraph_infos for r in info.regions]
    result["dynamo_graphs"] = len(backend.subgraph_infos)
    result["regions"] = {k: sum(r.kind == k for r in regions) for k in ("thunder", "fallback", "python")}
    for k, ts in times.items():
        result[f"{k}_step_median_s"] = round(statistics.median(ts), 5)
    result["thunderfx_over_eager"] = round(result["thunderfx_step_median_s"] / result["eager_step_median_s"], 3)
    result["dynamo_eager_over_eager"] = round(result["dynamo_eager_step_median_s"] / result["eager_step_median_s"], 3)
    if inductor:
        result["thunderfx_over_inductor"] = round(
            result["thunderfx_step_median_s"] / result["inductor_step_median_s"], 3
        )
    log(f"{name}: {result}")
    return result


def smoke_failures(results: dict, tolerance: float = 1e-4) -> list[str]:
    """What ``--smoke`` fails on: a model that did not run, differs from eager, or recompiled when steady."""
    failed = []
    for name, r in results.items():
        if "skipped" in r:
            continue
        if "error" in r:
            failed.append(f"{name}: {r['error']}")
        elif r["compiles_steady"] != 0:
            failed.append(f"{name}: {r['compiles_steady']} Thunder compiles in steady-state steps")
        elif not (r["max_abs_diff_loss"] <= tolerance and r["max_abs_diff_grad"] <= tolerance):
            failed.append(f"{name}: differs from eager (loss {r['max_abs_diff_loss']}, grad {r['max_abs_diff_grad']})")
    return failed
