"""bench/bench_torch.py -- the PyTorch twin of bench_convlstm.R: the R torch
tutorial's ConvLSTM (after ndrplz/ConvLSTM_pytorch) written here in plain
PyTorch, one training step timed (Adam, MSE on the last layer's last h) on the
CPU, and the process's peak resident memory growth measured the same way.
Run by bench_cpu.sh with Debian's /usr/bin/python3 (python3-torch); not a test.

Prints one line: RESULT impl=torch median=<s> min=<s> rss_peak=<bytes> ...
"""
import argparse
import statistics
import time

import torch
from torch import nn


class ConvLSTMCell(nn.Module):
    # One convolution over cat(x, h) gives all four gates, in the order i, f, o, g.
    def __init__(self, input_dim, hidden_dim, kernel_size, bias=True):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, kernel_size,
                              padding=kernel_size // 2, bias=bias)

    def forward(self, x, state):
        h, c = state
        z = self.conv(torch.cat([x, h], dim=1))
        i, f, o, g = torch.split(z, self.hidden_dim, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class ConvLSTM(nn.Module):
    def __init__(self, input_dim, hidden_dims, kernel_sizes, bias=True):
        super().__init__()
        dims = [input_dim] + list(hidden_dims[:-1])
        self.cell_list = nn.ModuleList(
            ConvLSTMCell(d, h, k, bias) for d, h, k in zip(dims, hidden_dims, kernel_sizes))

    def forward(self, x):
        # x: [B, T, C, H, W]; returns (layer outputs, layer last states (h, c))
        b, steps, _, height, width = x.shape
        layer_input = x
        outputs, last_states = [], []
        for cell in self.cell_list:
            h = x.new_zeros(b, cell.hidden_dim, height, width)
            c = x.new_zeros(b, cell.hidden_dim, height, width)
            hs = []
            for t in range(steps):
                h, c = cell(layer_input[:, t], (h, c))
                hs.append(h)
            layer_input = torch.stack(hs, dim=1)
            outputs.append(layer_input)
            last_states.append((h, c))
        return outputs, last_states


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5\n")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    b, steps, ch, height, width = a.batch, 5, 1, 24, 24
    x = torch.rand(b, steps, ch, height, width)
    y = torch.rand(b, 1, height, width)

    rss0 = status_bytes("VmRSS")
    hwm_ok = reset_hwm()

    model = ConvLSTM(1, [64, 1], [3, 3])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        _, last_states = model(x)
        loss = nn.functional.mse_loss(last_states[-1][0], y)
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
          "reserved_peak=nan steps=%d loss=%.6g backend=torch-%s-%dthreads"
          % (statistics.median(times), min(times), rss_peak, a.steps, loss,
             torch.__version__, torch.get_num_threads()))


if __name__ == "__main__":
    main()
