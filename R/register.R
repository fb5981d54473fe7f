# register.R -- S3 methods for generics of suggested packages, registered
# when the package that owns the generic is loaded (now, if it already is),
# the way vctrs::s3_register() does, so those packages stay optional.

.onLoad <- function(libname, pkgname) {
  register_s3_later("ggplot2", "autoplot", "convlstm_history", autoplot.convlstm_history)
  register_s3_later("ggplot2", "autoplot", "convlstm_memory_profile",
                    autoplot.convlstm_memory_profile)
}

register_s3_later <- function(pkg, generic, class, method) {
  register <- function(...) {
    registerS3method(generic, class, method, envir = asNamespace(pkg))
  }
  if (isNamespaceLoaded(pkg)) register()
  setHook(packageEvent(pkg, "onLoad"), register)
  invisible()
}
