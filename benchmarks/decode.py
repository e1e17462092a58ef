"""Tokens per second of a greedy decode on the CPU: eager, thunder.jit, thunder.jit with thunder.discover()'s
executors (`--backends thunder-discover`) and torch.compile(dynamic=True).

--model litgpt (default): LitGPT's GPT with thunder.tests.litgpt_model's "llama-tiny" config (2 layers,
n_embd 256, 4 heads, 2 query groups; random weights) and its KV cache (fixed-size buffers updated in
place). --model hf-dynamic-cache: a Hugging Face LlamaForCausalLM of the same size with a DynamicCache,
whose tensors grow by one position per step (so every step has new sizes: the case for symbolic sizes).
A decode is a prefill of --prompt tokens followed by --tokens single-token steps (argmax), batch size 1,
under torch.no_grad. The first --tokens position is produced by the prefill.

For each backend:
  - `first_decode_s`: the first full decode on a fresh compiled model (includes compiling; thunder's
    fusion compiles in the background meanwhile and after it);
  - `fused_after_s` (thunder): seconds from the first decode's start until the fused programs are in place
    (thunder.wait_for_fusion), after which the warm decodes are timed;
  - `tokens_per_s`: --tokens divided by the median time of --repeats later decodes (warm);
  - `compiles`: programs compiled over all decodes (thunder: cache misses; torch.compile: graphs
    handed to Inductor by Dynamo);
  - `same_tokens_as_eager`: whether the generated tokens equal eager's.

    python benchmarks/decode.py
    python benchmarks/decode.py --tokens 32 --repeats 3 --backends eager thunder
    python benchmarks/decode.py --cache-length 4096 --backends eager thunder   # a server-sized KV cache

Prints exactly one JSON object on stdout; progress goes to stderr. litgpt is a test dependency of
thunder-core: python -m pip install -c constraints.txt litgpt==0.5.13
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch


def log(message: str) -> None:
    print(f"[decode] {message}", file=sys.stderr, flush=True)


def build_model(kind: str = "litgpt"):
    if kind == "hf-dynamic-cache":
        import transformers

        cfg = transformers.LlamaConfig(
            vocab_size=1024,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
        )
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(cfg).eval()
    try:
        from thunder.tests.litgpt_model import GPT, Config
    except ImportError as e:
        sys.exit(f"{os.path.basename(__file__)}: needs thunder and litgpt ({e})")
    torch.manual_seed(0)
    return GPT(Config.from_name("llama-tiny")).eval()


def decode_hf(model, prompt: torch.Tensor, tokens: int) -> torch.Tensor:
    """Greedy decode with a Hugging Face DynamicCache (its tensors grow by one position per step)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    out = []
    x = prompt
    with torch.no_grad():
        for _ in range(tokens):
            logits = model(input_ids=x, past_key_values=cache, use_cache=True).logits
            x = logits[:, -1].argmax(-1, keepdim=True)
            out.append(x)
    return torch.cat(out, 1)


def decode(model, raw_model, prompt: torch.Tensor, tokens: int, max_seq_length: int) -> torch.Tensor:
    """Greedy decode: prefill, then one token per step through the KV cache. Returns the new tokens.

    The cache is created once and zeroed for later decodes (re-creating it registers new
    submodules, which a compiled program guards against, as a generation server would not do)."""
    caches = [block.attn.kv_cache for block in raw_model.transformer.h]
    if any(c is None for c in caches):
        raw_model.set_kv_cache(batch_size=prompt.shape[0], max_seq_length=max_seq_length)
    else:
        for c in caches:
            c.reset_parameters()
    out = []
    x, pos = prompt, torch.arange(prompt.shape[1])
    with torch.no_grad():
        for _ in range(tokens):
            logits = model(x, input_pos=pos)
            x = logits[:, -1].argmax(-1, keepdim=True)
            out.append(x)
            pos = pos[-1:] + 1
    return torch.cat(out, 1)


def run_backend(name: str, args, prompt: torch.Tensor, expected: torch.Tensor | None) -> dict:
    raw = build_model(args.model)
    compiles = [0]
    if name == "eager":
        model = raw
    elif name == "thunder":
        import thunder

        model = thunder.jit(raw)
    elif name == "thunder-discover":
        import thunder

        model = thunder.jit(raw, executors=thunder.discover())
    elif name == "torch.compile":
        from torch._dynamo import reset
        from torch._inductor.compile_fx import compile_fx

        reset()

        def counting_inductor(gm, example_inputs):
            compiles[0] += 1
            return compile_fx(gm, example_inputs)

        model = torch.compile(raw, dynamic=True, backend=counting_inductor)
    else:
        raise ValueError(name)

    max_seq = args.cache_length or prompt.shape[1] + args.tokens
    if args.model == "hf-dynamic-cache":
        run = lambda: decode_hf(model, prompt, args.tokens)  # noqa: E731
    else:
        run = lambda: decode(model, raw, prompt, args.tokens, max_seq)  # noqa: E731
    start = time.perf_counter()
    first = run()
    first_s = time.perf_counter() - start
    fused_s = None
    if name.startswith("thunder"):
        import thunder

        # steady state is the fused program's: wait for the background compile before timing (the first decode
        # ran without waiting, at the unfused program's speed)
        thunder.wait_for_fusion(model)
        fused_s = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    if name.startswith("thunder"):
        import thunder

        compiles[0] = thunder.cache_misses(model)
    warm = statistics.median(times)
    result = {
        "first_decode_s": first_s,
        "warm_decode_s": warm,
        "tokens_per_s": args.tokens / warm,
        "compiles": compiles[0] if name != "eager" else 0,
    }
    if fused_s is not None:
        result["fused_after_s"] = fused_s
    if expected is not None:
        result["same_tokens_as_eager"] = bool(torch.equal(first, expected))
    log(f"{name}: {result}")
    return result, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64, help="tokens to generate per decode")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length")
    parser.add_argument("--repeats", type=int, default=3, help="warm decodes to time")
    parser.add_argument("--backends", nargs="+", default=["eager", "thunder", "torch.compile"])
    parser.add_argument("--model", choices=["litgpt", "hf-dynamic-cache"], default="litgpt")
    parser.add_argument(
        "--cache-length",
        type=int,
        default=None,
        help="LitGPT KV cache positions (default: prompt + tokens; a server allocates its longest context)",
    )
    args = parser.parse_args()

    prompt = torch.randint(0, 1024, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    results, expected = {}, None
    for name in ["eager"] + [b for b in args.backends if b != "eager"]:
        log(f"running {name}")
        results[name], tokens = run_backend(name, args, prompt, expected)
        if name == "eager":
            expected = tokens
    if "eager" not in args.backends:
        results.pop("eager")
    import thunder

    print(
        json.dumps(
            {
                "benchmark": "decode",
                "model": "litgpt llama-tiny (2 layers, n_embd 256), KV cache, batch 1"
                if args.model == "litgpt"
                else "HF LlamaForCausalLM (2 layers, hidden 256), DynamicCache, batch 1",
                "prompt_tokens": args.prompt,
                "new_tokens": args.tokens,
                "kv_cache_length": args.cache_length or args.prompt + args.tokens,
                "results": results,
                "machine": {
                    "platform": platform.platform(),
                    "cpu_count": os.cpu_count(),
                    "torch_num_threads": torch.get_num_threads(),
                    "python": platform.python_version(),
                    "torch": torch.__version__,
                    "thunder": thunder.__version__,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
