# tools/engine_bits.R -- trains a set of configurations on the CPU and writes
# every loss (as a hexadecimal double) and every parameter (an md5 of its raw
# bytes) to a file, so that two installs of the package can be compared bit
# for bit after a change meant to leave the numbers alone:
#
#   R_LIBS=/path/to/lib-a Rscript tools/engine_bits.R a.txt
#   R_LIBS=/path/to/lib-b Rscript tools/engine_bits.R b.txt
#   cmp a.txt b.txt
#
# Not a test: the two files must be identical, whatever they hold.

suppressPackageStartupMessages(library(convlstm))
out <- commandArgs(trailingOnly = TRUE)[1]
if (is.na(out)) out <- "engine_bits.txt"

hex <- function(v) paste(sprintf("%a", as.double(v)), collapse = " ")
md5 <- function(v) {
  f <- tempfile()
  on.exit(unlink(f))
  writeBin(as.double(v), f)
  unname(tools::md5sum(f))
}

lines <- character()
say <- function(...) lines <<- c(lines, paste0(...))

# One configuration: a model, three steps of convlstm_train_step(args), then its
# losses, gradient norm where asked, and every tensor's md5.
run <- function(name, model_args = list(), step_args = list(), steps = 3, B = 5, T = 4,
                horizon = NULL, dtype = "float32", target = "last_state", seed = 1) {
  set.seed(seed)
  ma <- modifyList(list(input_dim = 2, hidden_dims = c(3, 2), kernel_sizes = 3,
                        device = "cpu", threads = 1, dtype = dtype), model_args)
  model <- do.call(convlstm, ma)
  out_c <- ma$hidden_dims[length(ma$hidden_dims)]
  x <- array(runif(B * T * 2 * 6 * 5), dim = c(B, T, 2, 6, 5))
  y <- if (!is.null(horizon)) {
    array(runif(B * horizon * out_c * 6 * 5), dim = c(B, horizon, out_c, 6, 5))
  } else if (target == "sequence") {
    array(runif(B * T * out_c * 6 * 5), dim = c(B, T, out_c, 6, 5))
  } else {
    array(runif(B * out_c * 6 * 5), dim = c(B, out_c, 6, 5))
  }
  opt <- convlstm_optimizer_adam(lr = 0.01)
  losses <- numeric()
  for (i in seq_len(steps)) {
    a <- c(list(model, x, y, opt), step_args)
    if (is.null(horizon)) a$target <- target else a$horizon <- horizon
    l <- do.call(convlstm_train_step, a)
    losses <- c(losses, l, attr(l, "grad_norm"))
  }
  say(name, " loss ", hex(losses))
  sd <- convlstm_state_dict(model)
  for (n in names(sd)) say(name, " ", n, " ", md5(sd[[n]]))
  convlstm_release(model)
}

run("plain")
run("sequence", target = "sequence")
run("checkpoint", step_args = list(checkpoint = 2), target = "sequence", T = 5)
run("recompute_gates", step_args = list(recompute_gates = TRUE), target = "sequence")
run("recompute_gates2_ckpt", step_args = list(recompute_gates = 2, checkpoint = 3), T = 6)
run("tbptt", step_args = list(tbptt = 2), target = "sequence", T = 5)
run("tbptt_last", step_args = list(tbptt = 3), T = 5)
run("accumulation_uneven", step_args = list(accumulation_steps = 2), B = 5)
run("accumulation_ckpt", step_args = list(accumulation_steps = 3, checkpoint = 2), B = 7)
run("float16", dtype = "float16", target = "sequence")
run("bfloat16", dtype = "bfloat16", step_args = list(checkpoint = 2))
run("dropout_per_gate", model_args = list(dropout = 0.3, recurrent_dropout = 0.2), seed = 7)
run("dropout_shared", model_args = list(dropout = 0.3, recurrent_dropout = 0.2,
                                        dropout_masks = "shared"), seed = 8,
    step_args = list(recompute_gates = TRUE))
run("free_running", model_args = list(hidden_dims = c(3, 2), input_dim = 2),
    horizon = 3, step_args = list(teacher_forcing = FALSE))
run("teacher_forcing", horizon = 2)
run("scheduled_sampling", horizon = 3, step_args = list(teacher_forcing = 0.5), seed = 3)
run("free_running_accum_dropout", model_args = list(dropout = 0.2, recurrent_dropout = 0.1),
    horizon = 3, step_args = list(teacher_forcing = FALSE, accumulation_steps = 2), seed = 4)
run("peephole", model_args = list(peephole = "channel"), target = "sequence")
run("peephole_position", model_args = list(peephole = "position", frame_size = c(6, 5)),
    step_args = list(checkpoint = 2))
run("carry", step_args = list(state = "carry", checkpoint = 2))
run("huber_weight_clip", target = "sequence",
    step_args = list(loss = "huber", delta = 0.1, max_grad_norm = 0.5,
                     weight = array(rep(c(0, 1, 2), length.out = 5 * 4 * 2 * 6 * 5),
                                    dim = c(5, 4, 2, 6, 5))))
run("bce_sgd_data", target = "sequence", step_args = list(loss = "bce_logits", pos_weight = 2))
# one layer on its last state: d_hidden holds one step (cl_schedule.dh_one)
one <- list(hidden_dims = 3)
run("one_layer", model_args = one)
run("one_layer_ckpt_accum", model_args = one, T = 5,
    step_args = list(checkpoint = 2, accumulation_steps = 2))
run("one_layer_recompute_tbptt", model_args = one, T = 5,
    step_args = list(recompute_gates = 2, tbptt = 3))
run("one_layer_dropout_peep_ckpt_rc", T = 6, seed = 5,
    model_args = c(one, list(dropout = 0.3, recurrent_dropout = 0.2, peephole = "channel")),
    step_args = list(checkpoint = 3, recompute_gates = TRUE))
run("one_layer_weight_f16", model_args = one, dtype = "float16",
    step_args = list(weight = array(rep(c(0, 1, 2), length.out = 5 * 3 * 6 * 5),
                                    dim = c(5, 3, 6, 5))))
run("one_layer_carry_ckpt", model_args = one, step_args = list(state = "carry", checkpoint = 2))

# a data set on the device, rows gathered there
set.seed(11)
model <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
x <- array(runif(6 * 4 * 2 * 6 * 5), dim = c(6, 4, 2, 6, 5))
y <- array(runif(6 * 2 * 6 * 5), dim = c(6, 2, 6, 5))
d <- convlstm_data(model, x, y)
opt <- convlstm_optimizer_sgd(lr = 0.05, momentum = 0.9)
ls <- c(convlstm_train_step(model, d, optimizer = opt, rows = c(4, 2, 6)),
        convlstm_train_step(model, d, optimizer = opt, rows = c(1, 1, 3), accumulation_steps = 2))
say("data loss ", hex(ls))
sd <- convlstm_state_dict(model)
for (n in names(sd)) say("data ", n, " ", md5(sd[[n]]))
convlstm_release(model)

# convlstm_fit, one process, with the one-process communicator
set.seed(12)
model <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
x <- array(runif(8 * 4 * 2 * 6 * 5), dim = c(8, 4, 2, 6, 5))
y <- array(runif(8 * 2 * 6 * 5), dim = c(8, 2, 6, 5))
h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(lr = 0.01), epochs = 2, batch_size = 3,
                  verbose = FALSE, distributed = convlstm_distributed("local"))
say("fit_local loss ", hex(h$loss))
sd <- convlstm_state_dict(model)
for (n in names(sd)) say("fit_local ", n, " ", md5(sd[[n]]))
convlstm_release(model)

# Shi et al.'s encoder-forecaster: two stacks and a head (program.c's
# stacks handing states on), with the options a step takes
fc_cfgs <- list(
  list(name = "forecaster", hidden = c(4, 3), k = 3, rk = NULL, patch = 2),
  list(name = "forecaster_split", hidden = 3, k = 5, rk = 1, patch = 1),
  list(name = "forecaster_ckpt_accum", hidden = c(4, 3), k = 3, rk = NULL, patch = 2,
       step = list(checkpoint = 3, accumulation_steps = 2), K = 5),
  list(name = "forecaster_rc_dropout", hidden = c(4, 3), k = 3, rk = NULL, patch = 2,
       step = list(recompute_gates = 2), dropout = 0.2),
  list(name = "forecaster_f16_ckpt", hidden = c(3, 3), k = 3, rk = NULL, patch = 2,
       step = list(checkpoint = 2), dtype = "float16"))
for (cfg in fc_cfgs) {
  set.seed(13)
  K <- if (is.null(cfg$K)) 2 else cfg$K
  model <- convlstm_forecaster(2, cfg$hidden, cfg$k, patch = cfg$patch,
                               recurrent_kernel_sizes = cfg$rk, device = "cpu", threads = 1,
                               dropout = if (is.null(cfg$dropout)) 0 else cfg$dropout,
                               dtype = if (is.null(cfg$dtype)) "float32" else cfg$dtype)
  x <- array(runif(3 * 4 * 2 * 8 * 8), dim = c(3, 4, 2, 8, 8))
  y <- array(runif(3 * K * 2 * 8 * 8), dim = c(3, K, 2, 8, 8))
  opt <- convlstm_optimizer_rmsprop(lr = 0.01)
  ls <- vapply(1:3, function(i) {
    do.call(convlstm_train_step, c(list(model, x, y, opt, loss = "bce_logits"), cfg$step))
  }, 0)
  say(cfg$name, " loss ", hex(ls))
  say(cfg$name, " forecast ", md5(predict(model, x, horizon = 3)))
  sd <- convlstm_state_dict(model)
  for (n in names(sd)) say(cfg$name, " ", n, " ", md5(sd[[n]]))
  convlstm_release(model)
}

writeLines(lines, out)
cat(length(lines), "lines written to", out, "\n")
