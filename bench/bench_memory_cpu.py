"""bench/bench_memory_cpu.py -- PyTorch's side of bench_memory_cpu.sh: one
training step of a config (mnist64, video64 or tutorial; see the .sh) with
Adam and MSE on the last state, with the reference ConvLSTM of inst/python,
the growth of VmHWM over it (reset through /proc/self/clear_refs).

    python3 bench/bench_memory_cpu.py CONFIG BATCH
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inst", "python"))
from torch_convlstm import ConvLSTM  # noqa: E402


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


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
    r0 = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.process_time()
    step(x, y)
    cpu = time.process_time() - t0
    print("torch %s batch %d: VmHWM growth %.1f MiB, CPU %.2f s"
          % (name, b, (status("VmHWM") - r0) / 2**20, cpu))


if __name__ == "__main__":
    main()
