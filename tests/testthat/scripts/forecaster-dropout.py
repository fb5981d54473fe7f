"""forecaster-dropout.py -- the PyTorch reference of an encoder-forecaster's
training step with given dropout masks (test-forecaster-dropout.R):

    python3 forecaster-dropout.py DIR PYTHON_DIR

PYTHON_DIR holds torch_convlstm.py (the package's inst/python). DIR holds,
written by the test (row-major float32, R's arrays with their dims
reversed):
  spec.txt   "config input_dim patch peephole hidden_1 .. hidden_L kernel_1 .. kernel_L",
             "x B T C H W", "y B K C H W", then per tensor "tensor NAME dims..."
             (state-dict order: its file t<i>.f32) and per mask
             "mask LAYER KIND dims..." (core layer 0 .. 2L-1, the encoder's
             first; KIND 0 the input's, 1 h's; its file m<LAYER>_<KIND>.f32)
  x.f32, y.f32, t<i>.f32, m<l>_<k>.f32
Writes DIR/loss.txt (the mean squared error of the K forecast frames, as
repr) and DIR/g<i>.f32, the gradient of tensor i. The masks multiply x_t
and h_{t-1} at every step (torch_convlstm.ConvLSTMCell, Keras's
ConvLSTM2D); the forecaster's layers take theirs in the forecast loop,
their first h_{t-1} the encoder's last state.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, sys.argv[2])
from torch_convlstm import EncoderForecaster  # noqa: E402


def read(path, dims):
    with open(path, "rb") as f:
        raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(dims).clone()


def main(d):
    tensors, masks, cfg, x_dims, y_dims = [], {}, None, None, None
    for line in open(os.path.join(d, "spec.txt")):
        w = line.split()
        if w[0] == "config":
            cfg = w[1:]
        elif w[0] == "x":
            x_dims = [int(v) for v in w[1:]]
        elif w[0] == "y":
            y_dims = [int(v) for v in w[1:]]
        elif w[0] == "tensor":
            tensors.append((w[1], [int(v) for v in w[2:]]))
        elif w[0] == "mask":
            masks[(int(w[1]), int(w[2]))] = [int(v) for v in w[3:]]
    input_dim, patch, peephole = int(cfg[0]), int(cfg[1]), cfg[2]
    rest = [int(v) for v in cfg[3:]]
    L = len(rest) // 2
    model = EncoderForecaster(input_dim, rest[:L], rest[L:], patch=patch, peephole=peephole)
    sd = {name: read(os.path.join(d, "t%d.f32" % i), dims)
          for i, (name, dims) in enumerate(tensors)}
    model.load_state_dict(sd, strict=True)

    def mask(l, k):
        dims = masks.get((l, k))
        return None if dims is None else read(os.path.join(d, "m%d_%d.f32" % (l, k)), dims)

    enc = [(mask(l, 0), mask(l, 1)) for l in range(L)]
    dec = [(mask(L + l, 0), mask(L + l, 1)) for l in range(L)]
    x = read(os.path.join(d, "x.f32"), x_dims)
    y = read(os.path.join(d, "y.f32"), y_dims)
    _, state = model.encoder(model.unshuffle(x), masks=enc)
    state = list(state)
    frames = []
    for _ in range(y_dims[1]):
        inp, hs = None, []
        for l, cell in enumerate(model.forecaster.cell_list):
            state[l] = cell(inp, state[l], dec[l])
            inp = state[l][0]
            hs.append(inp)
        frames.append(F.pixel_shuffle(model.head(torch.cat(hs, dim=1)), patch))
    loss = F.mse_loss(torch.stack(frames, dim=1), y)
    loss.backward()
    with open(os.path.join(d, "loss.txt"), "w") as f:
        f.write(repr(loss.item()) + "\n")
    params = dict(model.named_parameters())
    for i, (name, _) in enumerate(tensors):
        params[name].grad.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "g%d.f32" % i))


if __name__ == "__main__":
    main(sys.argv[1])
