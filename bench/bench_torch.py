"""bench/bench_torch.py -- the PyTorch twin of bench_convlstm.R: the R torch
tutorial's ConvLSTM (after ndrplz/ConvLSTM_pytorch) written here in plain
PyTorch, one training step timed (Adam, MSE on the last layer's last h) on the
CPU, and the process's peak resident memory growth measured the same way.
With --model forecaster: Shi et al.'s encoder-forecaster (EncoderForecaster,
the reference of the package's fixtures) at issue 34's shape, hidden 48-48,
5x5 kernels, 4x4 patches of 64x64 frames, 10 input and 10 target frames,
MSE over the 10 forecast frames, Adam. With --model plain: a plain stack
where the convolutions are the work (ConvLSTM(16, [48, 48], [5, 5]), 20
frames of 16x16, MSE over the top layer's sequence, Adam).
Run by bench_cpu.sh with Debian's /usr/bin/python3 (python3-torch); not a test.

Prints one line: RESULT impl=torch median=<s> min=<s> rss_peak=<bytes> ...
"""
import argparse
import statistics
import time

import torch

from torch_common import ConvLSTM, EncoderForecaster, reset_hwm, status_bytes  # the references


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--model", default="tutorial", choices=["tutorial", "forecaster", "plain"])
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    fc, plain = a.model == "forecaster", a.model == "plain"
    b = a.batch
    steps, ch, height, width = ((10, 1, 64, 64) if fc else (20, 16, 16, 16) if plain
                                else (5, 1, 24, 24))
    x = torch.rand(b, steps, ch, height, width)
    y = (torch.rand(b, steps, ch, height, width) if fc else
         torch.rand(b, steps, 48, height, width) if plain else torch.rand(b, 1, height, width))

    rss0 = status_bytes("VmRSS")
    hwm_ok = reset_hwm()

    model = (EncoderForecaster(1, [48, 48], [5, 5], patch=4) if fc else
             ConvLSTM(16, [48, 48], [5, 5]) if plain else ConvLSTM(1, [64, 1], [3, 3]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def forward():
        if fc:
            return model(x, steps)
        if plain:
            return model(x)[0][-1]
        return model(x)[1][-1][0]

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        loss = step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    rss_peak = status_bytes("VmHWM") - rss0 if hwm_ok else float("nan")
    if a.verbose:
        print("step times:", " ".join("%.3f" % t for t in times))
    print("RESULT impl=torch median=%.6f min=%.6f rss_peak=%.0f alloc_peak=nan "
          "reserved_peak=nan steps=%d loss=%.6g backend=torch-%s-%dthreads model=%s"
          % (statistics.median(times), min(times), rss_peak, a.steps, loss,
             torch.__version__, torch.get_num_threads(), a.model))


if __name__ == "__main__":
    main()
