#!/usr/bin/env python3
"""bench/gpu/profile_gpu.py -- where a training step's GPU time goes, ours and
PyTorch's, measured by one instrument: PyTorch's profiler (CUPTI), which sees
every kernel launched in the process, those of libconvlstm.so included.

    python3 bench/gpu/profile_gpu.py [--configs mnist64] [--dtypes float32,float16]
                                     [--math strict|default] [--steps 5] [--rows 25]

For each config and dtype it runs a few warm-up steps of each side, then
profiles `--steps` steps and prints the kernels sorted by total GPU time, per
step. --math sets float32's convolution arithmetic on both sides as
bench_gpu.py's does: "strict" (the default here: CONVLSTM_CUDA_TF32=0,
PyTorch's allow_tf32 off) or "default" (both sides' defaults, TF32 on);
tools/device/gpu_session.sh's profile stage runs both. Needs a GPU; run it on
the device machine (tools/device/README.md).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu as bg  # noqa: E402

torch = bg.load_torch()  # before the library loads (bench_gpu.load_torch)
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def kernel_table(prof, steps, rows):
    """(name, ms per step, calls per step), busiest first, and the total."""
    evs = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    key = "self_device_time_total" if hasattr(evs[0] if evs else None, "self_device_time_total") \
        else "self_cuda_time_total"
    out = sorted(((e.key, getattr(e, key) / 1e3 / steps, e.count / steps) for e in evs),
                 key=lambda r: -r[1])
    return out[:rows], sum(r[1] for r in out)


def show(title, table, total):
    print("== %s: %.3f ms of kernels per step" % (title, total))
    for name, ms, calls in table:
        print("  %8.3f ms %6.1f calls  %5.1f%%  %s" % (ms, calls, 100 * ms / max(total, 1e-9),
                                                      name[:110]))


def run(step, sync, warmup, steps, rows, title):
    for _ in range(warmup):
        step()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    show(title, *kernel_table(prof, steps, rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="mnist64")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--math", default="strict", choices=bg.MATHS,
                    help="float32 convolution arithmetic on both sides (bench_gpu.set_math)")
    ap.add_argument("--lib", default=os.path.join(bg.ROOT, "build", "libconvlstm.so"))
    a = ap.parse_args()
    bg.set_math(a, a.math)
    print("profile: math %s (CONVLSTM_CUDA_TF32=%s, torch allow_tf32 %s)" % (
        a.math, os.environ["CONVLSTM_CUDA_TF32"], torch.backends.cudnn.allow_tf32), flush=True)
    if not torch.cuda.is_available():
        print("profile_gpu.py needs a GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    lib = bg.Lib(a.lib)
    dev = torch.device("cuda")
    for name in a.configs.split(","):
        cfg = bg.CONFIGS[name]
        x, y = bg.make_data(cfg, cfg["batch"], seed=1)
        for dtype in a.dtypes.split(","):
            m = bg.Ours.of(lib, cfg, bg.CL_DEVICE_CUDA, bg.DTYPES[dtype])
            try:
                opt = bg.adam()
                xa, ya = bg.host_array(x), bg.host_array(y)
                run(lambda: m.train_step(xa, ya, opt), m.sync, a.warmup, a.steps, a.rows,
                    "convlstm %s %s %s" % (name, dtype, a.math))
            finally:
                m.free()
            t = bg.TorchRun(cfg, dtype, dev)
            xd, yd = x.to(dev), y.to(dev)
            run(lambda: t.step(xd, yd), t.sync, a.warmup, a.steps, a.rows,
                "torch_eager %s %s %s" % (name, dtype, a.math))
            del t
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
