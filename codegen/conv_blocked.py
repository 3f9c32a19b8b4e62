"""Register-blocked variants of the direct convolution kernels (codegen.conv_kernels), for
CPUs without AVX-512: 16 vector registers of 8 float32 lanes (AVX2 + FMA).

The kernels of codegen.conv_kernels compute, per (output, input) channel pair, all K*K
taps in one pass over a row: ``acc[j] + w0*x[j+off0] + ... + w24*x[j+off24]``.  Compiled
for AVX-512 the 25 weights of a 5x5 kernel stay in 32 registers; with 16 registers LLVM
spills 11 of them and reloads them in every iteration, and the 25 FMAs form ONE chain
(4 cycles each), so each 8-lane vector of a row waits ~100 cycles of latency (measured on
Zen 3: 0.8 FMA/cycle of the 2 the core can issue).  Here every pass over a row covers ONE
kernel row (KW taps) for a block of ``block`` output channels at once:

    for j in row:  x_t = x[j + t*dw] (t < KW, loaded once for the block)
                   acc_q[j] = acc_q[j] + w_q0*x_0 + ... + w_q(KW-1)*x_(KW-1)   (q < block)

so the block*KW weights stay in registers (at most REGISTER_WEIGHTS of them), each loaded
x feeds `block` FMAs, and `block` chains of KW FMAs run side by side.  The passes for the
kernel rows and input channels add into the accumulators in (c, ky) order: every output is
still summed in one fixed order, whatever the batch split.

* forward: block of output channels; passes over (c, ky);
* input gradient: block of input channels; passes over (o, ky), the kernel rows from the
  last to the first (the gather reads gq at ``m - off``: counting ky down keeps every
  index a sum of non-negative terms, which LLVM needs to bound the accesses for its
  run-time alias checks; written as ``b - ky*Wp`` it refused to vectorize);
* weight gradient: block of output channels times the KW taps of one kernel row as
  block*KW running sums (vmath.muladd_reassoc: each term one FMA into a reassociable sum;
  add_reassoc(s, v*x) was a multiply and an add), added to dw per sample in n order.

Which variant a process builds is a rule on the CPU Numba compiles for (`use_blocked`);
codegen.conv_kernels' docstring has the rest (padding, refusals of non-finite values,
batch-size-free sources) and both variants share it.
"""
from __future__ import annotations

import functools

from .conv_kernels import Geometry, _module, _pad_plane, _refuse_nonfinite
from .parallel import _split_threads
from .step_kernels import Split

# Weights held in registers per pass (block * KW): 16 ymm registers hold these, the block's
# accumulators or running sums, and the loaded inputs.  On W8's 5x5 convolutions a block of
# 2 (10 weights) beat 1, 3 and 4 (benchmarks/CONV_NOTES.md has the figures).
REGISTER_WEIGHTS = 10
MAX_BLOCK = 4


@functools.cache
def use_blocked() -> bool:
    """Whether this process builds the register-blocked kernels: where Numba compiles for
    x86-64 without AVX-512F (its feature string, which honours NUMBA_CPU_FEATURES).  On
    AVX-512 the kernels of codegen.conv_kernels are kept as they were measured there."""
    import llvmlite.binding as ll
    from numba.core.codegen import get_host_cpu_features

    return ll.get_process_triple().startswith("x86_64") \
        and "+avx512f" not in str(get_host_cpu_features()).split(",")


def block_size(channels: int, kw: int) -> int:
    """Output (or input) channels per pass: as many as keep block*KW weights in registers."""
    return max(1, min(channels, MAX_BLOCK, REGISTER_WEIGHTS // kw))


def _blocks(total: int, size: int) -> list:
    """[(start, stop, count)]: a loop over the full blocks of `size`, then one of the rest."""
    full = total - total % size
    out = [(0, full, size)] if full else []
    if total % size:
        out.append((full, total, total % size))
    return out


def _row_weights(g: Geometry, ind: str, cnt: int, index) -> list:
    """Lines loading w{q}_{t} = in1[index(q) + t], the KW taps of one kernel row of the
    block's q-th channel pair."""
    lines = []
    for q in range(cnt):
        lines.append(f"{ind}wb{q} = {index(q)}")
        lines += [f"{ind}w{q}_{t} = in1[wb{q} + {t}]" for t in range(g.kw)]
    return lines


def _row_pass(g: Geometry, ind: str, cnt: int, first: str, length: int, load, acc) -> list:
    """The two loops (the first pass assigns, the others add) over a row of `length`:
    x_t = load(t), acc(q) = [acc(q) +] sum_t w{q}_{t} * x_t."""
    lines = []
    for head, add in ((f"if {first}:", False), ("else:", True)):
        lines += [f"{ind}{head}", f"{ind}    for j in range(np.uint64({length})):"]
        lines += [f"{ind}        x{t} = {load(t)}" for t in range(g.kw)]
        for q in range(cnt):
            terms = " + ".join(f"w{q}_{t} * x{t}" for t in range(g.kw))
            lines.append(f"{ind}        {acc(q)} = {acc(q) + ' + ' if add else ''}{terms}")
    return lines


def forward(g: Geometry) -> Split:
    L, plane, kk = g.length, g.hp * g.wp, g.kh * g.kw
    xs = "xp" if g.padded else "in0"
    block = block_size(g.o, g.kw)
    body = [f"    acc = np.empty({block * L}, np.{g.dtype})"]
    if g.padded:
        body.append(f"    xp = np.zeros({g.c * plane}, np.{g.dtype})")
    body.append("    for n in range(lo, hi):")
    if g.padded:
        body += _pad_plane(g, "        ", "in0", "xp")
        body.append("        xb = np.uint64(0)")
    else:
        body.append(f"        xb = np.uint64(n * {g.c * plane})")
    for start, stop, cnt in _blocks(g.o, block):
        body += [f"        for o0 in range({start}, {stop}, {cnt}):",
                 f"            for c in range({g.c}):",
                 f"                for ky in range({g.kh}):",
                 f"                    b = xb + np.uint64(c * {plane} + ky * {g.dh * g.wp})"]
        body += _row_weights(g, " " * 20, cnt,
                             lambda q: f"((o0 + {q}) * {g.c} + c) * {kk} + ky * {g.kw}")
        body += _row_pass(g, " " * 20, cnt, "c == 0 and ky == 0", L,
                          lambda t: f"{xs}[b + j + np.uint64({t * g.dw})]",
                          lambda q: f"acc[j + np.uint64({q * L})]")
        for q in range(cnt):
            body += [f"            ob = (n * {g.o} + o0 + {q}) * {g.oh * g.ow}",
                     f"            for y in range({g.oh}):",
                     f"                for x in range({g.ow}):",
                     f"                    out0[ob + y * {g.ow} + x] = "
                     f"acc[{q * L} + y * {g.wp} + x]"]
    doc = (f"conv_direct of [N, {g.c}, {g.h}, {g.w}] by [{g.o}, {g.c}, {g.kh}, {g.kw}], "
           f"dilation ({g.dh}, {g.dw}), padding (({g.pt}, {g.pb}), ({g.pl}, {g.pr})); "
           f"{block} output channels per pass over a kernel row.")
    return Split(_module(doc, g.dtype, body), g.n)


def input_grad(g: Geometry) -> Split:
    """dx (N, C, H, W) of the output gradient in0 (N, O, OH, OW) and the weight in1."""
    plane, kk = g.hp * g.wp, g.kh * g.kw
    z = max(g.offsets())
    span = z + plane                 # one output channel's gq
    rows = g.h * g.wp                # the rows of dxp holding dx, at width Wp
    m0 = g.pt * g.wp                 # (their first position in the padded plane)
    block = block_size(g.c, g.kw)
    body = _refuse_nonfinite(g, "in1", "0", str(g.o * g.c * kk), "    ")
    body += [f"    gq = np.zeros({g.o * span}, np.{g.dtype})",
             f"    acc = np.empty({block * rows}, np.{g.dtype})",
             "    for n in range(lo, hi):",
             f"        for o in range({g.o}):",
             f"            for y in range({g.oh}):",
             f"                s = ((n * {g.o} + o) * {g.oh} + y) * {g.ow}",
             f"                d = o * {span} + {z} + y * {g.wp}",
             f"                for x in range({g.ow}):",
             "                    gq[d + x] = in0[s + x]"]
    for start, stop, cnt in _blocks(g.c, block):
        # (dxp[m] reads gq at m - ky*dh*Wp - t*dw, z ahead: kr = KH-1-ky counts up)
        body += [f"        for c0 in range({start}, {stop}, {cnt}):",
                 f"            for o in range({g.o}):",
                 f"                for kr in range({g.kh}):",
                 f"                    ky = {g.kh - 1} - kr",
                 f"                    b = np.uint64(o * {span} + kr * {g.dh * g.wp})"]
        body += _row_weights(g, " " * 20, cnt,
                             lambda q: f"(o * {g.c} + c0 + {q}) * {kk} + ky * {g.kw}")
        body += _row_pass(g, " " * 20, cnt, "o == 0 and kr == 0", rows,
                          lambda t: f"gq[b + j + np.uint64({m0 + (g.kw - 1 - t) * g.dw})]",
                          lambda q: f"acc[j + np.uint64({q * rows})]")
        for q in range(cnt):
            body += [f"            db = (n * {g.c} + c0 + {q}) * {g.h * g.w}",
                     f"            for y in range({g.h}):",
                     f"                for x in range({g.w}):",
                     f"                    out0[db + y * {g.w} + x] = "
                     f"acc[{q * rows} + y * {g.wp} + x + {g.pl}]"]
    doc = (f"conv_direct_input_grad into [N, {g.c}, {g.h}, {g.w}] from "
           f"[N, {g.o}, {g.oh}, {g.ow}] by [{g.o}, {g.c}, {g.kh}, {g.kw}], dilation "
           f"({g.dh}, {g.dw}), padding (({g.pt}, {g.pb}), ({g.pl}, {g.pr})); "
           f"{block} input channels per pass over a kernel row.")
    return Split(_module(doc, g.dtype, body), g.n)


def _weight_block(g: Geometry, ind: str, cnt: int, xs: str, plane: int) -> list:
    """Lines adding sample n's terms of dw for output channels o0 .. o0+cnt-1."""
    L, kk, zero = g.length, g.kh * g.kw, f"np.{g.dtype}(0.0)"
    lines = [f"{ind}for c in range({g.c}):",
             f"{ind}    for ky in range({g.kh}):",
             f"{ind}        b = xb + np.uint64(c * {plane} + ky * {g.dh * g.wp})"]
    inner = ind + "        "
    lines += [f"{inner}s{q}_{t} = {zero}" for q in range(cnt) for t in range(g.kw)]
    lines.append(f"{inner}for j in range(np.uint64({L})):")
    lines += [f"{inner}    v{q} = gp[np.uint64(o0 * {L} + {q * L}) + j]" for q in range(cnt)]
    for t in range(g.kw):
        lines.append(f"{inner}    x{t} = {xs}[b + j + np.uint64({t * g.dw})]")
        lines += [f"{inner}    s{q}_{t} = muladd_reassoc(s{q}_{t}, v{q}, x{t})"
                  for q in range(cnt)]
    for q in range(cnt):
        lines.append(f"{inner}wb = ((o0 + {q}) * {g.c} + c) * {kk} + ky * {g.kw}")
        lines += [f"{inner}out0[wb + {t}] += s{q}_{t}" for t in range(g.kw)]
    return lines


def weight_grad(g: Geometry) -> Split:
    """dw (O, C, KH, KW) of the output gradient in0 (N, O, OH, OW) and the input in1."""
    L, plane, kk = g.length, g.hp * g.wp, g.kh * g.kw
    xs = "xp" if g.padded else "in1"
    block = block_size(g.o, g.kw)
    body = [f"    gp = np.zeros({g.o * L}, np.{g.dtype})",
            f"    out0[lo * {g.c * kk}:hi * {g.c * kk}] = 0"]
    if g.padded:
        body.append(f"    xp = np.zeros({g.c * plane}, np.{g.dtype})")
    body.append(f"    for n in range(in1.shape[0] // {g.c * g.h * g.w}):  # (N, read at run time)")
    if g.padded:
        body += _pad_plane(g, "        ", "in1", "xp")
        body.append("        xb = np.uint64(0)")
    else:
        body.append(f"        xb = np.uint64(n * {g.c * plane})")
    body += ["        for o in range(lo, hi):",
             f"            for y in range({g.oh}):",
             f"                s = ((n * {g.o} + o) * {g.oh} + y) * {g.ow}",
             f"                for x in range({g.ow}):",
             f"                    gp[o * {L} + y * {g.wp} + x] = in0[s + x]",
             # (blocks of `block` channels from lo, a multiple of `block` (the Split's
             # align), then the last O % block channels one at a time)
             "        o0 = lo",
             f"        while o0 + {block} <= hi:"]
    body += _weight_block(g, " " * 12, block, xs, plane)
    body += [f"            o0 += {block}", "        while o0 < hi:"]
    body += _weight_block(g, " " * 12, 1, xs, plane)
    body.append("            o0 += 1")
    # (a NaN or inf read anywhere, between rows too, leaves its sums non-finite: only then
    # can they differ from eager's, and then numpy computes them)
    body += _refuse_nonfinite(g, "out0", f"lo * {g.c * kk}", f"(hi - lo) * {g.c * kk}", "    ")
    doc = (f"conv_direct_weight_grad [{g.o}, {g.c}, {g.kh}, {g.kw}] from "
           f"[N, {g.o}, {g.oh}, {g.ow}] and [N, {g.c}, {g.h}, {g.w}], dilation "
           f"({g.dh}, {g.dw}), padding (({g.pt}, {g.pb}), ({g.pl}, {g.pr})); "
           f"{block} output channels per pass over a kernel row.")
    source = _module(doc, g.dtype, body, imports="add_reassoc, muladd_reassoc")
    # (pieces of whole shares of the output channels: each piece pads every sample again;
    # and they start at multiples of the block, so which channels share a block's loop, and
    # with it the order LLVM's vectorized sums add in, is the same for every thread count)
    share = -(-g.o // _split_threads())
    return Split(source, g.o, -(-share // block) * block)
