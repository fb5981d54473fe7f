# helper-cuda-math.R -- the suite's CUDA models use strict float32 convolutions.
# Why: the parity tests hold CUDA to the CPU and to PyTorch's float32 fixtures
# at float32 tolerances (1e-5 relative); TF32, the CUDA default, rounds every
# convolution input to 10 mantissa bits (relative 2^-11 = 4.9e-4 per operand)
# and would fail them for that reason alone. test-model.R tests TF32 itself,
# against the CPU, at a tolerance stated there.
options(convlstm.cuda_tf32 = FALSE)
