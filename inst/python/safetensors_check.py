#!/usr/bin/python3
"""safetensors_check.py -- opens convlstm's model files in PyTorch, and writes
a PyTorch state dict as a safetensors file for convlstm to open. Installed
with the package: system.file("python", "safetensors_check.py", package =
"convlstm"). Used by tests/testthat/test-reliability-save.R (skipped when
/usr/bin/python3 or torch is missing).

  safetensors_check.py read FILE X.bin B T C H W OUT.bin
      Loads FILE: with the safetensors package (safetensors.torch.load_file)
      when it is installed, else with the reader below, which applies the
      format's rules itself (8-byte little-endian header length, JSON header,
      dtypes, shapes, offsets that tile the data). Builds the R torch
      tutorial's ConvLSTM (torch_convlstm.py, beside this file) with the architecture in
      the file's metadata (peepholes, kernel widths and dilations included), loads the weights with load_state_dict(strict=True),
      runs it on X.bin (float32, row-major [B, T, C, H, W]) and writes the last
      layer's output sequence (with a head, convlstm.head "top": the head's
      frames) to OUT.bin (float32, row-major). Prints a JSON
      summary: reader, tensors (name: shape), metadata.
  safetensors_check.py write FILE SEED INPUT_DIM HIDDEN,.. KERNEL,.. BIAS X.bin B T C H W OUT.bin [RKERNEL,..]
      A ConvLSTM with torch's default initialisation (torch.manual_seed(SEED))
      saved as a bare state dict (no convlstm metadata, as save_file would
      write it), and its last layer's output on X.bin written to OUT.bin;
      with RKERNEL, its state-to-state kernels (cells of two convolutions
      where they differ from KERNEL).

It needs PyTorch (and optionally the safetensors package); the R package
never does.
"""

import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_convlstm import ConvLSTM  # noqa: E402  (the one reference model)

DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
          "U8": (torch.uint8, 1), "I8": (torch.int8, 1), "BOOL": (torch.bool, 1),
          "I16": (torch.int16, 2)}


def fail(msg):
    sys.stderr.write("safetensors_check: %s\n" % msg)
    sys.exit(1)


def read_plain(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail("file too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8 or n > 100_000_000:
        fail("header length %d impossible" % n)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    if not all(isinstance(v, str) for v in meta.values()):
        fail("metadata values must be strings")
    out, spans = {}, []
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            fail("tensor %s: keys %s" % (name, sorted(info)))
        dt, size = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        numel = 1
        for d in info["shape"]:
            numel *= d
        if e - b != numel * size:
            fail("tensor %s: %d bytes for %d elements" % (name, e - b, numel))
        spans.append((b, e))
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dt) if e > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    at = 0
    for b, e in sorted(spans):
        if b != at:
            fail("offsets do not tile the data")
        at = e
    if at != len(data):
        fail("data has %d bytes, tensors cover %d" % (len(data), at))
    return out, meta


def read_file(path):
    try:
        from safetensors import safe_open
        from safetensors.torch import load_file
    except ImportError:
        tensors, meta = read_plain(path)
        return tensors, meta, "struct+json+torch.frombuffer"
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    return load_file(path), meta, "safetensors"


def read_x(path, dims):
    with open(path, "rb") as f:
        raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(dims)


def write_out(model, x, path):
    with torch.no_grad():
        if hasattr(model, "head"):  # the model's outputs are the head's frames
            out = model.frames(x)
        else:
            out = model(x)[0][-1]
    out.contiguous().numpy().astype("<f4").tofile(path)


def model_from(tensors, meta):
    """The reference ConvLSTM of a file's metadata, its weights loaded."""
    hidden = json.loads(meta["convlstm.hidden_dims"])
    kernels = json.loads(meta["convlstm.kernel_sizes"])
    # non-square or dilated kernels: widths and dilations are recorded too
    # (absent: square, undilated); the weights' [out, in, kh, kw] must then
    # fit the (kh, kw) convolutions, or load_state_dict refuses them
    widths = json.loads(meta.get("convlstm.kernel_widths", "null")) or kernels
    dil_h = json.loads(meta.get("convlstm.dilation_h", "null")) or [1] * len(kernels)
    dil_w = json.loads(meta.get("convlstm.dilation_w", "null")) or [1] * len(kernels)
    peephole = meta.get("convlstm.peephole")  # absent: none
    frame = json.loads(meta["convlstm.peephole_size"]) if peephole == "position" else None
    # state-to-state kernels of their own (absent: the input kernels); a layer
    # whose two differ is two convolutions, conv_x and conv_h
    rk_h = json.loads(meta.get("convlstm.recurrent_kernel_sizes", "null"))
    rk_w = json.loads(meta.get("convlstm.recurrent_kernel_widths", "null"))
    model = ConvLSTM(int(meta["convlstm.input_dim"]), hidden, list(zip(kernels, widths)),
                     meta["convlstm.bias"] == "true", list(zip(dil_h, dil_w)),
                     peephole=peephole, frame_size=frame,
                     recurrent_kernel_sizes=list(zip(rk_h, rk_w)) if rk_h else None,
                     head=meta.get("convlstm.head") == "top")
    params = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_state_dict(params, strict=True)
    return model, params


def cmd_read(args):
    path, xfile, dims, outfile = args[0], args[1], [int(v) for v in args[2:7]], args[7]
    tensors, meta, reader = read_file(path)
    model, params = model_from(tensors, meta)
    for k, v in tensors.items():
        if k.startswith("optimizer."):
            base = k.split(".", 2)[2]
            if base not in params or params[base].shape != v.shape:
                fail("optimizer tensor %s has no parameter of its shape" % k)
    write_out(model, read_x(xfile, dims), outfile)
    print(json.dumps({"reader": reader,
                      "tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
                      "metadata": meta}))


def cmd_write(args):
    path, seed, input_dim = args[0], int(args[1]), int(args[2])
    hidden = [int(v) for v in args[3].split(",")]
    kernels = [int(v) for v in args[4].split(",")]
    bias = args[5] == "true"
    xfile, dims, outfile = args[6], [int(v) for v in args[7:12]], args[12]
    rks = [int(v) for v in args[13].split(",")] if len(args) > 13 else None
    torch.manual_seed(seed)
    model = ConvLSTM(input_dim, hidden, kernels, bias, recurrent_kernel_sizes=rks)
    write_plain(path, model.state_dict())
    write_out(model, read_x(xfile, dims), outfile)


def write_plain(path, sd):
    """A state dict as a bare safetensors file of float32 tensors, as
    safetensors' writer lays it out: tensors sorted by name, offsets in that
    order, the JSON header padded with spaces to a multiple of 8."""
    header, blobs, at = {}, [], 0
    for name in sorted(sd):
        b = sd[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(sd[name].shape),
                        "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("read", "write"):
        fail(__doc__)
    (cmd_read if sys.argv[1] == "read" else cmd_write)(sys.argv[2:])
