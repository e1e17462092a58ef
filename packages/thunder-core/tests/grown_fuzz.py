"""A second differential fuzzer, built unlike ``differential/programs.py`` so it does not share its blind spots.

    python packages/thunder-core/tests/grown_fuzz.py -n 400 --seed 3

Programs are *grown*: each candidate statement (from a wide vocabulary of functions, methods, in-place
forms, shape ops, Python reads of tensor facts, grad-mode blocks) is kept only if the whole program still
runs eagerly without an error or a warning, so no op needs a hand-written precondition. Inputs are drawn
as leaves, non-leaf tensors and views of a non-leaf base (slices, steps, flips, transposes, expands,
diagonals) and inference tensors (made under ``torch.inference_mode``), in float64/32/16, bfloat16,
int64/32 and bool, with special values (NaN, ±inf, ±0, ties), 0-d and empty shapes.

Each program is compared with eager twice (the second call hits thunder's cache): outputs (values,
dtype, shape, requires_grad, whether each is a view, which arguments it shares storage with), the
arguments and their leaves after the call, version counters that eager leaves at zero, and the gradients
reaching the leaves through the outputs and through the arguments used after the call. Thunder's clear
refusals (``DataDependentControlFlowError``) are counted apart from mismatches.

It prints, per class, the count and the shortest programs; it is a campaign tool (not run by CI).
"""

import argparse
import collections
import math
import random
import re
import traceback
import warnings

import torch
import torch.nn.functional as F

import thunder

F32, F64, F16, BF16, I64, I32, B = (
    "torch.float32",
    "torch.float64",
    "torch.float16",
    "torch.bfloat16",
    "torch.int64",
    "torch.int32",
    "torch.bool",
)

SPECIALS = ["float('nan')", "float('inf')", "-float('inf')", "-0.0", "0.0", "0.5", "1.5", "2.5", "-2.5", "1.0"]


def rand_shape(r):
    return r.choice([(), (3,), (2, 3), (3, 3), (2, 1, 3), (0, 3), (1,), (4, 2), (2, 3, 4), (1, 3, 1)])


def input_expr(r, i):
    """Source lines making input ``a{i}`` (and maybe its leaf), and whether a grad leaf exists."""
    lines = []
    kind = r.random()
    shape = rand_shape(r)
    dt = r.choice([F64, F64, F64, F32, F32, F16, BF16, I64, I32, B])
    if dt in (I64, I32):
        base = f"torch.randint(-4, 5, {shape}, dtype={dt})"
    elif dt == B:
        base = f"(torch.rand({shape}) > 0.5)"
    else:
        base = f"torch.randn({shape}, dtype={dt})"
        if r.random() < 0.25 and math.prod(shape) > 0:
            vals = [r.choice(SPECIALS) for _ in range(math.prod(shape))]
            base = f"torch.tensor([{', '.join(vals)}], dtype={dt}).reshape({shape})"
    floaty = dt in (F32, F64, F16, BF16)
    rg = floaty and r.random() < 0.7
    leaf = f"l{i}"
    lines.append(f"{leaf} = {base}" + (".requires_grad_()" if rg else ""))
    # the argument: the leaf itself (only without grad or unmodified), a non-leaf, or a view of a non-leaf base
    nd = len(shape)
    views = ["{b}"]
    if nd >= 1 and shape[0] > 1:
        views += ["{b}[1:]", "{b}[::2]", "{b}.flip(0)", "{b}[0]"]
    if nd >= 2:
        views += [
            "{b}.t()" if nd == 2 else "{b}.transpose(0, 1)",
            "{b}[:, 1:]",
            "{b}.unsqueeze(0).expand(2, *{b}.shape)",
        ]
    if nd == 2 and shape[0] == shape[1]:
        views += ["{b}.diagonal()"]
    if nd == 1:
        views += ["{b}.unsqueeze(1).expand(-1, 2)", "{b}.view(1, -1)"]
    if nd == 4:
        views += ["{b}.contiguous(memory_format=torch.channels_last)"]
    if kind < 0.35:
        arg = leaf
    else:
        base_name = f"b{i}"
        lines.append(f"{base_name} = {leaf} * 1" if floaty else f"{base_name} = {leaf}.clone()")
        arg = r.choice(views).format(b=base_name)
    # an inference tensor (made under inference_mode: no version counter, no autograd, updated in place only
    # there), drawn from a generator of its own so the programs of a seed stay those drawn before it existed
    state = r.getstate()[1]  # (its last number is the position in the Mersenne state: it moves at every draw)
    inference = random.Random(hash((*state[:4], state[-1], i)))
    if inference.random() < 0.08:
        view = inference.choice(["", ".unsqueeze(0)", ".reshape(-1)[::2]"])  # (the clone, or a view of it)
        lines.append(f"with torch.inference_mode(): a{i} = {arg}.clone(){view}")
    else:
        lines.append(f"a{i} = {arg}")
    return lines, floaty


UNARY = [
    "torch.sin({x})",
    "torch.exp({x})",
    "torch.tanh({x})",
    "torch.sigmoid({x})",
    "torch.relu({x})",
    "F.gelu({x})",
    "-{x}",
    "torch.abs({x})",
    "torch.sqrt(torch.abs({x}))",
    "torch.log1p(torch.abs({x}))",
    "torch.floor({x})",
    "torch.round({x})",
    "torch.sign({x})",
    "{x}.clamp(min=-0.5, max=0.7)",
    "{x}.clamp(min={x}.mean())",
    "{x} ** 2",
    "{x} ** 0.5",
    "2 ** {x}",
    "torch.reciprocal({x})",
    "torch.erf({x})",
    "F.softplus({x})",
    "F.silu({x})",
    "F.leaky_relu({x}, 0.1)",
    "torch.nan_to_num({x})",
    "{x}.float()",
    "{x}.double()",
    "{x}.half()",
    "{x}.to(torch.int64)",
    "{x}.bool()",
    "{x}.long() * 3",
    "{x} * 2.5",
    "{x} + 1",
    "3 - {x}",
    "{x} / 3",
    "{x} // 2",
    "{x} % 3",
    "{x}.int()",
    "torch.where({x} > 0, {x}, 0.0)",
    "{x}.masked_fill({x} < 0, 1.5)",
    "~{x}",
    "{x}.logical_not()",
    "{x} != {x}",
    "torch.isnan({x})",
    "torch.isinf({x})",
    "{x}.trunc()",
    "torch.frac({x})",
    "{x}.ceil()",
    "torch.expm1({x})",
    "torch.log(torch.abs({x}) + 1)",
    "torch.rsqrt(torch.abs({x}) + 1)",
    "F.hardtanh({x})",
    "F.elu({x})",
    "torch.zeros_like({x})",
    "torch.ones_like({x}, dtype=torch.float64)",
    "torch.full_like({x}, 2)",
    "{x}.new_zeros({x}.shape)",
    "{x}.new_ones(2)",
    "torch.empty_like({x}).fill_(1)",
    "{x}.type_as({y})",
    "{x}.to({y}.dtype)",
    "torch.clone({x})",
    "{x}.detach()",
    "{x}.clone().detach()",
    "torch.square({x})",
    "torch.positive({x})",
    "{x}.sgn()",
    "torch.signbit({x})",
    "torch.logit(torch.sigmoid({x}))",
]
BINARY = [
    "{x} + {y}",
    "{x} - {y}",
    "{x} * {y}",
    "{x} / {y}",
    "{x} // {y}",
    "{x} % {y}",
    "{x} ** {y}",
    "torch.maximum({x}, {y})",
    "torch.minimum({x}, {y})",
    "torch.atan2({x}, {y})",
    "{x} @ {y}",
    "torch.hypot({x}, {y})",
    "{x} > {y}",
    "{x} == {y}",
    "{x} & {y}",
    "{x} | {y}",
    "{x} ^ {y}",
    "torch.lerp({x}, {y}, 0.3)",
    "torch.where({x} > {y}, {x}, {y})",
    "torch.fmod({x}, {y})",
    "torch.remainder({x}, {y})",
    "torch.div({x}, {y}, rounding_mode='floor')",
    "torch.div({x}, {y}, rounding_mode='trunc')",
    "torch.copysign({x}, {y})",
    "torch.xlogy({x}, {y})",
    "torch.cat([{x}, {y}])",
    "torch.cat([{x}, {y}], dim=-1)",
    "torch.stack([{x}, {y}])",
    "torch.add({x}, {y}, alpha=2)",
    "torch.addcmul({x}, {x}, {y}, value=0.5)",
    "{x}.masked_fill({y} > 0, -1.0)",
    "{x}.expand_as({y})",
    "{x}.reshape_as({y})",
    "{x}.view_as({y})",
    "torch.bmm({x}, {y})",
    "torch.mm({x}, {y})",
    "torch.mv({x}, {y})",
    "torch.dot({x}, {y})",
    "torch.outer({x}, {y})",
    "torch.einsum('ij,jk->ik', {x}, {y})",
    "F.linear({x}, {y})",
    "torch.gather({x}, 0, {y})",
    "torch.index_select({x}, 0, {y})",
    "{x}[{y}]",
    "torch.take({x}, {y})",
    "{x}.scatter_add(0, {y}, {x})",
    "torch.logical_and({x}, {y})",
    "torch.eq({x}, {y}).sum()",
    "torch.clamp({x}, min={y})",
    "torch.isclose({x}, {y})",
    "torch.float_power({x}, {y})",
]
REDUCE = [
    "{x}.sum()",
    "{x}.sum(0)",
    "{x}.sum(-1, keepdim=True)",
    "{x}.mean()",
    "{x}.mean(0)",
    "{x}.amax(-1)",
    "{x}.amin(0)",
    "{x}.prod()",
    "{x}.prod(-1)",
    "{x}.var()",
    "{x}.std(0)",
    "torch.logsumexp({x}, -1)",
    "torch.norm({x})",
    "{x}.norm(dim=-1)",
    "{x}.cumsum(0)",
    "{x}.cumsum(-1)",
    "{x}.cumprod(0)",
    "torch.softmax({x}, -1)",
    "torch.log_softmax({x}, 0)",
    "{x}.argmax()",
    "{x}.argmax(-1)",
    "{x}.max(dim=0).values",
    "{x}.max(dim=-1)[1]",
    "{x}.sort(dim=-1).values",
    "{x}.sort(0, descending=True)[1]",
    "{x}.topk(1).values",
    "{x}.min()",
    "{x}.max()",
    "{x}.all()",
    "{x}.any(0)",
    "{x}.sum(dtype=torch.float64)",
    "torch.softmax({x}, -1, dtype=torch.float64)",
    "{x}.count_nonzero()",
    "{x}.median()",
    "torch.cummax({x}, 0).values",
    "{x}.var(0, unbiased=False)",
    "{x}.nansum()",
    "torch.mean({x}.float(), dim=(0,))",
    "{x}.sum((0, -1))",
    "torch.aminmax({x}).max",
]
SHAPE = [
    "{x}.reshape(-1)",
    "{x}.view(-1)",
    "{x}.transpose(0, -1)",
    "{x}.permute(*reversed(range({x}.dim())))",
    "{x}.flip(-1)",
    "{x}.roll(1, 0)",
    "{x}.unsqueeze(0)",
    "{x}.squeeze()",
    "{x}.squeeze(0)",
    "{x}.expand(2, *{x}.shape)",
    "{x}.repeat(2, *([1] * {x}.dim()))",
    "{x}.t()",
    "{x}.narrow(0, 0, 1)",
    "{x}.select(0, 0)",
    "{x}[..., ::2]",
    "{x}[1:]",
    "{x}[-1]",
    "{x}[None]",
    "{x}[:, None]",
    "{x}.chunk(2)[0]",
    "{x}.split(1)[-1]",
    "{x}.unbind(0)[0]",
    "{x}.diagonal()",
    "torch.tril({x})",
    "torch.triu({x}, 1)",
    "{x}.movedim(0, -1)",
    "{x}.flatten()",
    "{x}.mT",
    "{x}.contiguous()",
    "{x}.unflatten(0, (1, -1))",
    "{x}.T",
    "{x}[{x} > 0]",
    "{x}.nonzero()",
    "{x}.masked_select({x} > 0)",
    "torch.broadcast_to({x}, (2, *{x}.shape))",
    "{x}.unfold(0, 1, 1)",
    "{x}[0, ...]",
    "{x}[[0, 0]]",
    "{x}.tile((2,))",
    "{x}.view({x}.dtype)",
    "{x}.swapaxes(0, -1)",
    "torch.atleast_2d({x})",
    "{x}.ravel()",
    "{x}[:, 0]",
]
INPLACE = [
    "{x}.add_({y})",
    "{x}.mul_({y})",
    "{x}.mul_(2)",
    "{x}.clamp_(min=0)",
    "{x}.zero_()",
    "{x}.fill_(1.5)",
    "{x}.copy_({y})",
    "{x}[0] = {y}",
    "{x}[0] = 7",
    "{x}[..., 0] += 1",
    "{x}.relu_()",
    "{x}.sigmoid_()",
    "{x}.t_()",
    "{x}.unsqueeze_(0)",
    "{x}.squeeze_()",
    "{x}.transpose_(0, -1)",
    "{x}.neg_()",
    "{x}.sub_({y}, alpha=2)",
    "{x}.div_(2)",
    "{x} += {y}",
    "{x} *= {y}",
    "{x} -= 1",
    "{x}.abs_()",
    "{x}.exp_()",
    "{x}.floor_()",
    "{x}.masked_fill_({x} > 0, 0.25)",
    "{x}.index_fill_(0, torch.tensor([0]), -1)",
    "{x}[{x} > 0] = 0",
    "{x}.addcmul_({y}, {y}, value=0.1)",
    "{x}.lerp_({y}, 0.5)",
    "{x}.detach_()",
    "{x}.requires_grad_()",
    "{x}.eq_({y})",
    "{x}.logical_not_()",
    "{x}.pow_(2)",
    "{x}.clamp_max_({y})",
    "{x}.reshape(-1)[0] = 3",
    "{x}.view(-1).add_(1)",
    "{x}.diagonal().zero_()",
    "{x}.resize_(0)",
    "{x}.set_({y})",
    "{x}.data = {y}",
    "{x}.data.mul_(2)",
    "{x}.tanh_()",
    "{x}.round_()",
    "torch.add({x}, {y}, out={x})",
    "torch.mul({x}, 2, out={x})",
    "{x}.scatter_(0, torch.zeros_like({x}, dtype=torch.int64), 1.0)",
    "{x}.index_add_(0, torch.tensor([0]), {y})",
    "{x}.swapdims_(0, 1)",
    "{x}.as_strided_((1,), (1,))",
]
PYTHON = [
    "{x} * {x}.shape[0]",
    "{x} + len({x})",
    "{x} * {x}.numel()",
    "{x} / {x}.dim() if {x}.dim() else {x}",
    "{x} * 2 if {x}.shape[-1] > 2 else {x} - 1",
    "torch.stack([{x}[i] * i for i in range({x}.shape[0])])",
    "sum({x}.unbind(0))",
    "{x} * float({x}.sum())",
    "{x} if {x}.sum() > 0 else -{x}",
    "{x} * {x}.size(-1)",
    "{x}.new_tensor([1.0, 2.0])",
    "torch.arange({x}.shape[0]) * {x}.sum()",
    "{x} * int({x}.max())",
    "{x} * {x}.item()",
    "max({x}.shape) * {x}",
    "{x} * (1 if {x}.is_contiguous() else 2)",
    "{x} * (2 if {x}.requires_grad else 3)",
    "{x} * (2 if {x}.dtype == torch.float32 else 3)",
    "{x} * (2 if {x}.is_leaf else 3)",
    "{x} * (2 if {x}._base is None else 3)",
    "{x}.tolist()",
    "{x} * (2 if isinstance({x}, torch.Tensor) else 3)",
    "{x} * {x}.stride(0)",
    "{x} * {x}.storage_offset()",
    "{x} * (2 if {x}.grad_fn is None else 3)",
    "{x} * (2 if {x}.is_floating_point() else 3)",
]
CONTEXTS = [
    "torch.no_grad()",
    "torch.enable_grad()",
    "torch.autocast('cpu', dtype=torch.bfloat16)",
    "torch.inference_mode()",
]


class Fail(Exception):
    pass


def run_eager(src: str) -> dict:
    env = {"torch": torch, "F": F}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(src, env)
    return env


def program_src(setup, body, nargs, rets, seed):
    args = ", ".join(f"a{i}" for i in range(nargs))
    fn = [f"def f({args}):"] + ["    " + ln for ln in body] + [f"    return {rets}"]
    mk = ["def make():", f"    torch.manual_seed({seed})"] + ["    " + ln for ln in setup]
    mk.append(f"    return [{', '.join(f'l{i}' for i in range(nargs))}], [{args}]")
    return "\n".join(fn + mk) + "\n"


def gen(r, seed, exclude=frozenset()):
    """A program grown from ``r``, leaving out the statement templates in ``exclude``."""
    nargs = r.choice([1, 2, 2, 3])
    setup = []
    for i in range(nargs):
        lines, _ = input_expr(r, i)
        setup += lines
    names = [f"a{i}" for i in range(nargs)]
    body = []
    nlines = r.randint(1, 7)
    tries = 0
    while len(body) < nlines and tries < 60:
        tries += 1
        k = r.random()
        x, y = r.choice(names), r.choice(names)
        if k < 0.22:
            tpl = r.choice(UNARY)
        elif k < 0.42:
            tpl = r.choice(BINARY)
        elif k < 0.55:
            tpl = r.choice(REDUCE)
        elif k < 0.7:
            tpl = r.choice(SHAPE)
        elif k < 0.9:
            tpl = r.choice(INPLACE)
        else:
            tpl = r.choice(PYTHON)
        if tpl in exclude:
            continue
        stmt = tpl.format(x=x, y=y)
        is_stmt = tpl in INPLACE
        if not is_stmt:
            v = f"v{len(body)}"
            stmt = f"{v} = {stmt}"
        lines = [stmt]
        if r.random() < 0.12:
            lines = [f"with {r.choice(CONTEXTS)}:", "    " + stmt]
        cand = body + lines
        src = program_src(setup, cand, nargs, ", ".join(names), seed)
        try:
            run_eager(src + "\n_l, _a = make()\n_o = f(*_a)\n")
        except BaseException:
            continue
        body = cand
        if not is_stmt:
            names.append(v)
    # outputs: 1-3 values, sometimes in a dict or list
    outs = r.sample(names, k=min(len(names), r.randint(1, 3)))
    form = r.random()
    if form < 0.15:
        rets = "{" + ", ".join(f"'{o}': {o}" for o in outs) + "}"
    elif form < 0.25:
        rets = "[" + ", ".join(outs) + "]"
    else:
        rets = ", ".join(outs) + ("," if len(outs) == 1 else "")
    return program_src(setup, body, nargs, rets, seed)


def flat(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            flat(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            flat(v, out)
    else:
        out.append(x)
    return out


def tol(dt):
    if dt == torch.float64:
        return dict(rtol=1e-7, atol=1e-9)
    if dt in (torch.float16, torch.bfloat16):
        return dict(rtol=2e-2, atol=2e-2)
    return dict(rtol=1e-4, atol=1e-5)


def compare(a, e, what, view_ness=True):
    if type(a) is not type(e) and not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)):
        raise Fail(f"structure {what}: {type(a).__name__} vs {type(e).__name__}")
    if isinstance(e, torch.Tensor):
        if type(a) is not type(e):
            raise Fail(f"type {what}: {type(a).__name__} vs {type(e).__name__}")
        if a.dtype != e.dtype:
            raise Fail(f"dtype {what}: {a.dtype} vs {e.dtype}")
        if a.shape != e.shape:
            raise Fail(f"shape {what}: {tuple(a.shape)} vs {tuple(e.shape)}")
        if a.requires_grad != e.requires_grad and (e.dtype.is_floating_point or e.dtype.is_complex):
            raise Fail(f"requires_grad {what}: {a.requires_grad} vs {e.requires_grad}")
        if view_ness and (a._base is None) != (e._base is None) and what.startswith("out"):
            raise Fail(f"is_view {what}: thunder base {a._base is not None} vs eager {e._base is not None}")
        try:
            torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True, **tol(e.dtype))
        except AssertionError as err:
            raise Fail(f"value {what}: {' '.join(str(err).split())[:200]}") from None
    else:
        if isinstance(e, float) and isinstance(a, float) and (math.isnan(e) and math.isnan(a)):
            return
        if a != e:
            raise Fail(f"value {what}: {a!r} vs {e!r}")


def grads(leaves, args, outs):
    total = None
    for i, t in enumerate([*flat(outs, []), *args]):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point and t.numel():
            w = torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).reshape(t.shape) * (i + 1)
            term = (t * w).sum().to(torch.float64)
            total = term if total is None else total + term
    gl = [l for l in leaves if l.requires_grad]
    if total is None or not gl:
        return None
    return torch.autograd.grad(total, gl, allow_unused=True)


def check(src, view_ness=True):
    """Runs the program ``src`` eagerly and jitted and raises ``Fail`` at the first difference (``view_ness``: also
    whether each output is a view)."""
    env = run_eager(src)
    f, make = env["f"], env["make"]
    le, ae = make()
    oe = f(*ae)
    jf = thunder.jit(f)
    for call in range(2):
        lt, at = make()
        if call == 1:  # fresh eager for the second call too
            le, ae = make()
            oe = f(*ae)
        try:
            ot = jf(*at)
        except Exception as err:
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise Fail(f"error {type(err).__name__}: {msg[:160]}") from err
        fe, ft = flat(oe, []), flat(ot, [])
        if len(fe) != len(ft) or type(oe) is not type(ot):
            raise Fail(f"structure: {type(ot).__name__}[{len(ft)}] vs {type(oe).__name__}[{len(fe)}]")
        for i, (a, e) in enumerate(zip(ft, fe)):
            compare(a, e, f"out{i} call{call}", view_ness)
        for i, (a, e) in enumerate(zip(at, ae)):
            compare(a, e, f"arg{i} call{call}")
            if e.is_inference() != a.is_inference():
                raise Fail(f"is_inference arg{i}: {a.is_inference()} vs {e.is_inference()}")
            if e.is_inference():
                continue  # (no version counter)
            if a._version != e._version and (a._version == 0) != (e._version == 0):
                raise Fail(f"version arg{i}: {a._version} vs {e._version}")
        for i, (a, e) in enumerate(zip(lt, le)):
            compare(a, e, f"leaf{i} call{call}")
        # outputs aliasing args
        for i, (a, e) in enumerate(zip(ft, fe)):
            if isinstance(e, torch.Tensor):
                for j, (x, y) in enumerate(zip(at, ae)):
                    se = e.untyped_storage().data_ptr() == y.untyped_storage().data_ptr() and e.numel() and y.numel()
                    st = a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() and a.numel() and x.numel()
                    if bool(se) != bool(st):
                        raise Fail(f"aliasing out{i} arg{j}: thunder {bool(st)} eager {bool(se)}")
        try:
            ge = grads(le, ae, oe)
        except Exception:
            continue  # eager's backward fails: nothing to compare
        try:
            gt = grads(lt, at, ot)
        except Exception as err:
            first = str(err).splitlines()[0][:160] if str(err) else ""
            raise Fail(f"grad_error {type(err).__name__}: {first}") from err
        if (ge is None) != (gt is None):
            raise Fail(f"grad presence: thunder {gt is not None} eager {ge is not None}")
        if ge is not None:
            for i, (a, e) in enumerate(zip(gt, ge)):
                if (a is None) != (e is None):
                    if a is not None and not a.any() or e is not None and not e.any():
                        continue
                    raise Fail(f"grad None leaf{i}: thunder {a is None} eager {e is None}")
                if a is not None:
                    compare(a, e, f"grad leaf{i} call{call}")


REFUSAL = re.compile(
    r"DataDependent|data-dependent|not known while tracing|depends on the values|ThunderFX|cannot trace|not supported|"
    r"thunder\.jit cannot|depends on tensor values",
    re.I,
)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=2)
    a = p.parse_args()
    tally = collections.Counter()
    examples = collections.defaultdict(list)
    refusals = collections.Counter()
    for k in range(a.n):
        seed = a.seed * 100000 + k
        r = random.Random(seed)
        src = gen(r, seed)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check(src)
        except Fail as fl:
            msg = str(fl)
            cls = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "_", msg)[:110]
            if msg.startswith("error") and REFUSAL.search(msg):
                refusals[cls] += 1
                examples["REFUSAL " + cls].append((msg, src))
                continue
            tally[cls] += 1
            examples[cls].append((msg, src))
        except Exception as err:
            cls = f"harness {type(err).__name__}: {str(err)[:80]}"
            tally[cls] += 1
            examples[cls].append((traceback.format_exc()[-800:], src))
    print(f"# {a.n} programs seed {a.seed}: {sum(tally.values())} mismatches, {sum(refusals.values())} refusals")
    for cls, n in tally.most_common():
        print(f"{n:5d}  {cls}")
    for cls, n in refusals.most_common():
        print(f"{n:5d}  REFUSAL {cls}")
    for cls, exs in examples.items():
        for msg, src in sorted(exs, key=lambda e: len(e[1]))[: a.show]:
            print(f"\n===== {cls}\n{msg}\n{src}")


if __name__ == "__main__":
    main()
