# tools/make_readme_figure.R -- the README's figure, man/figures/README-memory.png:
# the tutorial model's memory per batch size, planned before the step
# (convlstm_memory_estimate()'s total) against the peak held during two real training
# steps (convlstm_memory_profile(), the accounting allocator's peak), in float32 and
# float16, on the CPU. Seeded and on one thread: a rerun draws the same figure.
#   Rscript tools/make_readme_figure.R        (the package installed)
library(convlstm)
set.seed(1)
batch_sizes <- c(1, 5, 10, 20, 40, 70, 100)
profile_of <- function(dtype) {
  model <- convlstm(1, c(64, 1), c(3, 3), device = "cpu", dtype = dtype, threads = 1)
  on.exit(convlstm_release(model))
  convlstm_memory_profile(model, batch_sizes = batch_sizes, seq_len = 5, height = 24, width = 24)
}
prof <- list(float32 = profile_of("float32"), float16 = profile_of("float16"))
mib <- 2^20
out <- "man/figures/README-memory.png"
png(out, width = 720, height = 400, res = 96, type = "cairo")
par(mar = c(4.2, 4.5, 2.2, 1), las = 1)
ymax <- max(sapply(prof, function(p) max(p$estimate, p$peak))) / mib
plot(NA, xlim = c(0, max(batch_sizes) * 1.05), ylim = c(0, ymax * 1.08), xaxs = "i", yaxs = "i",
     xlab = "batch size", ylab = "MiB",
     main = "One training step of the tutorial model (1x24x24, T = 5, hidden c(64, 1))",
     cex.main = 1, font.main = 1)
grid(col = "grey90", lty = 1)
cols <- c(float32 = "#1b6ca8", float16 = "#d95f02")
for (d in names(prof)) {
  p <- prof[[d]]
  lines(p$batch_size, p$estimate / mib, col = cols[[d]], lwd = 2)
  points(p$batch_size, p$peak / mib, col = cols[[d]], pch = 1, cex = 1.6, lwd = 2)
}
legend("topleft", bty = "n", inset = c(0.01, 0.02),
       legend = c("float32: planned by convlstm_memory_estimate()", "float32: peak held, convlstm_memory_profile()",
                  "float16: planned", "float16: peak held"),
       col = rep(cols, each = 2), lty = c(1, NA, 1, NA), pch = c(NA, 1, NA, 1), lwd = 2)
dev.off()
for (d in names(prof)) {
  p <- prof[[d]]
  cat(sprintf("%s: batch %s; planned %s MiB; peak - planned: %s bytes\n", d,
              paste(p$batch_size, collapse = "/"), paste(round(p$estimate / mib, 1), collapse = "/"),
              paste(p$peak - p$estimate, collapse = "/")))
}
cat(sprintf("wrote %s (%.1f KiB)\n", out, file.size(out) / 1024))
