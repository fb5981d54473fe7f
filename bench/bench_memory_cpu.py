"""bench/bench_memory_cpu.py -- PyTorch's side of bench_memory_cpu.sh: one
training step of a config (mnist64, video64 or tutorial; see the .sh) with
Adam and MSE on the last state, with the reference ConvLSTM of inst/python,
the growth of VmHWM over it (reset through /proc/self/clear_refs).

    python3 bench/bench_memory_cpu.py CONFIG BATCH
"""
import sys
import time

import torch

from torch_common import ConvLSTM, reset_hwm, status_bytes


CONFIGS = {"mnist64": (1, [64, 64], 10, 64), "video64": (3, [64], 10, 64),
           "tutorial": (1, [64, 1], 20, 24)}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    name, b = sys.argv[1], int(sys.argv[2])
    n, hidden, t, size = CONFIGS[name]
    k = hidden[-1]
    model = ConvLSTM(n, hidden, [3] * len(hidden))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        _, last = model(x)
        loss = torch.nn.functional.mse_loss(last[-1][0], y)
        loss.backward()
        opt.step()

    step(torch.rand(1, 2, n, 8, 8), torch.rand(1, k, 8, 8))  # warm-up: the process's costs
    x, y = torch.rand(b, t, n, size, size), torch.rand(b, k, size, size)
    r0 = status_bytes("VmRSS")
    if not reset_hwm():
        sys.exit("bench_memory_cpu.py: /proc/self/clear_refs refused: no VmHWM growth to measure")
    t0 = time.process_time()
    step(x, y)
    cpu = time.process_time() - t0
    print("torch %s batch %d: VmHWM growth %.1f MiB, CPU %.2f s"
          % (name, b, (status_bytes("VmHWM") - r0) / 2**20, cpu))


if __name__ == "__main__":
    main()
