"""Thunder in one file: compile a small Llama-style model and look at what Thunder made of it.

    python -m tox -e demo          # from the repository root, sets everything up
    python examples/demo.py        # where thunder-core is already installed

The model below is plain PyTorch (the same building blocks as LitGPT's Llama): token
embedding, transformer blocks of RMSNorm + causal self-attention with rotary position
embeddings + LLaMAMLP, a final norm and the language-model head. `thunder.jit` turns it into a
straight-line Python program (a trace), which we check against eager PyTorch, print, and time;
then we train it for a step and print the backward program Thunder made.
"""

import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder

TOLERANCE = 1e-4  # max allowed |thunder - eager| (float32 on the CPU)


@dataclass
class Config:
    vocab_size: int = 512
    n_embd: int = 128
    n_head: int = 4
    n_layer: int = 2
    intermediate_size: int = 344
    block_size: int = 64  # longest sequence the rotary cache covers

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


# --- the model: plain PyTorch ------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm_x = torch.mean(x * x, dim=-1, keepdim=True)
        return x * torch.rsqrt(norm_x + self.eps) * self.weight


def build_rope_cache(seq_len: int, head_size: int, base: int = 10000) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (seq_len, head_size)."""
    theta = 1.0 / (base ** (torch.arange(0, head_size, 2).float() / head_size))
    angles = torch.outer(torch.arange(seq_len).float(), theta).repeat(1, 2)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates pairs (x[i], x[i + head_size/2]) of each head by the position's angle."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_size = config.head_size
        self.attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)  # q, k, v in one matmul
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.attn(x).split(C, dim=-1)
        # (B, T, C) -> (B, n_head, T, head_size)
        q = q.view(B, T, self.n_head, self.head_size).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_size).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_size).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class LLaMAMLP(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.fc_2 = nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.fc_1(x)) * self.fc_2(x))


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd)
        self.mlp = LLaMAMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x), cos, sin)
        return x + self.mlp(self.norm_2(x))


class Llama(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = RMSNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cos, sin = build_rope_cache(config.block_size, config.head_size)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.ln_f(x))  # logits, (B, T, vocab_size)


# --- timing helper -------------------------------------------------------------------------


def interleaved_times(fns: dict, *args, rounds: int = 30, warmup: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each function, timed in alternation: one call of each per round.

    Timing one function's calls in a block and then the other's lets anything that changes
    between the blocks (CPU frequency, other processes, the allocator's state) masquerade as a
    difference between them; alternating exposes both to the same conditions.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn(*args)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(*args)
            times[name].append(time.perf_counter() - start)
    return times


# --- the demo ------------------------------------------------------------------------------


def main() -> int:
    torch.manual_seed(0)
    config = Config()
    model = Llama(config).eval()
    idx = torch.randint(0, config.vocab_size, (2, config.block_size))
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"Model: {config.n_layer}-layer Llama-style, n_embd {config.n_embd}, vocab {config.vocab_size}, "
        f"{n_params / 1e6:.2f}M parameters; input: {tuple(idx.shape)} token ids\n"
    )

    # Executors from installed plugin packages that can run here, then the defaults
    # (python -m thunder.plugins says which plugins were found and why any is unavailable).
    executors = thunder.discover()
    print("thunder.discover():", ", ".join(ex.name for ex in executors), "\n")

    with torch.no_grad():
        jm = thunder.jit(model, executors=executors)

        start = time.perf_counter()
        actual = jm(idx)  # first call: trace, transform, compile, run
        first_call_s = time.perf_counter() - start
        expected = model(idx)

        deviation = (actual - expected).abs().max().item()
        print(f"max |thunder - eager| = {deviation:.3g}  (tolerance {TOLERANCE:.0e})\n")

        print("The program Thunder ran, thunder.last_traces(jm)[-1]:\n")
        print(thunder.last_traces(jm)[-1])
        print()

        if not deviation < TOLERANCE:
            print(f"FAILED: thunder deviates from eager by {deviation:.3g} >= {TOLERANCE:.0e}", file=sys.stderr)
            return 1

        rounds = 30
        times = interleaved_times({"eager": model, "thunder": jm}, idx, rounds=rounds)

    # Training: with parameters that require grad, Thunder splits the program into a forward
    # and a backward trace; loss.backward() runs the backward one.
    model.train()
    jm_train = thunder.jit(model, executors=executors)
    targets = torch.randint(0, config.vocab_size, idx.shape)
    loss = F.cross_entropy(jm_train(idx).flatten(0, 1), targets.flatten())
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    F.cross_entropy(model(idx).flatten(0, 1), targets.flatten()).backward()
    grad_deviation = max((grads[name] - p.grad).abs().max().item() for name, p in model.named_parameters())
    print(f"training step: loss {loss.item():.4f}, max |grad thunder - grad eager| = {grad_deviation:.3g}\n")
    print("The backward program, thunder.last_backward_traces(jm_train)[-1]:\n")
    print(thunder.last_backward_traces(jm_train)[-1])
    print()
    if not grad_deviation < TOLERANCE:
        print(f"FAILED: thunder's gradients deviate from eager by {grad_deviation:.3g}", file=sys.stderr)
        return 1

    eager_s, thunder_s = statistics.median(times["eager"]), statistics.median(times["thunder"])
    # the ratio within each round, where both ran under the same conditions
    ratios = sorted(t / e for t, e in zip(times["thunder"], times["eager"]))
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    print(f"median time per call, no_grad forward ({rounds} rounds, eager and thunder alternating):")
    print(f"  {'eager PyTorch':<16} {eager_s * 1e3:8.3f} ms")
    print(f"  {'thunder.jit':<16} {thunder_s * 1e3:8.3f} ms")
    print(
        f"thunder / eager within a round: median {statistics.median(ratios):.2f}x, "
        f"middle half of the rounds {q1:.2f}x to {q3:.2f}x"
    )
    print(f"first thunder call (trace + compile + run): {first_call_s:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
