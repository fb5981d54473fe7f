"""inst/python/torch_convlstm.py -- the reference ConvLSTM in plain PyTorch,
the R torch tutorial's model (after ndrplz/ConvLSTM_pytorch): per layer one
Conv2d over cat(x_t, h_{t-1}) giving the gates i, f, o, g; zero initial state;
layer l+1 reads layer l's output sequence. Its state-dict names and layout are
convlstm's, so a model saved by convlstm_save() loads into it unchanged.
With peephole="position" or "channel", the cell is Shi et al. (2015)'s: the
i and f gates also see w_ci * c_{t-1} and w_cf * c_{t-1}, the o gate
w_co * c_t (Hadamard products), weights cell_list.<l>.w_ci / w_cf / w_co of
shape [hidden, H, W] (per position: frame_size (H, W) fixed) or
[hidden, 1, 1] (per channel), zeros at first as in convlstm().
With a recurrent kernel that differs from the input kernel (Shi et al.'s
"ConvLSTM(9x9)-1x1"), the cell is two convolutions, conv_x over x_t (with the
bias) and conv_h over h_{t-1} (without), each padded "same" for its own kernel,
both with the layer's dilation, their outputs summed: state-dict names
cell_list.<l>.conv_x.weight, conv_x.bias, conv_h.weight, as convlstm's.
EncoderForecaster is Shi et al.'s encoder-forecaster (convlstm_forecaster()):
two such stacks, the forecaster's first layer a cell of no input
(input_dim 0), a 1x1 head over all forecaster states, frames in and out as
patches.

Installed with the package (system.file("python", package = "convlstm")), so
that a user can check convlstm's weights and outputs against PyTorch. The one
copy that safetensors_check.py beside it, tools/make_fixtures.py and both
benchmarks import; PyTorch is never a dependency of the R package.
"""
import torch
import torch.nn.functional as F
from torch import nn


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class ConvLSTMCell(nn.Module):
    def __init__(self, input_dim, hidden_dim, kernel_size, bias=True, dilation=1,
                 peephole=None, frame_size=None, recurrent_kernel_size=None):
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.peephole = peephole
        kh, kw = _pair(kernel_size)
        dh, dw = _pair(dilation)
        rk = _pair(recurrent_kernel_size or kernel_size)
        # input_dim 0: a cell with no input (the forecaster's first layer,
        # EncoderForecaster), its gates one convolution over h_{t-1} alone
        # with the recurrent kernel, named conv whatever the kernels
        self.split = input_dim > 0 and rk != (kh, kw)
        if input_dim == 0:
            kh, kw = rk

        def same(k):  # "same" padding d (k - 1) / 2 for odd kernels
            return (dh * (k[0] - 1) // 2, dw * (k[1] - 1) // 2)
        if self.split:  # two convolutions, summed: conv_x(x_t) + conv_h(h_{t-1})
            self.conv_x = nn.Conv2d(input_dim, 4 * hidden_dim, (kh, kw), padding=same((kh, kw)),
                                    dilation=(dh, dw), bias=bias)
            self.conv_h = nn.Conv2d(hidden_dim, 4 * hidden_dim, rk, padding=same(rk),
                                    dilation=(dh, dw), bias=False)
        else:  # one convolution produces all four gates: channels [i | f | o | g]
            self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, (kh, kw),
                                  padding=same((kh, kw)), dilation=(dh, dw), bias=bias)
        if peephole is not None:
            # registered after conv: the state-dict order is weight, bias,
            # w_ci, w_cf, w_co, as convlstm's
            shape = (hidden_dim,) + (tuple(frame_size) if peephole == "position" else (1, 1))
            for name in ("w_ci", "w_cf", "w_co"):
                self.register_parameter(name, nn.Parameter(torch.zeros(shape)))

    def forward(self, x, state, masks=None):
        """x: [B, input_dim, H, W], or None for a cell of no input;
        masks: None, or (input mask, h mask) for dropout, each (or None)
        [B, C, H, W], one mask shared by the four gates: x_t and h_{t-1}
        times them before the convolution; or [B, 4, C, H, W], one per gate
        (Keras's ConvLSTM2D): gate g (in the order i, f, o, g) convolves
        x_t * mask[:, g] and h_{t-1} * mask[:, g] with its own rows of the
        weight, four convolutions as Keras's ConvLSTMCell computes them."""
        h_prev, c_prev = state
        mx, mh = masks if masks is not None else (None, None)
        if (mx is not None and mx.dim() == 5) or (mh is not None and mh.dim() == 5):
            zi, zf, zo, zg = self._per_gate(x, h_prev, mx, mh)
        else:
            x = x if mx is None else x * mx
            h_prev = h_prev if mh is None else h_prev * mh
            if self.split:
                z = self.conv_x(x) + self.conv_h(h_prev)
            else:
                z = self.conv(h_prev if x is None else torch.cat([x, h_prev], dim=1))
            zi, zf, zo, zg = torch.split(z, self.hidden_dim, dim=1)
        if self.peephole is not None:
            zi = zi + self.w_ci * c_prev
            zf = zf + self.w_cf * c_prev
        c = torch.sigmoid(zf) * c_prev + torch.sigmoid(zi) * torch.tanh(zg)
        if self.peephole is not None:
            zo = zo + self.w_co * c  # the new cell state, c_t
        h = torch.sigmoid(zo) * torch.tanh(c)
        return h, c

    def _per_gate(self, x, h_prev, mx, mh):
        """The four gates' pre-activations, each from its own masked copies
        of x and h_{t-1} (a mask None: unmasked) and its own weight rows."""
        hd = self.hidden_dim
        zs = []
        for g in range(4):
            xg = x if mx is None or x is None else x * (mx[:, g] if mx.dim() == 5 else mx)
            hg = h_prev if mh is None else h_prev * (mh[:, g] if mh.dim() == 5 else mh)
            rows = slice(g * hd, (g + 1) * hd)
            if self.split:
                cx, ch = self.conv_x, self.conv_h
                bias = None if cx.bias is None else cx.bias[rows]
                zs.append(F.conv2d(xg, cx.weight[rows], bias, padding=cx.padding,
                                   dilation=cx.dilation) +
                          F.conv2d(hg, ch.weight[rows], None, padding=ch.padding,
                                   dilation=ch.dilation))
                continue
            conv = self.conv
            bias = None if conv.bias is None else conv.bias[rows]
            zs.append(F.conv2d(hg if xg is None else torch.cat([xg, hg], dim=1), conv.weight[rows],
                               bias,
                               padding=conv.padding, dilation=conv.dilation))
        return zs


class ConvLSTM(nn.Module):
    def __init__(self, input_dim, hidden_dims, kernel_sizes, bias=True, dilations=None,
                 peephole=None, frame_size=None, recurrent_kernel_sizes=None, head=False):
        """kernel_sizes: per layer an int or (height, width); dilations: None
        (1) or per layer an int or (height, width); peephole: None, "channel"
        or "position" (then frame_size = (H, W)); recurrent_kernel_sizes: None
        (the input kernels) or per layer an int or (height, width); head: a
        1x1 convolution with bias from the last layer's h to input_dim
        channels (convlstm(head = "top")), applied by frames()."""
        super().__init__()
        if head:  # state-dict keys head.weight, head.bias
            self.head = nn.Conv2d(hidden_dims[-1], input_dim, 1)
        # the attribute name makes the state-dict keys cell_list.<l>.conv.weight
        # / .bias, the names the package uses
        dims = [input_dim] + list(hidden_dims[:-1])
        dilations = dilations or [1] * len(hidden_dims)
        rks = recurrent_kernel_sizes or [None] * len(hidden_dims)
        self.cell_list = nn.ModuleList(
            ConvLSTMCell(d, h, k, bias, dl, peephole, frame_size, rk)
            for d, h, k, dl, rk in zip(dims, hidden_dims, kernel_sizes, dilations, rks))

    def forward(self, x, last_only=False, state=None, masks=None):
        """x [B, T, C, H, W] -> (layer outputs, layer last states (h, c)), as the
        tutorial's module returns; last_only: just the last layer's last h,
        without stacking that layer's outputs (what a loss on it needs);
        state: None (zeros) or each layer's initial (h, c), as the module
        returns its last states; masks: None, or per layer (input mask, h
        mask) of dropout (dropout_masks()), the same at every step."""
        B, T, _, H, W = x.shape
        layer_outputs, last_states = [], []
        cur = x
        for li, cell in enumerate(self.cell_list):
            if state is None:
                h = x.new_zeros(B, cell.hidden_dim, H, W)
                c = torch.zeros_like(h)
            else:
                h, c = state[li]
            seq = []
            for t in range(T):
                h, c = cell(cur[:, t], (h, c), None if masks is None else masks[li])
                seq.append(h)
            if last_only and li + 1 == len(self.cell_list):
                return h
            cur = torch.stack(seq, dim=1)
            layer_outputs.append(cur)
            last_states.append((h, c))
        return layer_outputs, last_states

    def frames(self, x, state=None):
        """The head over the last layer's h at every step: [B, T, input_dim, H, W]."""
        outputs, _ = self(x, state=state)
        top = outputs[-1]
        B, T = top.shape[:2]
        y = self.head(top.reshape(B * T, *top.shape[2:]))
        return y.reshape(B, T, *y.shape[1:])


class EncoderForecaster(nn.Module):
    """Shi et al. (2015)'s encoder-forecaster (section 3.3, Fig. 3), as
    convlstm_forecaster() builds it. x [B, T_in, C, H, W] -> logits
    [B, horizon, C, H, W].

    Frames enter as patches, pixel_unshuffle(x_t, patch) (patched channel
    c*p*p + i*p + j holds pixel (c, y*p + i, x*p + j)): C*p*p channels of
    H/p x W/p. The encoder is the plain stack (ConvLSTM) over them from zero
    states, T_in steps. The forecaster has the encoder's hidden sizes and
    kernels; its layer 0 takes no input (gates: one convolution over
    h_{t-1}, the recurrent kernel, named forecaster.cell_list.0.conv), layer
    l > 0 reads forecaster h_{l-1} of the same step; layer l starts from
    encoder layer l's last (h, c). Each of the horizon steps, the head (a
    1x1 convolution with bias over the channel concatenation of all
    forecaster h, layer 0 first) gives C*p*p channels, pixel_shuffle()d back
    into the frame. No activation: the output is logits for
    BCEWithLogits. State-dict names: encoder.cell_list.<l>.*,
    forecaster.cell_list.<l>.*, head.weight [C*p*p, sum(hidden), 1, 1],
    head.bias [C*p*p].

    peephole: "channel" (the default, the paper's), "none" or "position"
    (then frame_size: the frame's (H, W), before patching)."""

    def __init__(self, input_dim, hidden_dims, kernel_sizes, patch=1,
                 recurrent_kernel_sizes=None, peephole="channel", bias=True, frame_size=None):
        super().__init__()
        self.patch = patch
        peep = None if peephole in (None, "none") else peephole
        patched = None
        if peep == "position":
            patched = (frame_size[0] // patch, frame_size[1] // patch)
        c_in = input_dim * patch * patch
        self.encoder = ConvLSTM(c_in, hidden_dims, kernel_sizes, bias, peephole=peep,
                                frame_size=patched, recurrent_kernel_sizes=recurrent_kernel_sizes)
        self.forecaster = ConvLSTM(0, hidden_dims, kernel_sizes, bias, peephole=peep,
                                   frame_size=patched,
                                   recurrent_kernel_sizes=recurrent_kernel_sizes)
        self.head = nn.Conv2d(sum(hidden_dims), c_in, 1, bias=True)

    def unshuffle(self, x):
        """[B, T, C, H, W] -> [B, T, C*p*p, H/p, W/p]."""
        B, T = x.shape[:2]
        z = F.pixel_unshuffle(x.reshape((B * T,) + tuple(x.shape[2:])), self.patch)
        return z.reshape((B, T) + tuple(z.shape[1:]))

    def encode(self, x):
        """The encoder's last (h, c) per layer."""
        return self.encoder(self.unshuffle(x))[1]

    def forecast(self, state, horizon):
        """horizon frames of logits [B, horizon, C, H, W] from the encoder's
        states; also returns the forecaster's last (h, c) per layer."""
        state = list(state)
        frames = []
        for _ in range(horizon):
            inp, hs = None, []
            for l, cell in enumerate(self.forecaster.cell_list):
                state[l] = cell(inp, state[l])
                inp = state[l][0]
                hs.append(inp)
            frames.append(F.pixel_shuffle(self.head(torch.cat(hs, dim=1)), self.patch))
        return torch.stack(frames, dim=1), state

    def forward(self, x, horizon):
        return self.forecast(self.encode(x), horizon)[0]


def dropout_masks(model, B, H, W, dropout, recurrent_dropout, generator=None,
                  per_gate=False):
    """Variational dropout masks as convlstm applies them (Keras's
    ConvLSTM2D): per layer an input mask [B, in, H, W] and an h mask
    [B, hidden, H, W] shared by the four gates, or with per_gate
    [B, 4, in, H, W] and [B, 4, hidden, H, W], one per gate; each element
    kept (1 / (1 - p)) with probability 1 - p, else 0; None where p is 0."""
    def one(C, p):
        if p <= 0:
            return None
        if per_gate:  # gate by gate, each a whole [B, C, H, W] mask
            keep = (torch.rand(4, B, C, H, W, generator=generator) >= p).transpose(0, 1)
        else:
            keep = torch.rand(B, C, H, W, generator=generator) >= p
        return keep.float().contiguous() / (1.0 - p)
    masks = []
    for cell, p, q in zip(model.cell_list, dropout, recurrent_dropout):
        C_in = cell.input_dim
        masks.append((one(C_in, p), one(cell.hidden_dim, q)))
    return masks


def rollout(model, x, horizon, state=None, detach_frames=False, masks=None, truth=None,
            choices=None):
    """Multi-frame forecasting: run x [B, T, C, H, W] (from state), then feed
    the last layer's last h back as the next input frame, horizon times
    (needs the last hidden size == input channels). Returns the predicted
    frames [B, horizon, C, H, W]: the first is the h after x's last step.
    Under autograd this is free-running training: the gradient of a frame's
    loss flows back through the fed-back frames as well as the states;
    detach_frames cuts the first path (the input's), keeping the second.
    masks: dropout's (dropout_masks()), the same at every step, the fed-back
    ones included (layer 0's input mask on each fed-back frame).
    truth [B, horizon, C, H, W], choices (horizon - 1 booleans): scheduled
    sampling, the k-th fed-back step (k = 0..) reads the true frame
    truth[:, k] where choices[k], a constant (no gradient reaches the
    prediction it replaces), else the model's own as above."""
    _, st = model(x, state=state, masks=masks)
    frames = [st[-1][0]]
    for k in range(horizon - 1):
        if choices is not None and choices[k]:
            fed = truth[:, k]
        else:
            fed = frames[-1].detach() if detach_frames else frames[-1]
        _, st = model(fed.unsqueeze(1), state=st, masks=masks)
        frames.append(st[-1][0])
    return torch.stack(frames, dim=1)
