"""Times torch's CPU conv2d forward, backward-data and backward-filter at the
tutorial ConvLSTM shapes on 2 threads, as the yardstick for
tests/c/bench_cpu_conv.c (same shapes, same GFLOP/s formula).

Run with the system python that has torch: /usr/bin/python3 tests/c/bench_torch_conv.py
It is not a test: it prints numbers and checks nothing."""
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(2)

# (N, C, K, H, W, k): hidden part and input part of layer 1, then layer 2.
SHAPES = [
    (100, 64, 256, 24, 24, 3),
    (500, 1, 256, 24, 24, 3),
    (500, 64, 4, 24, 24, 3),
    (100, 1, 4, 24, 24, 3),
]


def best_time(fn, reps):
    fn()  # warm-up: oneDNN picks and caches its kernels on the first call
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(N, C, K, H, W, k):
    x = torch.randn(N, C, H, W)
    w = torch.randn(K, C, k, k)
    b = torch.randn(K)
    dy = torch.randn(N, K, H, W)
    pad = k // 2
    flop = 2.0 * N * K * C * k * k * H * W
    reps = max(3, int(2e10 / flop))
    tf = best_time(lambda: F.conv2d(x, w, b, padding=pad), reps)
    # torch's own backward entry point, one direction at a time
    out_mask_d = [True, False, False]
    out_mask_w = [False, True, True]
    args = (dy, x, w, [K], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1)
    td = best_time(lambda: torch.ops.aten.convolution_backward(*args, out_mask_d), reps)
    tw = best_time(lambda: torch.ops.aten.convolution_backward(*args, out_mask_w), reps)
    print(f"N={N:4d} C={C:3d} K={K:3d} {H}x{W} k={k}: "
          f"fwd {tf*1e3:8.2f} ms {flop/tf/1e9:6.1f} GF/s | "
          f"bwd-data {td*1e3:8.2f} ms {flop/td/1e9:6.1f} GF/s | "
          f"bwd-filter {tw*1e3:8.2f} ms {flop/tw/1e9:6.1f} GF/s")


if __name__ == "__main__":
    with torch.no_grad():
        for s in SHAPES:
            bench(*s)
