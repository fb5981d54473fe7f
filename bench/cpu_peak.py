"""PyTorch's CPU convolutions at the shapes of bench/cpu_shapes.tsv, set beside
ours (the output of build/bench_cpu_peak) as GFLOP/s and share of the FMA peak
that program measured with a register-only loop.

Run by bench/cpu_peak.sh; by hand:
  build/bench_cpu_peak 1 bench/cpu_shapes.tsv > /tmp/ours.tsv
  python3 bench/cpu_peak.py --threads 1 --ours /tmp/ours.tsv
It is a benchmark, not a test: it prints numbers and checks nothing. The
GFLOP/s formula (2 N K C k^2 H W per call) is the C program's. It counts
the products with the zero border too, which a direct kernel may skip, so
the step table adds the share of those products whose input pixel lies
inside the image, and the rates counted in those products alone: ours (our
GEMM multiplies the border as well, so this is the useful share of our
time) and PyTorch's as it would be if its kernel skipped the border (an
assumption: what oneDNN multiplies is not measured here).
"""
import argparse
import time

import torch

OPS = ("fwd", "bwd-data", "bwd-filter")


def read_ours(path):
    """The peak and {(config, part, op): (ms, GFLOP/s)} from the C program."""
    peak, rows = {}, {}
    with open(path) as f:
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if cells[0] == "peak":
                peak[cells[1]] = float(cells[3])
            elif cells[0] == "conv":
                rows[(cells[1], cells[2], cells[9])] = (float(cells[10]), float(cells[11]))
    return max(peak.values()), peak, rows


def read_shapes(path):
    """(config, part, N, C, K, H, W, k, calls) per row of the table."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            c = line.rstrip("\n").split("\t")
            out.append((c[0], c[1], *map(int, c[2:9])))
    return out


def best_time(fn, reps, threads=1):
    """Best seconds of a call, clocked as the C program clocks: the process's
    CPU seconds on one thread (another process's turn on the core is not
    charged), wall seconds on more (a thread asleep at a barrier charges
    nothing to the CPU clock)."""
    clock = time.process_time if threads == 1 else time.perf_counter
    fn()  # warm-up: oneDNN picks and caches its kernels on the first call
    best = float("inf")
    for _ in range(reps):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def torch_times(N, C, K, H, W, k, threads):
    """Seconds per forward, backward-data, backward-filter call."""
    x, w, b = torch.randn(N, C, H, W), torch.randn(K, C, k, k), torch.randn(K)
    dy = torch.randn(N, K, H, W)
    pad = k // 2
    reps = max(5, int(1e10 / flop_of(N, C, K, H, W, k)))
    args = (dy, x, w, [K], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1)
    bwd = torch.ops.aten.convolution_backward
    return (best_time(lambda: torch.nn.functional.conv2d(x, w, b, padding=pad), reps, threads),
            best_time(lambda: bwd(*args, [True, False, False]), reps, threads),
            best_time(lambda: bwd(*args, [False, True, True]), reps, threads))


def flop_of(N, C, K, H, W, k):
    return 2.0 * N * K * C * k * k * H * W


def inside_of(H, W, k):
    """The share of the k x k taps of a stride-1, "same"-padded convolution
    over H x W that read a pixel inside the image (not the zero border)."""
    def one(n):
        pad = k // 2
        return sum(min(n, y + pad + 1) - max(0, y - pad) for y in range(n)) / (n * k)
    return one(H) * one(W)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default="bench/cpu_shapes.tsv")
    ap.add_argument("--ours", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    peak, peaks, ours = read_ours(a.ours)
    print(f"threads {a.threads}; FMA peak " +
          ", ".join(f"{k} {v:.1f}" for k, v in peaks.items()) + " GFLOP/s; torch " + torch.__version__)
    print("| config | convolution (N, C -> K, HxW, k) | op | convlstm GFLOP/s (share) "
          "| PyTorch GFLOP/s (share) | time ratio |")
    print("|---|---|---|---|---|---|")
    step = {}  # config -> [flop, our seconds, torch seconds], weighted by calls per step
    with torch.no_grad():
        for config, part, N, C, K, H, W, k, calls in read_shapes(a.shapes):
            flop = flop_of(N, C, K, H, W, k)
            for op, t_torch in zip(OPS, torch_times(N, C, K, H, W, k, a.threads)):
                ms, gf = ours[(config, part, op)]
                gt = flop / t_torch / 1e9
                print(f"| {config} | {part} ({N}, {C} -> {K}, {H}x{W}, {k}) | {op} | "
                      f"{gf:.1f} ({gf / peak:.0%}) | {gt:.1f} ({gt / peak:.0%}) | "
                      f"{ms / 1e3 / t_torch:.2f} |")
                s = step.setdefault(config, [0.0, 0.0, 0.0, 0.0])
                s[0] += flop * calls
                s[1] += ms / 1e3 * calls
                s[2] += t_torch * calls
                s[3] += flop * inside_of(H, W, k) * calls
    print()
    print("| config | the step's convolutions: convlstm GFLOP/s (share) | PyTorch (share) | time ratio "
          "| products inside the image | counting only those: convlstm (share) "
          "| PyTorch, if it skips the border (share) |")
    print("|---|---|---|---|---|---|---|")
    for config, (flop, ts, tt, inside) in step.items():
        print(f"| {config} | {flop / ts / 1e9:.1f} ({flop / ts / 1e9 / peak:.0%}) | "
              f"{flop / tt / 1e9:.1f} ({flop / tt / 1e9 / peak:.0%}) | {ts / tt:.2f} | "
              f"{inside / flop:.1%} | {inside / ts / 1e9:.1f} ({inside / ts / 1e9 / peak:.0%}) | "
              f"{inside / tt / 1e9:.1f} ({inside / tt / 1e9 / peak:.0%}) |")


if __name__ == "__main__":
    main()
