# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 01 · Why is decoding memory-bound, and why does batching change that?
#
# File: `minibass/costmodel.py` (the cost model chapter 10 and the benchmarks use too).
#
# A forward call over `N = B·t` new tokens (`B` sequences, `t` tokens each) multiplies every
# weight by each token: about `2 · N · P` FLOPs for `P` weights, while it must read every weight
# at least once: `b · P` bytes (`b` = 2 for bf16). Its **arithmetic intensity** is therefore
#
# $$ I = \frac{\text{FLOPs}}{\text{bytes}} \approx \frac{2 N P}{b P} = \frac{2 N}{b}. $$
#
# A device does at most `peak` FLOP/s and moves at most `bandwidth` bytes/s, so a call takes at least
#
# $$ t_\text{step} = \max\left(\frac{\text{FLOPs}}{\text{peak}}, \frac{\text{bytes}}{\text{bandwidth}}\right)
#   \qquad \text{(the roofline, Williams et al. 2009)}. $$
#
# Below the **ridge point** `peak / bandwidth` the bytes term wins: the call is *memory-bound*
# and more tokens per call are almost free. Decoding one token per sequence at batch 1 sits far
# below it; batching (more sequences) and speculation (more tokens per sequence, in the verify
# call) both move the call to the right.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minibass import costmodel as cm
from minibass import zoo
from minibass.bench.common import call_ms
from minibass.course import size
from minibass.loading import load_model
from transformers import AutoConfig

target_dir, draft_dir = zoo.demo_paths()
demo = cm.ModelShape.from_config(AutoConfig.from_pretrained(target_dir), bytes_per_element=4)  # fp32 on the CPU
llama7b = cm.ModelShape(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008, vocab=32000, tied=False)
for name, shape in [("demo target (fp32)", demo), ("Llama-2-7B shape (bf16)", llama7b)]:
    print(f"{name}: {shape.params / 1e6:.1f}M parameters; intensity in FLOPs/byte, 1 new token per sequence, "
          f"at batch B = 1, 8, 64, 512")
    for context in (0, 128):
        print(f"    {context:3d} cached tokens per sequence: "
              + ", ".join(f"{shape.intensity(n, 1, context):.1f}" for n in (1, 8, 64, 512)))

# %% [markdown]
# With an empty cache the intensity grows as `2N/b`: about 1, 8, 64 and 500 for the 7B shape in bf16
# (just under `2N/b`, because the keys and values each new token writes grow with the batch). With
# 128 cached tokens it levels off, because every sequence also reads its own keys and values: those
# bytes grow with `B` just as the FLOPs do, so once they outweigh the weights, more sequences no
# longer raise the intensity (for the 7B shape, whose 32 heads each keep their own keys and
# values, the limit is near 196). Speculation is different: the `k + 1` tokens of a verify call
# share their sequence's cache, so they raise the intensity even when the cache dominates.

# %% [markdown]
# Now the devices. This machine's CPU is measured live (a matrix multiply for FLOP/s, a sum over a
# large tensor for bandwidth); the three data-centre GPUs come from NVIDIA's spec sheets (dense
# bf16 tensor-core peak, HBM bandwidth; the links are in `costmodel.GPUS[i].source`).

# %%
cpu = cm.measure_cpu(megabytes=size(64, 256))
for hw in (cpu, *cm.GPUS):
    print(f"{hw.name:32s} peak {hw.peak_flops / 1e12:8.2f} TFLOP/s  bandwidth {hw.bandwidth / 1e9:7.0f} GB/s  "
          f"ridge point {hw.ridge_point:6.1f} FLOPs/byte   ({hw.source.split('/')[2] if '//' in hw.source else hw.source})")

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
intensity = np.logspace(-1, 4, 200)
for hw, color in zip((cpu, *cm.GPUS), ("tab:gray", "tab:green", "tab:blue", "tab:purple")):
    ax.loglog(intensity, np.minimum(hw.peak_flops, hw.bandwidth * intensity), color=color, label=hw.name)
    ax.axvline(hw.ridge_point, color=color, linestyle=":", linewidth=1)
for batch in (1, 8, 64):
    i = llama7b.intensity(batch, 1, 128)
    ax.axvline(i, color="tab:red", alpha=0.3)
    ax.annotate(f"7B decode, batch {batch}", (i, 2e11), rotation=90, fontsize=8, color="tab:red")
ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
ax.set_ylabel("attainable throughput (FLOP/s)")
ax.set_title("roofline: the CPU measured now, GPUs from spec sheets")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# What to see: a 7B model decoding one token per sequence (red lines: 128 cached tokens each) sits
# left of every GPU's ridge point (coloured dotted lines), on the sloped, memory-bound part of each
# GPU's roof. With an empty cache it would cross a GPU's ridge point at a batch in the hundreds (the
# exercise below computes where); with 128 cached tokens it crosses the A100's only at batch 690,
# and never the H100's or the H200's, whose ridge points lie above the level-off near 196. A CPU's
# ridge point (gray) lies far lower (10–13 FLOPs/byte on the 2-core machine of
# `docs/demo-pair.md`), so there a batch of 64 is already past it.
#
# The CPU's roofs are measured now, as the best of a few short runs; if the machine is busy they
# come out low (then the CPU's roof can even fall below the measured calls further down): rerun
# the cell when it is quiet.
#
# ## On this CPU, measured
#
# The demo target is small (9.7 M parameters, 39 MB in fp32). Time one call as the number of
# tokens in it grows, next to what the roofline alone (with the CPU's roofs measured above) predicts:

# %%
target = load_model(target_dir)
tokens = size([1, 4, 16, 64], [1, 2, 4, 8, 16, 32, 64, 128])
ms = [call_ms(target, batch, 64, 1, reps=size(3, 10)) for batch in tokens]
predicted = [1e3 * cm.step_time(demo, cpu, batch, 1, 64) for batch in tokens]
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(tokens, ms, "o-", label="measured (demo target, 1 token per sequence)")
ax.plot(tokens, predicted, "s--", label="roofline alone (no fixed costs)")
ax.set_xscale("log", base=2)
ax.set_xlabel("batch (sequences in one call, 64 cached tokens each)")
ax.set_ylabel("time per call (ms)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
print("ms per call:", dict(zip(tokens, [round(x, 2) for x in ms])))

# %% [markdown]
# What to see: the measured time per call grows far more slowly than the number of tokens in it,
# and sits above the bare roofline: what the roofline leaves out is fixed cost per call and per
# layer (`Hardware.call_overhead`, `layer_overhead`). 16 tokens in one call cost much less than 16
# one-token calls, which is why a verify call of `k + 1` tokens is cheap.
#
# ## Exercise
#
# Write `roofline_time(flops, bytes_, peak, bandwidth)` and `critical_batch(shape, hw)`: the
# smallest batch at which one decode call (1 token per sequence, empty cache) becomes
# compute-bound. Use `shape.flops(batch, 1, 0)` and `shape.bytes(batch, 1, 0)`. (The check compares
# with `cm.critical_batch`, which the cell after it uses; write your own rather than calling it.)

# %%
def roofline_time(flops, bytes_, peak, bandwidth):
    # BEGIN SOLUTION
    return max(flops / peak, bytes_ / bandwidth)
    # END SOLUTION


def critical_batch(shape, hw):
    # BEGIN SOLUTION
    batch = 1
    while roofline_time(shape.flops(batch, 1, 0), shape.bytes(batch, 1, 0), hw.peak_flops, hw.bandwidth) \
            > shape.flops(batch, 1, 0) / hw.peak_flops:
        batch += 1
    return batch
    # END SOLUTION


# %%
from minibass.course.checks import check_roofline

check_roofline(roofline_time, critical_batch)
for hw in cm.GPUS:
    cached = cm.critical_batch(llama7b, hw, context=128)
    print(f"{hw.name}: a 7B model decoding with an empty cache becomes compute-bound at batch "
          f"{cm.critical_batch(llama7b, hw)}; with 128 cached tokens per sequence "
          + (f"at batch {cached}" if cached is not None else "never, whatever the batch"))

# %% [markdown]
# Why "never": the weights are read once per call, whatever the batch, but each sequence brings its
# own keys and values. With 128 cached tokens, one sequence of the 7B model reads about 68 MB of
# cache (bf16) for about 13.3 GFLOPs. On the H100 and H200 reading those bytes takes longer than
# doing those FLOPs, so adding sequences never lifts the call past the ridge point. On the A100,
# whose ridge point is lower, the FLOPs still win, at batch 690. `cm.critical_batch` returns
# `None` in that case.
