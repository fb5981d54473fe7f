# test-forecaster-fixtures-half.R -- an encoder-forecaster (convlstm_forecaster()) trained
# in bfloat16 and float16 with dynamic loss scaling, and with checkpointing, recomputed gates
# and accumulation, against PyTorch (issue 34 item 5). Fixtures in
# tests/testthat/fixtures/forecaster_half/, written by tools/make_fixtures_forecaster_half.py:
# three SGD steps of one model from the same weights and data in float32, in bfloat16 under
# PyTorch's CPU autocast, in float16 emulated where the package stores float16 (with
# GradScaler's rule written out), and in float16 from a loss scale of 2^40, where steps
# overflow and are skipped until the scale fits.
#
# Tolerances. float32 runs (any checkpointing, recompute_gates, accumulation): they change
# where the step keeps its states, not its arithmetic, so PyTorch's float32 full batch within
# test-parity-torch.R's 1e-5 of the largest value. Half runs: D is the distance the fixture
# itself shows between the reference's half run and its float32 run (max |half - f32| over
# max |f32|, per quantity, computed here from the fixture's tensors). Ours and the reference
# round at different places (the package's cell reads its stored gates where autograd keeps
# float32 ones; autocast rounds the weights too; float32 sums in another order), each about D
# from exact, so they stay within 2 D of each other (measured on this machine: float16 loss
# 1.9 D, gradients 0.46 D, parameters 0.67 D; bfloat16 1.2 D, 0.94 D, 0.99 D); the float16 loss
# gets 3 D, since its three numbers carry the parameters' differences too. A step that runs in
# float32 behind a half dtype passes that band, so the other side is checked too: our
# gradients are at least 0.1 D away from float32's (measured 0.77 D in float16, 0.41 D in
# bfloat16). The loss scale's values are exact (powers of two).

fx <- read_fixture(file.path("forecaster_half", "l2_p2"))
cfg <- fx$config
x <- fx$tensors$x
y <- fx$tensors$y

half_model <- function(dtype = "float32") {
  m <- convlstm_forecaster(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, patch = cfg$patch,
                           peephole = cfg$peephole, bias = cfg$bias, device = "cpu",
                           threads = 1, dtype = dtype)
  convlstm_load_state_dict(m, fixture_group(fx, "weights/"))
  m
}

# max |a - b| / max |b|, over a list's tensors the largest
rel_gap <- function(a, b) max(abs(as.vector(a) - as.vector(b))) / max(abs(as.vector(b)))
list_gap <- function(a, b) max(vapply(names(b), function(k) rel_gap(a[[k]], b[[k]]), numeric(1)))

# `steps` SGD steps (options as convlstm_train_step() takes them): each loss, the first
# step's gradients, the loss scale after each step, the parameters after the last
sgd_run <- function(m, steps = cfg$steps, ...) {
  opt <- convlstm_optimizer_sgd(cfg$sgd_lr)
  losses <- scales <- numeric(steps)
  grads <- NULL
  for (i in seq_len(steps)) {
    losses[[i]] <- convlstm_train_step(m, x, y, opt, ...)
    scales[[i]] <- convlstm_loss_scale(m)$scale
    if (i == 1) grads <- convlstm_gradients(m)
  }
  list(losses = losses, grads = grads, scales = scales, params = convlstm_state_dict(m))
}

test_that("the half-precision fixture is there, with its float32, bfloat16 and float16 runs", {
  for (run in c("f32", "bf16", "f16")) {
    expect_length(fx$tensors[[paste0(run, "_losses")]], cfg$steps)
    expect_setequal(names(fixture_group(fx, paste0(run, "_params/"))),
                    names(fixture_group(fx, "weights/")))
  }
  expect_length(fx$tensors$overflow_scales, cfg$overflow_calls)
})

test_that("an encoder-forecaster's checkpoint, recompute_gates and accumulation equal PyTorch's float32 full batch", {
  variants <- list(plain = list(), checkpoint_1 = list(checkpoint = 1),
                   checkpoint_2 = list(checkpoint = 2), recompute = list(recompute_gates = TRUE),
                   accumulation = list(accumulation_steps = 2),
                   all = list(checkpoint = 2, recompute_gates = TRUE, accumulation_steps = 2))
  for (v in names(variants)) {
    m <- half_model()
    r <- do.call(sgd_run, c(list(m), variants[[v]]))
    convlstm_release(m)
    expect_close(r$losses, fx$tensors$f32_losses, rel = 1e-5, label = paste(v, "losses"))
    expect_fixture_tensors(r$grads, fx, "f32_grad/", rel = 1e-5, label = paste(v, "gradients"))
    expect_fixture_tensors(r$params, fx, "f32_params/", rel = 1e-5, label = paste(v, "parameters"))
  }
})

for (run in list(list(dtype = "bfloat16", tag = "bf16", loss_band = 2),
                 list(dtype = "float16", tag = "f16", loss_band = 3))) {
  test_that(sprintf("an encoder-forecaster trains in %s as PyTorch's reference does, within its distance from float32", run$dtype), {
    ref <- list(losses = fx$tensors[[paste0(run$tag, "_losses")]],
                grads = fixture_group(fx, paste0(run$tag, "_grad/")),
                params = fixture_group(fx, paste0(run$tag, "_params/")))
    f32 <- list(losses = fx$tensors$f32_losses, grads = fixture_group(fx, "f32_grad/"),
                params = fixture_group(fx, "f32_params/"))
    D <- list(losses = rel_gap(ref$losses, f32$losses), grads = list_gap(ref$grads, f32$grads),
              params = list_gap(ref$params, f32$params))
    for (d in D) expect_gt(d, 0) # the reference's half run is not float32's
    for (opts in list(list(), list(checkpoint = 2, accumulation_steps = 2))) {
      m <- half_model(run$dtype)
      r <- do.call(sgd_run, c(list(m), opts))
      convlstm_release(m)
      label <- paste(run$dtype, if (length(opts)) "checkpoint 2, 2 micro-batches" else "plain")
      expect_lte(rel_gap(r$losses, ref$losses), run$loss_band * D$losses, label = paste(label, "losses"))
      expect_lte(list_gap(r$grads, ref$grads), 2 * D$grads, label = paste(label, "gradients"))
      expect_lte(list_gap(r$params, ref$params), 2 * D$params, label = paste(label, "parameters"))
      # stored in the half type: as far from float32 as a half run is
      expect_gte(list_gap(r$grads, f32$grads), 0.1 * D$grads, label = paste(label, "not float32"))
      if (run$dtype == "float16") {
        # the default scale, 65536, overflows nothing here: it stays
        expect_identical(r$scales, as.vector(fx$tensors$f16_scales))
      }
    }
  })
}

test_that("float16 from a loss scale that overflows: the steps PyTorch's scaler skips are skipped, the scale halves as GradScaler's, then it trains", {
  m <- half_model("float16")
  on.exit(convlstm_release(m))
  convlstm_set_loss_scale(m, init_scale = cfg$overflow_init)
  opt <- convlstm_optimizer_sgd(cfg$sgd_lr)
  n <- cfg$overflow_calls
  stepped <- fx$tensors$overflow_stepped
  skipped <- sum(stepped == 0)
  expect_gt(skipped, 0)
  expect_identical(as.vector(stepped), c(rep(0, skipped), rep(1, n - skipped)))
  losses <- scales <- numeric(n)
  for (i in seq_len(n)) {
    losses[[i]] <- suppressWarnings(convlstm_train_step(m, x, y, opt)) # every 10th skip warns
    scales[[i]] <- convlstm_loss_scale(m)$scale
    if (i == skipped) { # the skipped steps left the parameters bit for bit
      expect_identical(convlstm_state_dict(m)[names(fixture_group(fx, "weights/"))],
                       fixture_group(fx, "weights/"))
    }
  }
  expect_identical(scales, as.vector(fx$tensors$overflow_scales))
  expect_equal(convlstm_loss_scale(m)$skipped_steps, skipped)
  D_loss <- rel_gap(fx$tensors$f16_losses, fx$tensors$f32_losses)
  D_params <- list_gap(fixture_group(fx, "f16_params/"), fixture_group(fx, "f32_params/"))
  expect_lte(rel_gap(losses, fx$tensors$overflow_losses), 3 * D_loss)
  expect_lte(list_gap(convlstm_state_dict(m), fixture_group(fx, "overflow_params/")), 2 * D_params)
})
