# autoplot.R -- ggplot2 versions of the training history's and the memory
# profile's plots. ggplot2 is only suggested: the methods are registered
# when ggplot2 is loaded (register.R), as ggplot2 extensions do, so this
# package neither imports nor attaches it. Legends go below the panel, never
# over the data.

#' ggplot2 plots of a training history and a memory profile
#'
#' With ggplot2 installed, `ggplot2::autoplot()` draws a
#' [convlstm_fit()] history (training and validation loss per epoch, and
#' the learning rate in a panel below when it changed) or a
#' [convlstm_memory_profile()] (memory per category stacked over the batch sizes,
#' with the plan's estimate and the device capacity). The base-graphics
#' `plot()` methods draw the same without ggplot2.
#'
#' @param object A `convlstm_history` or a `convlstm_memory_profile`.
#' @param log_loss Draw the loss on a logarithmic axis.
#' @param ... Unused.
#' @return A ggplot object.
#' @name autoplot.convlstm
#' @examplesIf requireNamespace("ggplot2", quietly = TRUE)
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(8, 1, 6, 6))
#' opt <- convlstm_optimizer_adam(0.01)
#' h <- convlstm_fit(model, x, y, opt, epochs = 4, batch_size = 2, verbose = FALSE,
#'                   validation_split = 0.25, lr_scheduler = convlstm_lr_step(opt, 2, 0.5))
#' ggplot2::autoplot(h)
#' ggplot2::autoplot(convlstm_memory_profile(model, c(2, 4), 3, 6, 6, steps = 0))
#' convlstm_release(model)
NULL

# Columns that the aes() calls below name.
utils::globalVariables(c("epoch", "value", "set", "panel", "batch_size", "bytes",
                         "category"))

#' @rdname autoplot.convlstm
#' @usage \method{autoplot}{convlstm_history}(object, log_loss = TRUE, ...)
autoplot.convlstm_history <- function(object, log_loss = TRUE, ...) {
  x <- object
  has_val <- any(!is.na(x$val_loss))
  loss <- data.frame(epoch = x$epoch, value = x$loss, set = "training", panel = "loss")
  if (has_val) {
    loss <- rbind(loss, data.frame(epoch = x$epoch, value = x$val_loss, set = "validation",
                                   panel = "loss"))
  }
  lrs <- x$lr
  show_lr <- !is.null(lrs) && length(unique(lrs[!is.na(lrs)])) > 1
  df <- loss
  if (show_lr) {
    df <- rbind(df, data.frame(epoch = x$epoch, value = lrs, set = "learning rate",
                               panel = "learning rate"))
  }
  df$panel <- factor(df$panel, levels = c("loss", "learning rate"))
  p <- ggplot2::ggplot(df, ggplot2::aes(x = epoch, y = value, colour = set)) +
    ggplot2::geom_line() +
    ggplot2::geom_point(size = 1.5) +
    ggplot2::scale_colour_manual(values = c(training = "steelblue", validation = "darkorange",
                                            `learning rate` = "grey30")) +
    ggplot2::labs(x = "epoch", y = NULL, colour = NULL) +
    ggplot2::theme(legend.position = "bottom")
  if (show_lr) p <- p + ggplot2::facet_grid(panel ~ ., scales = "free_y")
  else p <- p + ggplot2::labs(y = loss_label(object))
  use_log <- log_loss && !show_lr && all(df$value[is.finite(df$value)] > 0)
  if (use_log) p <- p + ggplot2::scale_y_log10()
  p
}

#' @rdname autoplot.convlstm
#' @usage \method{autoplot}{convlstm_memory_profile}(object, ...)
autoplot.convlstm_memory_profile <- function(object, ...) {
  x <- object
  cats <- mem_categories[vapply(mem_categories, function(cn) any(x[[cn]] > 0, na.rm = TRUE),
                                logical(1))]
  ok <- !x$oom
  stack <- do.call(rbind, lapply(cats, function(cn) {
    data.frame(batch_size = x$batch_size[ok], bytes = x[[cn]][ok], category = cn)
  }))
  stack$category <- factor(stack$category, levels = rev(cats))
  capacity <- attr(x, "capacity")
  p <- ggplot2::ggplot(stack, ggplot2::aes(x = batch_size, y = bytes / 2^20)) +
    ggplot2::geom_area(ggplot2::aes(fill = category), position = "stack") +
    ggplot2::scale_fill_manual(values = category_colours[cats]) +
    ggplot2::geom_point(data = data.frame(batch_size = x$batch_size, bytes = x$estimate),
                        shape = ifelse(ok, 19, 4), colour = ifelse(ok, "black", "red")) +
    ggplot2::labs(x = "batch size", y = "memory (MiB)", fill = NULL,
                  caption = "points: the plan's estimate (x: out of memory)") +
    ggplot2::theme(legend.position = "bottom")
  top <- max(c(x$estimate, rowSums(as.matrix(x[ok, cats, drop = FALSE]))), na.rm = TRUE)
  if (!is.null(capacity) && !is.na(capacity) && capacity > 0 && capacity <= 4 * top) {
    p <- p + ggplot2::geom_hline(yintercept = capacity / 2^20, linetype = 2,
                                 colour = "firebrick")
  }
  p
}
