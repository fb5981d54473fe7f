#!/usr/bin/python3
"""test-torch-forecaster.py -- checks the PyTorch reference encoder-forecaster
(inst/python/torch_convlstm.py's EncoderForecaster) against the contract the
package's convlstm_forecaster() is built to: Shi et al. (2015)'s Table 1
parameter counts (7,585,296 for 5x5 kernels, hidden 128-64-64, 4x4
patches), the state-dict names and shapes, the patch order, the
forecaster's first layer taking no input and starting from the encoder's
states. Each check fails for the reason its message names.

    /usr/bin/python3 tools/test-torch-forecaster.py     (exit 0: all passed)

A developer tool (PyTorch 1.13, Debian's python3-torch); make_fixtures_forecaster.py
runs it before writing fixtures.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "inst", "python"))
from torch_convlstm import EncoderForecaster  # noqa: E402

# Shi et al. (2015), Table 1: the Moving MNIST encoder-forecasters (C = 1,
# 64x64 frames, 4x4 patches), (input kernel, state kernel, hidden) -> count
TABLE1 = [
    ((5, 5, [256]), 13524496),
    ((5, 5, [128, 128]), 10042896),
    ((5, 5, [128, 64, 64]), 7585296),
    ((9, 1, [128, 128]), 11550224),
    ((9, 1, [128, 64, 64]), 8830480),
]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def check(ok, what):
    if not ok:
        sys.exit("test-torch-forecaster: FAILED: " + what)


def test_table1():
    for (k, rk, hidden), want in TABLE1:
        m = EncoderForecaster(1, hidden, [k] * len(hidden), patch=4,
                              recurrent_kernel_sizes=[rk] * len(hidden))
        got = n_params(m)
        check(got == want, "ConvLSTM(%dx%d)-%dx%d-%s: %d parameters, Table 1 has %d"
              % (k, k, rk, rk, "-".join(map(str, hidden)), got, want))
    # the contract's split of the headline model
    m = EncoderForecaster(1, [128, 64, 64], [5, 5, 5], patch=4)
    parts = [n_params(m.encoder), n_params(m.forecaster), n_params(m.head)]
    check(parts == [3892992, 3688192, 4112], "encoder/forecaster/head %s" % parts)


def test_names():
    m = EncoderForecaster(2, [4, 3], [3, 3], patch=2, recurrent_kernel_sizes=[1, (5, 3)])
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    want = {
        "encoder.cell_list.0.conv_x.weight": (16, 8, 3, 3),
        "encoder.cell_list.0.conv_x.bias": (16,),
        "encoder.cell_list.0.conv_h.weight": (16, 4, 1, 1),
        "encoder.cell_list.1.conv_x.weight": (12, 4, 3, 3),
        "encoder.cell_list.1.conv_x.bias": (12,),
        "encoder.cell_list.1.conv_h.weight": (12, 3, 5, 3),
        # the forecaster's first layer: one convolution over h, the state kernel
        "forecaster.cell_list.0.conv.weight": (16, 4, 1, 1),
        "forecaster.cell_list.0.conv.bias": (16,),
        "forecaster.cell_list.1.conv_x.weight": (12, 4, 3, 3),
        "forecaster.cell_list.1.conv_x.bias": (12,),
        "forecaster.cell_list.1.conv_h.weight": (12, 3, 5, 3),
        "head.weight": (8, 7, 1, 1),
        "head.bias": (8,),
    }
    for part in ("encoder", "forecaster"):
        for l, h in enumerate((4, 3)):
            for g in ("w_ci", "w_cf", "w_co"):
                want["%s.cell_list.%d.%s" % (part, l, g)] = (h, 1, 1)
    check(shapes == want, "state dict %s, contract %s" % (sorted(shapes.items()),
                                                          sorted(want.items())))
    m = EncoderForecaster(1, [3], [(5, 3)], peephole="none", bias=False)
    check(sorted(m.state_dict()) == ["encoder.cell_list.0.conv.weight",
                                     "forecaster.cell_list.0.conv.weight", "head.bias",
                                     "head.weight"],
          "no peephole, no bias: %s" % sorted(m.state_dict()))
    check(tuple(m.state_dict()["forecaster.cell_list.0.conv.weight"].shape) == (12, 3, 5, 3),
          "forecaster layer 0 of kernel (5, 3) without a state kernel")


def test_patch_order():
    # patched channel c*p*p + i*p + j holds pixel (c, y*p + i, x*p + j)
    C, p, H, W = 2, 2, 4, 6
    x = torch.arange(C * H * W, dtype=torch.float32).reshape(1, 1, C, H, W)
    m = EncoderForecaster(C, [2], [3], patch=p)
    z = m.unshuffle(x)
    check(tuple(z.shape) == (1, 1, C * p * p, H // p, W // p), "patched shape %s" % (z.shape,))
    for c in range(C):
        for i in range(p):
            for j in range(p):
                for y in range(H // p):
                    for xx in range(W // p):
                        check(z[0, 0, c * p * p + i * p + j, y, xx] == x[0, 0, c, y * p + i, xx * p + j],
                              "patch order at c %d i %d j %d" % (c, i, j))
    check(torch.equal(F.pixel_shuffle(z[0], p), x[0]), "pixel_shuffle undoes the patches")


def test_forecaster_semantics():
    torch.manual_seed(1)
    m = EncoderForecaster(1, [3, 2], [3, 3], patch=2)
    for p in m.parameters():  # peepholes start at zero; make them matter
        torch.nn.init.uniform_(p, -0.5, 0.5)
    x = torch.rand(2, 3, 1, 8, 8)
    with torch.no_grad():
        out = m(x, 2)
        check(tuple(out.shape) == (2, 2, 1, 8, 8), "output shape %s" % (out.shape,))
        # the first frame by hand: forecaster layer 0's gates from h alone
        enc = m.encode(x)
        f0, f1 = m.forecaster.cell_list
        (h0, c0), (h1, c1) = enc
        z = F.conv2d(h0, f0.conv.weight, f0.conv.bias, padding=1)
        zi, zf, zo, zg = torch.split(z, 3, dim=1)
        zi, zf = zi + f0.w_ci * c0, zf + f0.w_cf * c0
        c = torch.sigmoid(zf) * c0 + torch.sigmoid(zi) * torch.tanh(zg)
        h = torch.sigmoid(zo + f0.w_co * c) * torch.tanh(c)
        g1 = f1(h, (h1, c1))[0]
        frame = F.pixel_shuffle(m.head(torch.cat([h, g1], dim=1)), 2)
        check(torch.allclose(out[:, 0], frame, atol=1e-6), "first forecast frame by hand")
        # a longer horizon begins with the same frames
        check(torch.allclose(m(x, 4)[:, :2], out, atol=0), "horizon 4 starts as horizon 2")
        # the forecast depends on the input only through the encoder's states
        zero = [(torch.zeros_like(h), torch.zeros_like(c)) for h, c in enc]
        check(not torch.allclose(m.forecast(zero, 2)[0], out), "forecast ignores the encoder")


if __name__ == "__main__":
    test_table1()
    test_names()
    test_patch_order()
    test_forecaster_semantics()
    print("test-torch-forecaster: Table 1 counts (%s), names, patch order, forecaster: ok"
          % ", ".join("{:,}".format(n) for _, n in TABLE1))
