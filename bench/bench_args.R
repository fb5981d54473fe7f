# bench/bench_args.R -- the --name=value arguments of the bench R scripts,
# sourced by each of them (by its own path, whatever the working folder):
#
#   source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
#                    "bench_args.R"))
#
# bench_arg("name", default): the value of --name=value on the command line
# (the last one, when given twice), a string; else default, as given.
bench_arg <- function(name, default) {
  hit <- grep(paste0("^--", name, "="), commandArgs(trailingOnly = TRUE), value = TRUE)
  if (length(hit) == 0) default else sub("^[^=]*=", "", hit[[length(hit)]])
}
