"""bench/bench_memory_mnist64.py -- PyTorch's side of bench_memory_mnist64.sh:
one training step of the mnist64 model (1 -> [64, 64], 3x3, T = 10, 64x64,
Adam, MSE on the last state) with the reference ConvLSTM of inst/python, the
growth of VmHWM over it (reset through /proc/self/clear_refs).

    python3 bench/bench_memory_mnist64.py BATCH
"""
import sys
import time

import torch

from torch_common import ConvLSTM, reset_hwm, status_bytes


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    b = int(sys.argv[1])
    model = ConvLSTM(1, [64, 64], [3, 3])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        _, last = model(x)
        loss = torch.nn.functional.mse_loss(last[-1][0], y)
        loss.backward()
        opt.step()

    step(torch.rand(1, 2, 1, 8, 8), torch.rand(1, 64, 8, 8))  # warm-up: the process's costs
    x, y = torch.rand(b, 10, 1, 64, 64), torch.rand(b, 64, 64, 64)
    r0 = status_bytes("VmRSS")
    if not reset_hwm():
        sys.exit("bench_memory_mnist64.py: /proc/self/clear_refs refused: no VmHWM growth to measure")
    t0 = time.process_time()
    step(x, y)
    cpu = time.process_time() - t0
    print("torch batch %d: VmHWM growth %.1f MiB, CPU %.2f s"
          % (b, (status_bytes("VmHWM") - r0) / 2**20, cpu))


if __name__ == "__main__":
    main()
