"""inst/python/torch_convlstm.py -- the reference ConvLSTM in plain PyTorch,
the R torch tutorial's model (after ndrplz/ConvLSTM_pytorch): per layer one
Conv2d over cat(x_t, h_{t-1}) giving the gates i, f, o, g; zero initial state;
layer l+1 reads layer l's output sequence. Its state-dict names and layout are
convlstm's, so a model saved by convlstm_save() loads into it unchanged.

Installed with the package (system.file("python", package = "convlstm")), so
that a user can check convlstm's weights and outputs against PyTorch. The one
copy that safetensors_check.py beside it, tools/make_fixtures.py and both
benchmarks import; PyTorch is never a dependency of the R package.
"""
import torch
from torch import nn


class ConvLSTMCell(nn.Module):
    def __init__(self, input_dim, hidden_dim, kernel_size, bias=True):
        super().__init__()
        self.hidden_dim = hidden_dim
        # one convolution produces all four gates: channels [i | f | o | g]
        self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, kernel_size,
                              padding=kernel_size // 2, bias=bias)

    def forward(self, x, state):
        h_prev, c_prev = state
        z = self.conv(torch.cat([x, h_prev], dim=1))
        zi, zf, zo, zg = torch.split(z, self.hidden_dim, dim=1)
        c = torch.sigmoid(zf) * c_prev + torch.sigmoid(zi) * torch.tanh(zg)
        h = torch.sigmoid(zo) * torch.tanh(c)
        return h, c


class ConvLSTM(nn.Module):
    def __init__(self, input_dim, hidden_dims, kernel_sizes, bias=True):
        super().__init__()
        # the attribute name makes the state-dict keys cell_list.<l>.conv.weight
        # / .bias, the names the package uses
        dims = [input_dim] + list(hidden_dims[:-1])
        self.cell_list = nn.ModuleList(
            ConvLSTMCell(d, h, k, bias) for d, h, k in zip(dims, hidden_dims, kernel_sizes))

    def forward(self, x, last_only=False):
        """x [B, T, C, H, W] -> (layer outputs, layer last states (h, c)), as the
        tutorial's module returns; last_only: just the last layer's last h,
        without stacking that layer's outputs (what a loss on it needs)."""
        B, T, _, H, W = x.shape
        layer_outputs, last_states = [], []
        cur = x
        for li, cell in enumerate(self.cell_list):
            h = x.new_zeros(B, cell.hidden_dim, H, W)
            c = torch.zeros_like(h)
            seq = []
            for t in range(T):
                h, c = cell(cur[:, t], (h, c))
                seq.append(h)
            if last_only and li + 1 == len(self.cell_list):
                return h
            cur = torch.stack(seq, dim=1)
            layer_outputs.append(cur)
            last_states.append((h, c))
        return layer_outputs, last_states
