# Bad input, table-driven: every row is a call with one wrong argument, the
# class of the error it must raise and the text its message must contain --
# the argument's name in backticks, so the user is told which one is wrong
# (and, where the argument is fine but the model is not, why). The rows
# follow the reliability issue's list: x and y, layer sizes, device and
# dtype, optimizer hyperparameters, epochs and batch sizes, step options,
# released and readRDS-restored models, state dicts, files.

input_env <- function() {
  set.seed(21)
  e <- new.env()
  e$m <- api_model()
  e$x <- api_x()
  e$y <- api_y()
  e$ys <- api_y(T = 3)
  e$opt <- optimizer_adam()
  e$sd <- state_dict(e$m)
  e$st <- e$m(e$x)$layer_last_states
  e$carrier <- api_model() # carries a state; m must stay untrained
  e$wide <- api_model(hidden_dims = c(3, 3)) # its output cannot be fed back
  e$pm <- api_model(peephole = TRUE, frame_size = c(5, 4)) # per-position peepholes: 5 x 4 only
  e$x64 <- api_x(H = 6, W = 4)
  e$released <- api_model()
  convlstm_release(e$released)
  path <- tempfile(fileext = ".rds")
  saveRDS(e$m, path)
  e$restored <- readRDS(path)
  unlink(path)
  e$bytes <- "caf\xe9" # a string R will not translate: Encoding "bytes"
  Encoding(e$bytes) <- "bytes"
  e$put <- function(x, at, value) {
    x[at] <- value
    x
  }
  e
}

bad_input_cases <- list(
  # ---- convlstm(): layer sizes ----
  list("input_dim not a number", quote(convlstm("a", 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim zero", quote(convlstm(0, 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim negative", quote(convlstm(-2, 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim fractional", quote(convlstm(1.5, 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim NA", quote(convlstm(NA, 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim Inf", quote(convlstm(Inf, 4, 3, device = "cpu")), "`input_dim`"),
  list("input_dim a vector", quote(convlstm(c(1, 2), 4, 3, device = "cpu")), "`input_dim`"),
  list("hidden_dims empty", quote(convlstm(1, integer(), 3, n_layers = 1, device = "cpu")),
       "`hidden_dims`"),
  list("hidden_dims zero", quote(convlstm(1, 0, 3, device = "cpu")), "`hidden_dims`"),
  list("hidden_dims negative", quote(convlstm(1, c(4, -1), 3, device = "cpu")), "`hidden_dims`"),
  list("hidden_dims text", quote(convlstm(1, "8", 3, device = "cpu")), "`hidden_dims`"),
  list("hidden_dims NA", quote(convlstm(1, c(4, NA), 3, device = "cpu")), "`hidden_dims`"),
  list("hidden_dims wrong length", quote(convlstm(1, c(4, 4, 4), 3, n_layers = 2, device = "cpu")),
       "`hidden_dims`"),
  list("kernel_sizes even", quote(convlstm(1, 4, 2, device = "cpu")), "`kernel_sizes`"),
  list("kernel_sizes zero", quote(convlstm(1, 4, 0, device = "cpu")), "`kernel_sizes`"),
  list("kernel_sizes negative", quote(convlstm(1, 4, -3, device = "cpu")), "`kernel_sizes`"),
  list("kernel_sizes one even", quote(convlstm(1, c(4, 1), c(3, 4), device = "cpu")),
       "`kernel_sizes`"),
  list("kernel_sizes wrong length", quote(convlstm(1, c(4, 1), c(3, 3, 3), device = "cpu")),
       "`kernel_sizes`"),
  list("kernel_sizes pair with an even width", quote(convlstm(1, 4, list(c(3, 4)), device = "cpu")),
       "`kernel_sizes`"),
  list("kernel_sizes triple", quote(convlstm(1, 4, list(c(3, 3, 3)), device = "cpu")),
       "`kernel_sizes`"),
  list("kernel_sizes list too long", quote(convlstm(1, 4, list(3, 3), device = "cpu")),
       "`kernel_sizes`"),
  list("dilation zero", quote(convlstm(1, 4, 3, dilation = 0, device = "cpu")), "`dilation`"),
  list("dilation fractional", quote(convlstm(1, 4, 3, dilation = 1.5, device = "cpu")),
       "`dilation`"),
  list("dilation text", quote(convlstm(1, 4, 3, dilation = "2", device = "cpu")), "`dilation`"),
  list("dilation wrong length", quote(convlstm(1, c(4, 1), 3, dilation = c(1, 2, 3),
                                               device = "cpu")), "`dilation`"),
  list("dilation pair with NA", quote(convlstm(1, 4, 3, dilation = list(c(2, NA)),
                                               device = "cpu")), "`dilation`"),
  # ---- convlstm(): dropout rates, each in [0, 1) ----
  list("dropout 1", quote(convlstm(1, 4, 3, dropout = 1, device = "cpu")), "`dropout`"),
  list("dropout negative", quote(convlstm(1, 4, 3, dropout = -0.1, device = "cpu")),
       "`dropout`"),
  list("dropout NA", quote(convlstm(1, 4, 3, dropout = NA_real_, device = "cpu")), "`dropout`"),
  list("dropout NaN", quote(convlstm(1, 4, 3, dropout = NaN, device = "cpu")), "`dropout`"),
  list("dropout text", quote(convlstm(1, 4, 3, dropout = "0.2", device = "cpu")), "`dropout`"),
  list("dropout wrong length", quote(convlstm(1, c(4, 1), 3, dropout = c(0.1, 0.2, 0.3),
                                              device = "cpu")), "`dropout`"),
  list("dropout NULL", quote(convlstm(1, 4, 3, dropout = NULL, device = "cpu")), "`dropout`"),
  list("recurrent_dropout 1", quote(convlstm(1, 4, 3, recurrent_dropout = 1, device = "cpu")),
       "`recurrent_dropout`"),
  list("recurrent_dropout above 1", quote(convlstm(1, 4, 3, recurrent_dropout = 2,
                                                   device = "cpu")), "`recurrent_dropout`"),
  list("recurrent_dropout Inf", quote(convlstm(1, 4, 3, recurrent_dropout = Inf,
                                               device = "cpu")), "`recurrent_dropout`"),
  list("recurrent_dropout a logical", quote(convlstm(1, 4, 3, recurrent_dropout = TRUE,
                                                     device = "cpu")), "`recurrent_dropout`"),
  # ---- convlstm(): dropout_masks, "per_gate" or "shared" ----
  list("dropout_masks unknown", quote(convlstm(1, 4, 3, dropout = 0.1, dropout_masks = "tied",
                                               device = "cpu")), "`dropout_masks`"),
  list("dropout_masks NA", quote(convlstm(1, 4, 3, dropout_masks = NA_character_,
                                          device = "cpu")), "`dropout_masks`"),
  list("dropout_masks a number", quote(convlstm(1, 4, 3, dropout_masks = 4, device = "cpu")),
       "`dropout_masks`"),
  list("dropout_masks two", quote(convlstm(1, 4, 3, dropout_masks = c("shared", "per_gate"),
                                           device = "cpu")), "`dropout_masks`"),
  list("dropout_masks NULL", quote(convlstm(1, 4, 3, dropout_masks = NULL, device = "cpu")),
       "`dropout_masks`"),
  list("train(mode) not a flag", quote(m$train(NA)), "`mode`"),
  list("n_layers zero", quote(convlstm(1, 4, 3, n_layers = 0, device = "cpu")), "`n_layers`"),
  list("n_layers negative", quote(convlstm(1, 4, 3, n_layers = -1, device = "cpu")), "`n_layers`"),
  list("n_layers too many", quote(convlstm(1, 4, 3, n_layers = 33, device = "cpu")), "`n_layers`"),
  list("n_layers vs hidden_dims", quote(convlstm(1, c(4, 1), 3, n_layers = 3, device = "cpu")),
       "`hidden_dims`"),
  list("byte count overflows (hidden)", quote(convlstm(1, 2^30, 3, device = "cpu")), "`hidden_dims`"),
  list("byte count overflows (kernel)", quote(convlstm(1, 4, 2^27 + 1, device = "cpu")),
       "`kernel_sizes`"),
  list("dims overflow int (input)", quote(convlstm(.Machine$integer.max, 4, 1, device = "cpu")),
       "`input_dim`"),
  list("bias not a flag", quote(convlstm(1, 4, 3, bias = "yes", device = "cpu")), "`bias`"),
  list("bias NA", quote(convlstm(1, 4, 3, bias = NA, device = "cpu")), "`bias`"),
  # ---- device, dtype, memory ----
  list("unknown device", quote(convlstm(1, 4, 3, device = "tpu")), "`device`"),
  list("device a number", quote(convlstm(1, 4, 3, device = 1)), "`device`"),
  list("unknown dtype", quote(convlstm(1, 4, 3, device = "cpu", dtype = "float64")), "`dtype`"),
  list("dtype NA", quote(convlstm(1, 4, 3, device = "cpu", dtype = NA_character_)), "`dtype`"),
  list("memory_limit negative", quote(convlstm(1, 4, 3, device = "cpu", memory_limit = -5)),
       "`memory_limit`"),
  list("memory_limit words", quote(convlstm(1, 4, 3, device = "cpu", memory_limit = "lots")),
       "`memory_limit`"),
  list("threads zero", quote(convlstm(1, 4, 3, device = "cpu", threads = 0)), "`threads`"),
  list("threads absurd", quote(convlstm(1, 4, 3, device = "cpu", threads = 1e5)), "`threads`"),
  list("set_dtype unknown", quote(set_dtype(m, "int8")), "`dtype`"),
  list("threads just above a whole number", quote(convlstm(1, 4, 3, device = "cpu", threads = 2.0000001)),
       "not 2.0000001"),
  list("set_memory_limit negative", quote(set_memory_limit(m, -1)), "`bytes`"),
  # the float16 loss scaler's settings (GradScaler's)
  list("init_scale zero", quote(set_loss_scale(m, init_scale = 0)), "`init_scale`"),
  list("init_scale beyond float", quote(set_loss_scale(m, init_scale = 1e39)), "`init_scale`"),
  list("growth_factor 1", quote(set_loss_scale(m, growth_factor = 1)), "`growth_factor`"),
  list("backoff_factor 1", quote(set_loss_scale(m, backoff_factor = 1)), "`backoff_factor`"),
  list("backoff_factor 0", quote(set_loss_scale(m, backoff_factor = 0)), "`backoff_factor`"),
  list("growth_interval 0", quote(set_loss_scale(m, growth_interval = 0)), "`growth_interval`"),
  # beyond size_t: the conversion would be undefined (it read as "no limit")
  list("memory_limit beyond size_t", quote(convlstm(1, 4, 3, device = "cpu", memory_limit = 1e20)),
       "`memory_limit`"),
  list("set_memory_limit beyond size_t", quote(set_memory_limit(m, 1e20)), "`bytes`"),
  # ---- peepholes ----
  list("peephole unknown", quote(convlstm(1, 4, 3, device = "cpu", peephole = "yes")),
       "`peephole`"),
  list("peephole NA", quote(convlstm(1, 4, 3, device = "cpu", peephole = NA)), "`peephole`"),
  list("peephole a number", quote(convlstm(1, 4, 3, device = "cpu", peephole = 1)), "`peephole`"),
  list("peephole two values", quote(convlstm(1, 4, 3, device = "cpu",
                                             peephole = c("channel", "position"))), "`peephole`"),
  list("per-position peepholes without frame_size",
       quote(convlstm(1, 4, 3, device = "cpu", peephole = TRUE)), "`frame_size`"),
  list("frame_size zero", quote(convlstm(1, 4, 3, device = "cpu", peephole = "position",
                                         frame_size = c(0, 4))), "`frame_size`"),
  list("frame_size three values", quote(convlstm(1, 4, 3, device = "cpu", peephole = TRUE,
                                                 frame_size = c(5, 4, 1))), "`frame_size`"),
  list("frame_size fractional", quote(convlstm(1, 4, 3, device = "cpu", peephole = TRUE,
                                               frame_size = 4.5)), "`frame_size`"),
  list("frame_size with per-channel peepholes",
       quote(convlstm(1, 4, 3, device = "cpu", peephole = "channel", frame_size = c(5, 4))),
       "`frame_size`"),
  list("frame_size without peepholes", quote(convlstm(1, 4, 3, device = "cpu", frame_size = 5)),
       "`frame_size`"),
  list("per-position peepholes, x of another height", quote(pm(x64)), "`x`"),
  list("per-position peepholes, train_step on another height", quote(train_step(pm, x64,
       api_y(H = 6), opt)), "`x`"),
  list("per-position peepholes, predict on another width",
       quote(predict(pm, api_x(W = 5))), "`x`"),
  list("per-position peepholes, memory_estimate of another size",
       quote(memory_estimate(pm, 2, 3, 6, 4)), "`height, width`"),
  list("per-position peepholes, a state dict of per-channel ones",
       quote(load_state_dict(pm, state_dict(api_model(peephole = "channel")))),
       "cell_list.0.w_ci"),
  # ---- x ----
  list("x text", quote(m(array("a", c(2, 3, 2, 5, 4)))), "`x`"),
  list("x a list", quote(m(list(1, 2))), "`x`"),
  list("x complex", quote(m(array(1i, c(2, 3, 2, 5, 4)))), "`x`"),
  list("x NULL", quote(predict(m, NULL)), "`x`"),
  list("x rank 4", quote(m(array(0, c(3, 2, 5, 4)))), "`x`"),
  list("x rank 6", quote(m(array(0, c(1, 3, 2, 5, 4, 1)))), "`x`"),
  list("x a plain vector", quote(train_step(m, as.vector(x), y, opt)), "`x`"),
  list("x channels != input_dim", quote(m(array(0, c(2, 3, 3, 5, 4)))), "`x`"),
  list("x empty batch", quote(m(array(0, c(0, 3, 2, 5, 4)))), "`x`"),
  list("x empty time", quote(train_step(m, array(0, c(2, 0, 2, 5, 4)), y, opt)), "`x`"),
  list("x empty width", quote(predict(m, array(0, c(2, 3, 2, 5, 0)))), "`x`"),
  list("x with NA", quote(train_step(m, put(x, 3, NA), y, opt)), "1 NA"),
  list("x with NaN", quote(train_step(m, put(x, 1:2, NaN), y, opt)), "2 NaN"),
  list("x with Inf", quote(train_step(m, put(x, 5, Inf), y, opt)), "1 Inf"),
  list("x beyond float", quote(train_step(m, put(x, 5, -1e39), y, opt)), "`x`"),
  list("y beyond float", quote(train_step(m, x, put(y, 2, 1e300), opt)), "`y`"),
  list("x with -Inf in predict", quote(predict(m, put(x, 7, -Inf))), "`x`"),
  list("x with all three", quote(convlstm_fit(m, put(put(put(x, 1, NA), 2, NaN), 3, Inf), y,
                                              opt, epochs = 1, verbose = FALSE)),
       "1 NA, 1 NaN and 1 Inf"),
  # ---- y ----
  list("y wrong hidden", quote(train_step(m, x, api_y(C = 3), opt)), "`y`"),
  list("y wrong batch", quote(train_step(m, x, api_y(B = 3), opt)), "`y`"),
  list("y wrong height", quote(train_step(m, x, api_y(H = 4), opt)), "`y`"),
  list("y sequence for last_state", quote(train_step(m, x, ys, opt)), "`y`"),
  list("y last_state for sequence", quote(train_step(m, x, y, opt, target = "sequence")), "`y`"),
  list("y wrong time", quote(train_step(m, x, api_y(T = 2), opt, target = "sequence")), "`y`"),
  list("y text", quote(train_step(m, x, array("a", dim(y)), opt)), "`y`"),
  list("y with NA", quote(train_step(m, x, put(y, 1, NA), opt)), "`y`"),
  list("y with Inf", quote(convlstm_fit(m, x, put(y, 2, -Inf), opt, epochs = 1, verbose = FALSE)),
       "1 Inf"),
  list("unknown target", quote(train_step(m, x, y, opt, target = "all")), "`target`"),
  list("grad_output wrong shape", quote({
    convlstm_forward(m, x)
    convlstm_backward(m, array(0, c(2, 2, 5, 5)))
  }), "`grad_output`"),
  list("backward without a forward", quote({
    predict(m, x)
    convlstm_backward(m, y)
  }), "training = TRUE", "state"),
  list("grad_output rank 3", quote(convlstm_backward(m, array(0, c(2, 2, 5)))), "`grad_output`"),
  list("backward after load_state_dict", quote({
    convlstm_forward(m, x)
    load_state_dict(m, sd)
    convlstm_backward(m, y)
  }), "parameters were replaced after the forward", "state"),
  list("validation_data one array", quote(convlstm_fit(m, x, y, opt, epochs = 1,
                                                       validation_data = list(x),
                                                       verbose = FALSE)),
       "`validation_data`"),
  list("validation_data wrong channels", quote(convlstm_fit(m, x, y, opt, epochs = 1,
    validation_data = list(api_x(C = 1), y), verbose = FALSE)), "`validation_data[[1]]`"),
  # ---- optimizers ----
  list("lr negative", quote(optimizer_adam(lr = -1)), "`lr`"),
  list("amsgrad NA", quote(optimizer_adam(amsgrad = NA)), "`amsgrad`"),
  list("amsgrad a string", quote(optimizer_adamw(amsgrad = "yes")), "`amsgrad`"),
  list("adamw weight_decay negative", quote(optimizer_adamw(weight_decay = -0.01)),
       "`weight_decay`"),
  list("adamw betas out of range", quote(optimizer_adamw(betas = c(0.9, 1))), "`betas`"),
  list("lr NA", quote(optimizer_adam(lr = NA)), "`lr`"),
  list("lr Inf", quote(optimizer_sgd(lr = Inf)), "`lr`"),
  list("lr text", quote(optimizer_adam(lr = "0.1")), "`lr`"),
  list("lr missing for SGD", quote(optimizer_sgd()), "`lr`"),
  list("betas one value", quote(optimizer_adam(betas = 0.9)), "`betas`"),
  list("betas at 1", quote(optimizer_adam(betas = c(1, 0.999))), "`betas`"),
  list("betas negative", quote(optimizer_adam(betas = c(-0.1, 0.9))), "`betas`"),
  list("betas NA", quote(optimizer_adam(betas = c(0.9, NA))), "`betas`"),
  list("eps zero", quote(optimizer_adam(eps = 0)), "`eps`"),
  list("eps negative", quote(optimizer_adam(eps = -1e-8)), "`eps`"),
  list("weight_decay negative", quote(optimizer_adam(weight_decay = -1)), "`weight_decay`"),
  list("momentum negative", quote(optimizer_sgd(0.1, momentum = -0.5)), "`momentum`"),
  # valid doubles that the 32-bit float update cannot use (inf, or 1, or 0 as a float)
  list("lr beyond float", quote(optimizer_adam(lr = 1e39)), "`lr`"),
  list("sgd lr beyond float", quote(optimizer_sgd(lr = 1e39)), "`lr`"),
  list("weight_decay beyond float", quote(optimizer_adam(weight_decay = 1e39)), "`weight_decay`"),
  list("beta rounds to 1 as a float", quote(optimizer_adam(betas = c(0.9, 1 - 1e-9))), "`betas`"),
  list("first beta rounds to 1 as a float", quote(optimizer_adam(betas = c(1 - 1e-9, 0.999))),
       "`betas`"),
  list("eps rounds to 0 as a float", quote(optimizer_adam(eps = 1e-50)), "`eps`"),
  list("momentum beyond float", quote(optimizer_sgd(0.1, momentum = 1e39)), "`momentum`"),
  list("hand-made optimizer beyond float", quote(train_step(m, x, y, structure(
    list(kind = "adam", lr = 1e39, betas = c(0.9, 0.999), eps = 1e-8, weight_decay = 0),
    class = c("convlstm_optimizer_adam", "convlstm_optimizer")))), "`lr`"),
  list("optimizer a list", quote(train_step(m, x, y, list(kind = "adam", lr = 0.1))),
       "`optimizer`"),
  list("optimizer a string", quote(convlstm_fit(m, x, y, "adam", verbose = FALSE)), "`optimizer`"),
  # ---- fit, evaluate, predict ----
  list("epochs zero", quote(convlstm_fit(m, x, y, opt, epochs = 0, verbose = FALSE)), "`epochs`"),
  list("epochs fractional", quote(convlstm_fit(m, x, y, opt, epochs = 2.5, verbose = FALSE)),
       "`epochs`"),
  list("epochs NA", quote(convlstm_fit(m, x, y, opt, epochs = NA, verbose = FALSE)), "`epochs`"),
  list("batch_size zero", quote(convlstm_fit(m, x, y, opt, batch_size = 0, verbose = FALSE)),
       "`batch_size`"),
  list("batch_size negative", quote(convlstm_fit(m, x, y, opt, batch_size = -4, verbose = FALSE)),
       "`batch_size`"),
  list("batch_size larger than the data",
       quote(convlstm_fit(m, x, y, opt, epochs = 1, batch_size = 3, verbose = FALSE)),
       "`batch_size` (3) must not exceed the number of samples in `x` (2)"),
  list("shuffle not a flag", quote(convlstm_fit(m, x, y, opt, shuffle = "yes", verbose = FALSE)),
       "`shuffle`"),
  list("verbose NA", quote(convlstm_fit(m, x, y, opt, verbose = NA)), "`verbose`"),
  list("evaluate batch_size zero", quote(convlstm_evaluate(m, x, y, batch_size = 0)),
       "`batch_size`"),
  list("predict batch_size fractional", quote(predict(m, x, batch_size = 1.5)), "`batch_size`"),
  list("predict unknown what", quote(predict(m, x, what = "gates")), "`what`"),
  list("training not a flag", quote(convlstm_forward(m, x, training = "no")), "`training`"),
  # ---- step options and estimates ----
  list("checkpoint negative", quote(train_step(m, x, y, opt, checkpoint = -1)), "`checkpoint`"),
  list("accumulation_steps zero", quote(train_step(m, x, y, opt, accumulation_steps = 0)),
       "`accumulation_steps`"),
  list("accumulation_steps above batch", quote(train_step(m, x, y, opt, accumulation_steps = 5)),
       "`accumulation_steps`"),
  list("tbptt fractional", quote(train_step(m, x, y, opt, tbptt = 1.5)), "`tbptt`"),
  list("max_grad_norm zero", quote(train_step(m, x, y, opt, max_grad_norm = 0)),
       "`max_grad_norm`"),
  list("loss unknown", quote(train_step(m, x, y, opt, loss = "l2")), "`loss`"),
  list("huber delta zero", quote(train_step(m, x, y, opt, loss = "huber", delta = 0)),
       "`delta`"),
  list("bce pos_weight negative", quote(convlstm_fit(m, x, y, opt, verbose = FALSE,
                                                     loss = "bce_logits", pos_weight = -1)),
       "`pos_weight`"),
  list("evaluate loss not a string", quote(convlstm_evaluate(m, x, y, loss = 2)), "`loss`"),
  list("max_grad_norm negative", quote(train_step(m, x, y, opt, max_grad_norm = -1)),
       "`max_grad_norm`"),
  list("max_grad_norm NA", quote(train_step(m, x, y, opt, max_grad_norm = NA_real_)),
       "`max_grad_norm`"),
  list("max_grad_norm two numbers", quote(train_step(m, x, y, opt, max_grad_norm = c(1, 2))),
       "`max_grad_norm`"),
  list("fit max_grad_norm a string", quote(convlstm_fit(m, x, y, opt, verbose = FALSE,
                                                        max_grad_norm = "1")),
       "`max_grad_norm`"),
  # the per-element loss weight: y's shape, finite, >= 0
  list("weight negative", quote(train_step(m, x, y, opt, weight = array(-1, dim(y)))),
       "`weight`"),
  list("weight NaN", quote(train_step(m, x, y, opt, weight = array(NaN, dim(y)))), "`weight`"),
  list("weight Inf", quote(train_step(m, x, y, opt, weight = array(Inf, dim(y)))), "`weight`"),
  list("weight of another shape", quote(train_step(m, x, y, opt, weight = array(1, 1:4))),
       "`weight`"),
  list("weight a string", quote(train_step(m, x, y, opt, weight = "y")), "`weight`"),
  list("evaluate weight of another shape",
       quote(convlstm_evaluate(m, x, y, weight = array(1, c(dim(y), 1)))), "`weight`"),
  list("fit weight negative", quote(convlstm_fit(m, x, y, opt, verbose = FALSE,
                                                 weight = array(-1, dim(y)))), "`weight`"),
  list("memory_estimate weight unknown",
       quote(memory_estimate(m, 2, 3, 4, 4, weight = "all")), "`weight`"),
  # ---- moving_digits() ----
  list("moving_digits n zero", quote(moving_digits(n = 0)), "`n`"),
  list("moving_digits size too small", quote(moving_digits(size = 4)), "`size`"),
  list("moving_digits horizon = seq_len", quote(moving_digits(seq_len = 3, horizon = 3)),
       "`horizon`"),
  list("moving_digits scale too large", quote(moving_digits(size = 16, scale = 3)), "`scale`"),
  list("moving_digits speed negative", quote(moving_digits(speed = -1)), "`speed`"),
  list("moving_digits seed text", quote(moving_digits(n = 1, seed = "a")), "`seed`"),
  # ---- initial and carried state ----
  list("state not a list", quote(m(x, state = 1)), "`state`"),
  list("state one layer short", quote(m(x, state = st[1])), "`state`"),
  list("state layer without c", quote(m(x, state = list(st[[1]], list(h = st[[2]]$h)))),
       "`state[[2]]`"),
  list("state h of another layer", quote(predict(m, x, state = list(st[[1]], list(
    h = st[[1]]$h, c = st[[2]]$c)))), "`state[[2]]$h`"),
  list("state with NaN", quote(m(x, state = list(list(h = put(st[[1]]$h, 1, NaN),
                                                      c = st[[1]]$c), st[[2]]))),
       "`state[[1]]$h`"),
  list("state c with Inf in train_step", quote(train_step(m, x, y, opt, state = list(
    st[[1]], list(h = st[[2]]$h, c = put(st[[2]]$c, 3, Inf))))), "`state[[2]]$c`"),
  list("state of another batch size", quote(m(api_x(B = 1), state = st)), "`state[[1]]$h`"),
  list("state carry in a forward", quote(m(x, state = "carry")), "`state`"),
  list("state carry in convlstm_forward", quote(convlstm_forward(m, x, state = "carry")),
       "`state`"),
  list("state unknown word", quote(train_step(m, x, y, opt, state = "keep")), "`state`"),
  list("state given with a data set", quote(train_step(m, convlstm_data(m, x, y), opt,
                                                       state = st)), "`state`"),
  list("carried state of another batch", quote({
    train_step(carrier, x, y, opt, state = "carry")
    train_step(carrier, api_x(B = 1), api_y(B = 1), opt, state = "carry")
  }), "reset_state()"),
  list("estimate carry for inference", quote(memory_estimate(m, 2, 3, 5, 4, training = FALSE,
                                                             state = "carry")), "`state`"),
  list("horizon zero", quote(predict(m, x, horizon = 0)), "`horizon`"),
  list("horizon fractional", quote(predict(m, x, horizon = 2.5)), "`horizon`"),
  list("horizon text", quote(predict(m, x, horizon = "3")), "`horizon`"),
  list("horizon with output channels != input", quote(predict(wide, x, horizon = 2)),
       "`horizon` needs the last layer's hidden size (3) to equal `input_dim` (2)"),
  list("estimate horizon, output cannot be fed back",
       quote(memory_estimate(wide, 2, 3, 5, 4, horizon = 2)), "`horizon`"),
  list("train horizon with target last_state", quote(train_step(m, x, api_y(T = 2), opt,
                                                                target = "last_state",
                                                                horizon = 2)), "`target`"),
  # free-running training (teacher_forcing = FALSE), and fits over a horizon
  list("train free-running with checkpoint",
       quote(train_step(m, x, api_y(T = 2), opt, horizon = 2, teacher_forcing = FALSE,
                        checkpoint = 2)), "`teacher_forcing = FALSE` cannot be combined"),
  list("train free-running with tbptt",
       quote(train_step(m, x, api_y(T = 2), opt, horizon = 2, teacher_forcing = FALSE,
                        tbptt = 1)), "`teacher_forcing = FALSE` cannot be combined"),
  list("train teacher_forcing NA",
       quote(train_step(m, x, api_y(T = 2), opt, horizon = 2, teacher_forcing = NA)),
       "`teacher_forcing`"),
  list("train teacher_forcing a probability",
       quote(train_step(m, x, api_y(T = 2), opt, horizon = 2, teacher_forcing = 0.5)),
       "`teacher_forcing`"),
  list("train free-running, output cannot be fed back",
       quote(train_step(wide, x, api_y(T = 2), opt, horizon = 2, teacher_forcing = FALSE)),
       "`horizon` needs the last layer's hidden size (3) to equal `input_dim` (2)"),
  list("train free-running y of other length",
       quote(train_step(m, x, api_y(T = 3), opt, horizon = 2, teacher_forcing = FALSE)),
       "`y` must have dim [2, 2, 2, 5, 4]"),
  list("estimate free-running with tbptt",
       quote(memory_estimate(m, 2, 3, 5, 4, horizon = 2, teacher_forcing = FALSE, tbptt = 1)),
       "`teacher_forcing = FALSE` cannot be combined"),
  list("estimate teacher_forcing text",
       quote(memory_estimate(m, 2, 3, 5, 4, horizon = 2, teacher_forcing = "no")),
       "`teacher_forcing`"),
  list("fit horizon y not the frames",
       quote(convlstm_fit(m, x, api_y(T = 3), opt, horizon = 2, verbose = FALSE)),
       "`y` must have dim [2, 2, 2, 5, 4]"),
  list("fit horizon with target last_state",
       quote(convlstm_fit(m, x, api_y(T = 2), opt, horizon = 2, target = "last_state",
                          verbose = FALSE)), "`target`"),
  list("fit horizon, output cannot be fed back",
       quote(convlstm_fit(wide, x, api_y(T = 2, C = 3), opt, horizon = 2, verbose = FALSE)),
       "`horizon` needs the last layer's hidden size (3)"),
  list("fit horizon validation y misshapen",
       quote(convlstm_fit(m, x, api_y(T = 2), opt, horizon = 2, verbose = FALSE,
                          validation_data = list(x, api_y(T = 3)))),
       "`validation_data[[2]]` must have dim"),
  list("fit horizon with batch_size max",
       quote(convlstm_fit(m, x, api_y(T = 2), opt, horizon = 2, batch_size = "max",
                          verbose = FALSE)), "`batch_size = \"max\"`"),
  list("fit carry shuffled", quote(convlstm_fit(m, x, ys, opt, target = "sequence",
                                                state = "carry", verbose = FALSE)),
       "needs `shuffle = FALSE`"),
  list("fit carry batches of two sizes",
       quote(convlstm_fit(m, api_x(B = 3), api_y(B = 3), opt, batch_size = 2, state = "carry",
                          shuffle = FALSE, verbose = FALSE)),
       "not a multiple of `batch_size` (2)"),
  list("fit carry with memory_budget",
       quote(convlstm_fit(m, x, y, opt, state = "carry", shuffle = FALSE,
                          memory_budget = "1 GiB", verbose = FALSE)), "`memory_budget`"),
  list("fit state a given state", quote(convlstm_fit(m, x, y, opt, state = st, verbose = FALSE)),
       "`state`"),
  list("evaluate horizon y misshapen", quote(convlstm_evaluate(m, x, ys, horizon = 2)),
       "`y` must have dim [2, 2, 2, 5, 4]"),
  list("train horizon y of other length", quote(train_step(m, x, api_y(T = 3), opt, horizon = 2)),
       "`y` must have dim [2, 2, 2, 5, 4]"),
  list("train horizon on a data set", quote(train_step(m, convlstm_data(m, x, y), opt,
                                                       horizon = 2)), "`horizon`"),
  list("estimate horizon negative", quote(memory_estimate(m, 2, 3, 5, 4, training = FALSE,
                                                          horizon = -1)), "`horizon`"),
  list("estimate unknown state", quote(memory_estimate(m, 2, 3, 5, 4, state = "held")),
       "`state`"),
  list("estimate batch_size zero", quote(memory_estimate(m, 0, 3, 5, 4)), "`batch_size`"),
  list("estimate bytes overflow", quote(memory_estimate(m, 2^31 - 1, 2^31 - 1, 2^31 - 1,
                                                        2^31 - 1)),
       "overflow"),
  list("advise budget words", quote(memory_advise(m, "lots", 2, 3, 5, 4)), "`budget`"),
  list("advise budget zero", quote(memory_advise(m, 0, 2, 3, 5, 4)), "`budget`"),
  list("advise seq_len zero", quote(memory_advise(m, "1 MiB", 2, 0, 5, 4)), "`seq_len`"),
  list("advise allow_tbptt text", quote(memory_advise(m, "1 MiB", 2, 3, 5, 4, allow_tbptt = "no")),
       "`allow_tbptt`"),
  list("advise unknown target", quote(memory_advise(m, "1 MiB", 2, 3, 5, 4, target = "all")),
       "`target`"),
  list("fit memory_budget words", quote(convlstm_fit(m, x, y, opt, memory_budget = "lots",
                                                     verbose = FALSE)), "`memory_budget`"),
  list("fit memory_budget with checkpoint", quote(convlstm_fit(m, x, y, opt, checkpoint = 2,
    memory_budget = "1 GiB", verbose = FALSE)), "`memory_budget` chooses"),
  list("fit memory_budget too small", quote(convlstm_fit(m, x, y, opt, memory_budget = 100,
                                                         verbose = FALSE)),
       "does not fit in the memory budget", "oom"),
  list("fit batch_size a word", quote(convlstm_fit(m, x, y, opt, batch_size = "all",
                                                   verbose = FALSE)), "`batch_size`"),
  # ---- models that are gone, and things that are not models ----
  list("released model called", quote(released(x)), "released", "state"),
  list("released model trained", quote(train_step(released, x, y, opt)), "released", "state"),
  list("released model saved", quote(convlstm_save(released, tempfile())), "released", "state"),
  list("readRDS model called", quote(restored(x)), "convlstm_save", "state"),
  list("readRDS model predicted", quote(predict(restored, x)), "convlstm_load", "state"),
  list("readRDS model state_dict", quote(state_dict(restored)), "readRDS", "state"),
  list("not a model", quote(train_step(function(x) x, x, y, opt)), "`model`"),
  list("a string as model", quote(memory_stats("m")), "`model`"),
  # ---- state dicts ----
  list("state dict missing entry", quote(load_state_dict(m, sd[-1])), "missing: cell_list.0.conv.weight"),
  list("state dict extra entry", quote(load_state_dict(m, c(sd, list(extra = 1)))),
       "unexpected: extra"),
  list("state dict misshapen", quote(load_state_dict(m, within(sd, {
    cell_list.0.conv.weight <- cell_list.0.conv.weight[, -1, , ]
  }))), "`state_dict$cell_list.0.conv.weight`"),
  list("state dict bias too long", quote(load_state_dict(m, within(sd, {
    cell_list.1.conv.bias <- c(cell_list.1.conv.bias, 0)
  }))), "`state_dict$cell_list.1.conv.bias`"),
  list("state dict with Inf", quote(load_state_dict(m, within(sd, {
    cell_list.1.conv.bias[2] <- Inf
  }))), "`state_dict$cell_list.1.conv.bias`"),
  list("state dict beyond float", quote(load_state_dict(m, within(sd, {
    cell_list.0.conv.weight[1] <- 1e39
  }))), "`state_dict$cell_list.0.conv.weight`"),
  list("state dict with NA", quote(load_state_dict(m, within(sd, {
    cell_list.0.conv.weight[1] <- NA
  }))), "missing values"),
  list("state dict text values", quote(load_state_dict(m, within(sd, {
    cell_list.0.conv.bias <- as.character(cell_list.0.conv.bias)
  }))), "`state_dict$cell_list.0.conv.bias`"),
  list("state dict unnamed", quote(load_state_dict(m, unname(sd))), "`state_dict`"),
  list("state dict not a list", quote(load_state_dict(m, 1:3)), "`state_dict`"),
  list("state dict of another model", quote(load_state_dict(m, list(w = 1))), "`state_dict`"),
  # ---- files ----
  list("load a missing file", quote(convlstm_load(tempfile())), "`path`"),
  list("save path not text", quote(convlstm_save(m, 3)), "`path`"),
  list("save metadata unnamed", quote(convlstm_save(m, tempfile(), metadata = "a")), "`metadata`"),
  list("save metadata bytes-encoded", quote(convlstm_save(m, tempfile(), metadata = c(a = bytes))),
       "`metadata`")
)

if (gpu_available()) {
  message("a usable GPU: the case for device = \"cuda\" without one is not run")
} else {
  bad_input_cases[[length(bad_input_cases) + 1]] <-
    list("device cuda without a GPU", quote(convlstm(1, 4, 3, device = "cuda")), "`device`",
         "unsupported")
}

test_that("the table has at least 60 cases", {
  expect_gte(length(bad_input_cases), 60)
})

env <- input_env()
for (i in seq_along(bad_input_cases)) {
  case <- bad_input_cases[[i]]
  status <- if (length(case) >= 4) case[[4]] else "invalid"
  test_that(sprintf("bad input %d: %s -> convlstm_error_%s", i, case[[1]], status), {
    err <- tryCatch({
      eval(case[[2]], env)
      NULL
    }, error = identity)
    expect_false(is.null(err), info = "no error was raised")
    expect_s3_class(err, paste0("convlstm_error_", status))
    expect_s3_class(err, "convlstm_error")
    expect_true(grepl(case[[3]], conditionMessage(err), fixed = TRUE),
                info = sprintf("message %s lacks %s", encodeString(conditionMessage(err), quote = "'"),
                               case[[3]]))
  })
}

test_that("after all the bad input the model is unchanged and trains", {
  expect_identical(state_dict(env$m), env$sd)
  loss <- train_step(env$m, env$x, env$y, env$opt)
  expect_true(is.finite(loss))
  convlstm_release(env$m)
})
