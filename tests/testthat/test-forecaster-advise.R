# test-forecaster-advise.R -- convlstm_memory_advise()'s time model for an
# encoder-forecaster (issue 34 item 3): its step is priced from its own list
# of convolution calls (src/core/conv_calls.c, wired()), so checkpointing and
# recompute_gates show the forward they run again. The multiply-adds are
# counted here by hand from the model's shapes, not read back from the list.

# convlstm_forecaster(1, 2, 3, patch = 2): 4x4 frames are 2x2 patches of 4
# channels (px = 4 pixels); each stack one layer of hidden 2, 3x3 kernels,
# 8 gate channels. Batch B = 2, T = 3 input frames, K = 2 target frames.
# Multiply-adds per image of a call: input half 8 * 4 * 9 = 288 (the
# encoder only: the forecaster's layer reads nothing), hidden half
# 8 * 2 * 9 = 144, head (1x1, 2 -> 4 channels) 8.
hand_macs <- function(checkpoint = 0, recompute = 0) {
  px <- 4; B <- 2; T <- 3; K <- 2
  x_half <- 288; h_half <- 144; head <- 8
  # encoder from zeros: input half forward and filter gradient over T B
  # images; hidden half forward, data and filter gradients over (T - 1) B
  enc <- x_half * 2 * T * B + h_half * 3 * (T - 1) * B
  # forecaster from the encoder's states: hidden half forward over K B
  # images, data gradient (K - 1) B plus the B of the state handed back to
  # the encoder, filter gradient K B (its first step reads the handed h)
  fc <- h_half * (K * B + ((K - 1) * B + B) + K * B)
  # the head over the K B forecast images: forward, data and filter
  hd <- head * 3 * K * B
  extra <- 0
  # checkpoint = 2: the encoder's 3 steps in segments of 2 and 1; the first
  # (from zeros) runs forward again before its backward: input half over
  # 2 B images, hidden half over (2 - 1) B; the forecaster's 2 steps are one
  # segment, not recomputed
  if (checkpoint == 2) extra <- extra + x_half * 2 * B + h_half * 1 * B
  # recompute_gates = 1: every step's gates again in backward, chunk by
  # chunk: the encoder's input half over T B images and hidden half over
  # (T - 1) B (its first step from zeros has none); the forecaster's hidden
  # half over K B (its first step from the handed state)
  if (recompute == 1) extra <- extra + x_half * T * B + h_half * (T - 1) * B + h_half * K * B
  px * (enc + fc + hd + extra)
}

fc_work <- function(fc, checkpoint = 0, recompute = 0, accumulation = 1) {
  ptr <- convlstm:::model_ptr(fc)
  cfg <- list(dtype = "float32", checkpoint = checkpoint, accumulation_steps = accumulation,
              tbptt = 0L, recompute_gates = recompute, horizon = 2L)
  convlstm:::step_work(ptr, convlstm:::c_model_config(ptr), cfg, 2L, 3L, 4L, 4L, "sequence",
                       "adam", 1L)
}

test_that("an encoder-forecaster's step is priced from its convolutions, counted by hand", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  expect_equal(hand_macs(), 28032) # the sum written out, checked once
  expect_identical(fc_work(fc)[["flops"]], 2 * hand_macs())
  expect_identical(fc_work(fc, checkpoint = 2)[["flops"]], 2 * hand_macs(checkpoint = 2))
  expect_identical(fc_work(fc, recompute = 1)[["flops"]], 2 * hand_macs(recompute = 1))
  # micro-batches of one: the same arithmetic on one thread, each call
  # reading its weight again (twice the calls)
  expect_identical(fc_work(fc, accumulation = 2)[["flops"]], 2 * hand_macs())
  expect_identical(fc_work(fc, accumulation = 2)[["weights"]], 2 * fc_work(fc)[["weights"]])
})

test_that("convlstm_memory_advise() shows an encoder-forecaster's recomputed forward as time", {
  fc <- convlstm_forecaster(1, c(6, 5), 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  a <- convlstm_memory_advise(fc, "1 GiB", 4, 5, 16, 16, horizon = 3)
  f32 <- a[a$dtype == "float32" & a$accumulation_steps == 1, ]
  ratio <- function(ck, rc) f32$time_ratio[f32$checkpoint == ck & f32$recompute_gates == rc]
  expect_identical(ratio(0, 0), 1) # the plain float32 step, the yardstick
  expect_gt(ratio(1, 0), 1) # checkpointing runs the stacks' forward again
  expect_gt(ratio(0, 1), 1) # and recompute_gates every step's gates
  expect_gt(ratio(1, 1), ratio(1, 0)) # both: more than either
  expect_false(is.null(attr(a, "rates")))
  # the CPU's half types: conversions, never faster than float32 (predicted_seconds())
  plain <- a$checkpoint == 0 & a$recompute_gates == 0 & a$accumulation_steps == 1
  expect_true(all(a$time_ratio[plain & a$dtype != "float32"] >= 1))
})
