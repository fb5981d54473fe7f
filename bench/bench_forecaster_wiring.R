# bench_forecaster_wiring.R -- what the encoder-forecaster's wiring
# (src/core/program.c: two stacks handing states on, a head over the second)
# costs beside a plain stack doing the same convolutions and pointwise work
# (issue 34, item 4: within 5 %). Both step in one process, interleaved
# (forecaster, plain, forecaster, ...), one thread each, each keeping its
# least CPU time (the process's user + system seconds; on a machine shared
# with other work CPU time varies far less than the wall clock) and least
# wall time over `rounds` steps after one untimed step that plans and
# allocates.
#
# The pairing. convlstm_forecaster(C, hidden, k, patch = p) over T input
# and K target frames of H x W runs, at (H/p) x (W/p) with C p^2 channels:
# an encoder of the layers over T steps from zeros, a forecaster of the
# same layers over K steps from the encoder's last states (its first layer
# reads nothing: no input half), a 1x1 head from every forecaster layer's h
# to C p^2 channels, the loss over K frames. The plain stack is
# convlstm(C p^2 / 2, hidden, k, head = "top", peephole = "channel") over
# T + K = 2T steps (T = K) of (H/p) x (W/p), target "sequence":
#   - hidden halves: forward 2(T+K) - 2 calls of batch images per layer pair
#     in both (the plain stack's first step of each layer from zeros, the
#     encoder's the same; the forecaster's starts from a state), backward
#     data and filter the same (the forecaster's last step's gradient into
#     the encoder is one of its hidden half's backward-data calls);
#   - input halves: layer 2's (hidden[1] channels) over (T+K) B images in
#     both; layer 1's over T B images of C p^2 channels in the forecaster
#     against (T+K) B images of C p^2 / 2 in the plain stack: the same
#     multiply-adds in fewer, wider calls;
#   - the head: 1x1, from 2 x hidden to C p^2 channels over K B images
#     against hidden to C p^2 / 2 over (T+K) B: half the forecaster's, a
#     1x1 convolution beside 5x5 ones (the script prints the share);
#   - pointwise: 2(T+K) layer-steps of cells of hidden channels in both;
#     loss and its gradient over the same number of elements.
# What is not the same, and not wiring: the forecaster has twice the
# parameters (four layers' weights, the update over them: SGD here, the
# lightest), and patches its frames (pack.c) where the plain stack reads
# them as they come. The script lists both steps' convolution calls (the
# core's own list, the one the plan and the advisor read:
# src/core/conv_calls.c) and prints each direction's multiply-adds side by
# side before it times anything.
#
#   Rscript bench/bench_forecaster_wiring.R [rounds] [shape]
#   shape: "issue" (hidden 48-48, 5x5, patch 4 of 64x64, 10 + 10 frames,
#   batch 4), "small" (hidden 16-16, 3x3, patch 2 of 16x16, 5 + 5, batch
#   4), or "both" (the default)
suppressPackageStartupMessages(library(convlstm))
args <- commandArgs(trailingOnly = TRUE)
rounds <- if (length(args) >= 1) as.integer(args[[1]]) else 5L
which <- if (length(args) >= 2) args[[2]] else "both"
shapes <- list(
  issue = list(C = 1L, hidden = c(48L, 48L), k = 5L, p = 4L, H = 64L, T = 10L, B = 4L),
  small = list(C = 1L, hidden = c(16L, 16L), k = 3L, p = 2L, H = 16L, T = 5L, B = 4L)
)
if (which != "both") shapes <- shapes[which]
cpu <- function() sum(proc.time()[c("user.self", "sys.self")])

# multiply-adds of a step's convolution calls by direction (and the head's
# apart), from the core's list
macs <- function(model, shape, horizon) {
  ptr <- convlstm:::model_ptr(model)
  opts <- convlstm:::check_step_options(0, 1, 0, dtype = "float32", batch_size = shape[[1]],
                                        state = list(mode = "zero", arrays = NULL,
                                                     horizon = horizon, free_run = FALSE),
                                        recompute_gates = 0L)
  k <- convlstm:::c_conv_calls(ptr, shape, TRUE, opts, TRUE)
  m <- as.double(k$N) * k$H * k$W * k$K * k$C / k$groups * k$kh * k$kw * k$count
  part <- ifelse(k$half == 2, paste("head", k$direction), k$direction)
  tapply(m, part, sum)
}

run_shape <- function(name, s) {
  set.seed(1)
  h <- s$H %/% s$p
  cp <- s$C * s$p^2
  fc <- convlstm_forecaster(s$C, s$hidden, s$k, patch = s$p, device = "cpu", threads = 1)
  pl <- convlstm(cp %/% 2, s$hidden, s$k, head = "top", peephole = "channel", device = "cpu",
                 threads = 1)
  xf <- array(runif(s$B * s$T * s$C * s$H^2), c(s$B, s$T, s$C, s$H, s$H))
  yf <- array(runif(s$B * s$T * s$C * s$H^2), c(s$B, s$T, s$C, s$H, s$H))
  xp <- array(runif(s$B * 2 * s$T * (cp %/% 2) * h^2), c(s$B, 2 * s$T, cp %/% 2, h, h))
  yp <- array(runif(s$B * 2 * s$T * (cp %/% 2) * h^2), c(s$B, 2 * s$T, cp %/% 2, h, h))
  a <- macs(fc, c(s$B, s$T, s$H, s$H), s$T)
  b <- macs(pl, c(s$B, 2 * s$T, h, h), 0L)
  parts <- union(names(a), names(b))
  cat(sprintf(paste0("\n%s: forecaster(%d, %s, %d, patch = %d) over %d + %d frames of %dx%d, ",
                     "batch %d\n  against convlstm(%d, %s, %d, head = \"top\") over %d steps ",
                     "of %dx%d, target \"sequence\"\n"),
              name, s$C, paste(s$hidden, collapse = "-"), s$k, s$p, s$T, s$T, s$H, s$H, s$B,
              cp %/% 2, paste(s$hidden, collapse = "-"), s$k, 2 * s$T, h, h))
  print(data.frame(calls = parts, forecaster_MMAC = round(a[parts] / 1e6, 2),
                   plain_MMAC = round(b[parts] / 1e6, 2)), row.names = FALSE)
  cat(sprintf("  all convolutions: %.2f against %.2f GMAC (ratio %.4f)\n",
              sum(a) / 1e9, sum(b) / 1e9, sum(a) / sum(b)))
  opt <- convlstm_optimizer_sgd(lr = 1e-4)
  step <- list(
    forecaster = function() convlstm_train_step(fc, xf, yf, opt),
    plain = function() convlstm_train_step(pl, xp, yp, opt, target = "sequence")
  )
  for (f in step) f() # plans and allocates: not timed
  # steps per timing: enough for 0.3 s of CPU (the clock ticks in ms)
  t0 <- cpu()
  step$plain()
  reps <- max(1L, as.integer(ceiling(0.3 / max(cpu() - t0, 1e-3))))
  t <- wall <- c(forecaster = Inf, plain = Inf)
  for (r in seq_len(rounds)) {
    for (i in names(step)) {
      t0 <- cpu()
      w0 <- proc.time()[["elapsed"]]
      for (j in seq_len(reps)) step[[i]]()
      t[[i]] <- min(t[[i]], (cpu() - t0) / reps)
      wall[[i]] <- min(wall[[i]], (proc.time()[["elapsed"]] - w0) / reps)
    }
  }
  cat(sprintf(paste0("  best of %d interleaved timings of %d step%s, 1 thread: forecaster %.4f s CPU ",
                     "(%.4f wall), plain %.4f s CPU (%.4f wall)\n",
                     "  RATIO %s forecaster/plain: CPU %.3f, wall %.3f\n"),
              rounds, reps, if (reps == 1) "" else "s", t[["forecaster"]], wall[["forecaster"]],
              t[["plain"]], wall[["plain"]],
              name, t[["forecaster"]] / t[["plain"]], wall[["forecaster"]] / wall[["plain"]]))
  convlstm_release(fc)
  convlstm_release(pl)
}

cat(sprintf("bench_forecaster_wiring, %s, convlstm %s\n", format(Sys.time(), "%Y-%m-%d %H:%M"),
            as.character(utils::packageVersion("convlstm"))))
for (n in names(shapes)) run_shape(n, shapes[[n]])
