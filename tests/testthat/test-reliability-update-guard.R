# The guarded update, table-driven: every row is a step whose gradients are
# finite but whose update would write Inf or NaN into a parameter or an
# optimizer moment (a learning rate whose bias-corrected step leaves float's
# range, a squared gradient beyond 3.4e38, momentum or weight decay that
# overflow, in float32, float16 and bfloat16 models). The step must be refused
# with a classed error naming the tensor (its state_dict name, and exp_avg,
# exp_avg_sq or momentum_buffer for a moment), leave the model exactly as it
# was -- weights, moments and step count, bit for bit, as saved to a file --
# and the next valid step must train.

guard_cases <- list(
  # what, dtype, optimizer of the refused step, y's scale, steps before (with
  # pre), state-dict entry set to 3e38 first, expected message
  list("Adam: lr / (1 - beta1) beyond float's range", "float32", convlstm_optimizer_adam(lr = 1e38), 1,
       0, NULL, NULL, "the parameter `cell_list.0.conv.weight` Inf"),
  list("Adam: the squared gradient overflows exp_avg_sq", "float32", convlstm_optimizer_adam(), 1e30,
       0, NULL, NULL, "exp_avg_sq of `cell_list.0.conv.weight` Inf"),
  list("Adam with moments already: lr beyond float's range at step 3", "float32",
       convlstm_optimizer_adam(lr = 1e38), 1, 2, convlstm_optimizer_adam(), NULL,
       "the parameter `cell_list.0.conv.weight` Inf"),
  list("SGD: lr times the gradient beyond float's range", "float32", convlstm_optimizer_sgd(lr = 1e38),
       1e5, 0, NULL, NULL, "the parameter `cell_list.0.conv.weight` Inf"),
  list("SGD: momentum overflows the buffer at the second step", "float32",
       convlstm_optimizer_sgd(lr = 1e-30, momentum = 1e38), 1e6, 1,
       convlstm_optimizer_sgd(lr = 1e-30, momentum = 1e38), NULL,
       "momentum_buffer of `cell_list.0.conv.weight` Inf"),
  list("SGD: weight decay of a bias near float's limit", "float32",
       convlstm_optimizer_sgd(lr = 0.01, weight_decay = 2), 1, 0, NULL, "cell_list.1.conv.bias",
       "the parameter `cell_list.1.conv.bias` Inf"),
  list("SGD with momentum: weight decay of a bias near float's limit", "float32",
       convlstm_optimizer_sgd(lr = 0.01, momentum = 0.9, weight_decay = 2), 1, 0, NULL,
       "cell_list.1.conv.bias", "momentum_buffer of `cell_list.1.conv.bias` Inf"),
  list("Adam: weight decay of a weight near float's limit", "float32",
       convlstm_optimizer_adam(weight_decay = 2), 1, 0, NULL, "cell_list.1.conv.weight",
       "exp_avg of `cell_list.1.conv.weight` Inf"),
  list("bfloat16 Adam: the squared gradient overflows exp_avg_sq", "bfloat16", convlstm_optimizer_adam(),
       1e30, 0, NULL, NULL, "exp_avg_sq of `cell_list.0.conv.weight` Inf"),
  list("float16 Adam: lr beyond float's range", "float16", convlstm_optimizer_adam(lr = 1e38), 1, 0,
       NULL, NULL, "the parameter `cell_list.0.conv.weight` Inf"),
  list("float16 SGD with momentum: weight decay of a bias near float's limit", "float16",
       convlstm_optimizer_sgd(lr = 0.01, momentum = 0.9, weight_decay = 2), 1, 1,
       convlstm_optimizer_sgd(lr = 0.01, momentum = 0.9), "cell_list.0.conv.bias",
       "momentum_buffer of `cell_list.0.conv.bias` Inf")
)

# The model's whole state as convlstm_save() writes it (weights, moments,
# step count and hyperparameters, as bytes), and its optimizer step count.
saved_state <- function(m, opt) {
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  convlstm_save(m, path, optimizer = opt)
  list(bytes = readBin(path, "raw", file.size(path)),
       steps = convlstm_file_info(path)$optimizer_steps)
}

for (case in guard_cases) {
  local({
    what <- case[[1]]
    test_that(paste("guarded update:", what), {
      set.seed(31)
      m <- api_model(dtype = case[[2]])
      opt <- case[[3]]
      x <- api_x()
      y <- api_y()
      for (i in seq_len(case[[5]])) convlstm_train_step(m, x, y * case[[4]], case[[6]])
      if (!is.null(case[[7]])) {
        sd <- convlstm_state_dict(m)
        sd[[case[[7]]]][] <- 3e38
        convlstm_load_state_dict(m, sd)
      }
      before <- convlstm_state_dict(m)
      saved <- saved_state(m, opt)
      expect_identical(saved$steps, case[[5]])
      err <- tryCatch(convlstm_train_step(m, x, y * case[[4]], opt), convlstm_error = identity)
      expect_s3_class(err, "convlstm_error_invalid")
      expect_match(conditionMessage(err), case[[8]], fixed = TRUE)
      expect_match(conditionMessage(err), "left unchanged", fixed = TRUE)
      expect_identical(convlstm_state_dict(m), before)
      expect_identical(saved_state(m, opt), saved)
      # and the model trains on: a valid step changes the weights, finitely
      loss <- convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 1e-3, weight_decay = 1e-3))
      expect_true(is.finite(loss))
      after <- convlstm_state_dict(m)
      expect_false(identical(after, before))
      expect_true(all(vapply(after, function(t) all(is.finite(t)), logical(1))))
      convlstm_release(m)
    })
  })
}

test_that("convlstm_optimizer_step() after convlstm_backward() is guarded as convlstm_train_step() is", {
  set.seed(32)
  m <- api_model()
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_adam()
  convlstm_train_step(m, x, y, opt)
  out <- convlstm_forward(m, x, training = TRUE, target = "last_state")
  convlstm_backward(m, out * 0 + 1)
  before <- convlstm_state_dict(m)
  saved <- saved_state(m, opt)
  expect_convlstm_error(convlstm_optimizer_step(m, convlstm_optimizer_adam(lr = 1e38)), "invalid",
                        "would make the parameter `cell_list.0.conv.weight`")
  expect_identical(convlstm_state_dict(m), before)
  expect_identical(saved_state(m, opt), saved)
  convlstm_optimizer_step(m, convlstm_optimizer_adam(lr = 1e-4))
  expect_false(identical(convlstm_state_dict(m), before))
  convlstm_release(m)
})

test_that("convlstm_fit() stops on a refused update with the guard's classed error", {
  set.seed(33)
  m <- api_model()
  before <- convlstm_state_dict(m)
  expect_convlstm_error(
    convlstm_fit(m, api_x(B = 4), api_y(B = 4), convlstm_optimizer_adam(lr = 1e38), epochs = 2,
                 batch_size = 4, verbose = FALSE),
    "invalid", "the update would make the parameter"
  )
  expect_identical(convlstm_state_dict(m), before)
  convlstm_release(m)
})

test_that("a refused switch of optimizer keeps the old state; an accepted one starts at step 1", {
  set.seed(34)
  m <- api_model()
  x <- api_x()
  sgd <- convlstm_optimizer_sgd(lr = 1e-3, momentum = 0.9)
  out <- convlstm_forward(m, x, training = TRUE, target = "last_state")
  convlstm_backward(m, out * 0 + 1)
  for (i in 1:3) convlstm_optimizer_step(m, sgd)
  saved <- saved_state(m, sgd)
  expect_identical(saved$steps, 3)
  expect_convlstm_error(convlstm_optimizer_step(m, convlstm_optimizer_adam(lr = 1e38)), "invalid",
                        "would make the parameter")
  expect_identical(saved_state(m, sgd), saved) # the momentum buffer survived
  # Adam's first step moves every weight with a gradient well above eps by
  # lr (its bias corrections cancel); a step counted on from SGD's 3 would not
  before <- convlstm_state_dict(m)
  g <- convlstm_gradients(m)
  convlstm_optimizer_step(m, convlstm_optimizer_adam(lr = 1e-3))
  after <- convlstm_state_dict(m)
  big <- abs(g[[1]]) > 1e-4
  expect_true(any(big))
  # (as a ratio: all.equal() compares absolutely below its tolerance)
  expect_equal(abs(after[[1]] - before[[1]])[big] / 1e-3, rep(1, sum(big)), tolerance = 1e-3)
  convlstm_release(m)
})
