# Bytes of guard band after each step buffer of a model created now: 256
# with CONVLSTM_GUARD=1 (CL_GUARD_BYTES in src/core/internal.h; CI runs the
# suite once so), else 0. The arena's layout tests add it per buffer.
arena_guard_bytes <- function() if (identical(Sys.getenv("CONVLSTM_GUARD"), "1")) 256 else 0

# A model created with CONVLSTM_GUARD set to `guard` ("1" or "" for none),
# the environment restored after.
with_guard <- function(guard, expr) {
  old <- Sys.getenv("CONVLSTM_GUARD", unset = NA)
  Sys.setenv(CONVLSTM_GUARD = guard)
  on.exit(if (is.na(old)) Sys.unsetenv("CONVLSTM_GUARD") else Sys.setenv(CONVLSTM_GUARD = old))
  expr
}
