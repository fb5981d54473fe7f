# tools/check_forecaster_fixtures.R -- the encoder-forecaster fixtures
# (tests/testthat/fixtures/forecaster/, written by PyTorch through
# tools/make_fixtures_forecaster.py) recomputed without PyTorch and without
# convlstm_forecaster(): the encoder by the installed package's plain stack
# (convlstm(), its C core) on frames patched in R by the contract's formula
# (patched channel c*p*p + i*p + j holds pixel (c, y*p + i, x*p + j)); the
# forecaster by a second plain stack started from the encoder's last states
# over a zero input of one channel (a cell whose input weights meet only
# zeros is a cell of no input); the 1x1 head and the patches back into frames
# in R. Prints the largest relative differences from the fixtures' enc_h/,
# enc_c/, output and output_predict, both reductions' losses, and how far the
# wrong/ records are. A developer check of the fixtures' meaning, not a test:
#
#   Rscript tools/check_forecaster_fixtures.R    (from the repository root,
#                                                 convlstm installed)
suppressPackageStartupMessages(library(convlstm))
source("tests/testthat/helper-fixtures.R")
fixture_root <- function() "tests/testthat/fixtures"
unshuffle <- function(x, p) {
  d <- dim(x); C <- d[3]; H <- d[4]; W <- d[5]
  out <- array(0, c(d[1], d[2], C * p * p, H / p, W / p))
  for (c in 0:(C - 1)) for (i in 0:(p - 1)) for (j in 0:(p - 1))
    out[, , c * p * p + i * p + j + 1, , ] <- x[, , c + 1, seq(i + 1, H, by = p), seq(j + 1, W, by = p), drop = FALSE]
  out
}
shuffle <- function(z, p, C) { # z [B, C p p, H', W'] -> [B, C, H' p, W' p]
  d <- dim(z)
  out <- array(0, c(d[1], C, d[3] * p, d[4] * p))
  for (c in 0:(C - 1)) for (i in 0:(p - 1)) for (j in 0:(p - 1))
    out[, c + 1, seq(i + 1, d[3] * p, by = p), seq(j + 1, d[4] * p, by = p)] <- z[, c * p * p + i * p + j + 1, , , drop = FALSE]
  out
}
rel <- function(a, b) max(abs(a - b)) / max(abs(b))
for (name in c("l1_p1", "l2_p2_c2", "l2_two_kernels", "l2_nopeep", "l1_p4")) {
  fx <- read_fixture(file.path("forecaster", name))
  cf <- fx$config; w <- fixture_group(fx, "weights/")
  p <- cf$patch; C <- cf$input_dim; L <- length(cf$hidden_dims)
  k <- cf$kernel_sizes
  rk <- if (is.null(cf$recurrent_kernel_sizes)) k else cf$recurrent_kernel_sizes
  rkw <- if (is.null(cf$recurrent_kernel_widths)) rk else cf$recurrent_kernel_widths
  rks <- lapply(seq_len(L), function(l) c(rk[l], rkw[l]))
  pe <- cf$peephole
  strip <- function(prefix) { s <- w[startsWith(names(w), prefix)]; names(s) <- substring(names(s), nchar(prefix) + 1); s }
  enc <- convlstm(C * p * p, cf$hidden_dims, k, peephole = pe, device = "cpu",
                  recurrent_kernel_sizes = if (!identical(rk, k) || !identical(rkw, k)) rks)
  convlstm_load_state_dict(enc, strip("encoder."))
  xp <- unshuffle(fx$tensors$x, p)
  r <- convlstm_forward(enc, xp, training = FALSE)
  e_h <- max(sapply(seq_len(L), function(l) rel(r$layer_last_states[[l]]$h, fx$tensors[[sprintf("enc_h/%d", l - 1)]])))
  e_c <- max(sapply(seq_len(L), function(l) rel(r$layer_last_states[[l]]$c, fx$tensors[[sprintf("enc_c/%d", l - 1)]])))
  # forecaster: layer 0 a plain cell of kernel rk[0] over a zero input of 1 channel
  fk <- c(list(rks[[1]]), lapply(seq_len(L)[-1], function(l) c(k[l], k[l])))
  frk <- rks
  split <- vapply(seq_len(L), function(l) !identical(as.numeric(fk[[l]]), as.numeric(frk[[l]])), TRUE)
  fc <- convlstm(1, cf$hidden_dims, fk, peephole = pe, device = "cpu",
                 recurrent_kernel_sizes = if (any(split)) frk)
  fw <- strip("forecaster.")
  w0 <- fw[["cell_list.0.conv.weight"]]; d0 <- dim(w0)
  # a zero input channel in front: [4h, 1 + h, kh, kw]
  z <- array(0, c(d0[1], 1 + d0[2], d0[3], d0[4])); z[, -1, , ] <- w0
  fw[["cell_list.0.conv.weight"]] <- z
  convlstm_load_state_dict(fc, fw)
  B <- cf$B; Hp <- cf$H / p; Wp <- cf$W / p
  state <- r$layer_last_states
  horizon <- cf$predict_horizon
  o <- convlstm_forward(fc, array(0, c(B, horizon, 1, Hp, Wp)), training = FALSE, state = state)$layer_outputs
  hw <- w[["head.weight"]]; hb <- w[["head.bias"]]
  frames <- array(0, c(B, horizon, C, cf$H, cf$W))
  for (t in seq_len(horizon)) {
    # the forecaster's h of step t, layer 0 first, along the channels
    cat_h <- array(0, c(B, sum(cf$hidden_dims), Hp, Wp))
    at <- 0
    for (l in seq_len(L)) {
      n <- cf$hidden_dims[l]
      cat_h[, at + seq_len(n), , ] <- array(o[[l]][, t, , , ], c(B, n, Hp, Wp))
      at <- at + n
    }
    logit <- array(0, c(B, dim(hw)[1], Hp, Wp))
    for (oc in seq_len(dim(hw)[1])) {
      acc <- hb[oc]
      for (kk in seq_len(dim(hw)[2])) acc <- acc + hw[oc, kk, 1, 1] * cat_h[, kk, , , drop = FALSE]
      logit[, oc, , ] <- acc
    }
    frames[, t, , , ] <- shuffle(logit, p, C)
  }
  e_out <- rel(frames[, seq_len(cf$T_out), , , , drop = FALSE], fx$tensors$output)
  e_pred <- rel(frames, fx$tensors$output_predict)
  yy <- fx$tensors$y; zz <- frames[, seq_len(cf$T_out), , , , drop = FALSE]
  l_sum <- sum(pmax(zz, 0) - zz * yy + log1p(exp(-abs(zz))))
  cat(sprintf("%-15s encoder h %.1e c %.1e; forecast %.1e, predict(horizon %d) %.1e; loss sum %.6g vs %.6g, batchmean %.6g vs %.6g\n",
              name, e_h, e_c, e_out, horizon, e_pred, l_sum, fx$tensors$loss_sum, l_sum / B, fx$tensors$loss_batchmean))
  if (!is.null(fx$tensors[["wrong/tf_patch_order"]]))
    cat(sprintf("   wrong/tf_patch_order %.2g, wrong/head_reversed %.2g from ours\n",
                rel(fx$tensors[["wrong/tf_patch_order"]], zz), rel(fx$tensors[["wrong/head_reversed"]], zz)))
  convlstm_release(enc); convlstm_release(fc)
}
