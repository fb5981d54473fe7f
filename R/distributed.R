# distributed.R -- data-parallel training over several processes started by
# mpirun: the process's communicator (convlstm_distributed()) and what
# convlstm_fit(distributed = ) needs of it (sharding a global batch, the
# random number generator and weights made equal on every rank, the abort
# of a failing rank).

#' Join the processes that train one model together
#'
#' Starts (once per process) the communicator over which
#' [convlstm_fit()]`(distributed = )` averages gradients: under `mpirun`,
#' MPI (CPU models) or NCCL over MPI (GPU models, one GPU per rank);
#' otherwise a single process of size 1, which trains exactly as without
#' `distributed`. Start the script as HPC users do:
#' `mpirun -np 4 Rscript train.R`.
#'
#' @param backend `"auto"` (MPI under `mpirun`, else one process), `"mpi"`,
#'   `"nccl"` (GPU models: call it before creating the model, which is then
#'   placed on this rank's GPU, the local rank's among those visible) or
#'   `"local"` (one process).
#' @return A `convlstm_distributed`: a list with `rank` (0-based), `size`
#'   (number of processes) and `backend`. A build without MPI or NCCL fails
#'   with an error of class `convlstm_error_unsupported` saying what to
#'   install, when that engine is asked for or `mpirun` started the process.
#' @seealso [convlstm_fit()]; the README's section "Several processes".
#' @export
#' @examples
#' d <- convlstm_distributed()   # one process here: rank 0 of 1
#' d
#' set.seed(1)
#' model <- convlstm(1, 4, 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(runif(8 * 4 * 6 * 6), dim = c(8, 4, 6, 6))
#' h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
#'                   distributed = d, verbose = FALSE)
#' h$loss
#' convlstm_release(model)
convlstm_distributed <- function(backend = c("auto", "mpi", "nccl", "local")) {
  backend <- check_choice(backend, c("auto", "mpi", "nccl", "local"), "backend")
  launched <- under_mpirun()
  engine <- switch(backend,
    auto = if (launched) "mpi" else "local",
    nccl = if (launched) "nccl_mpi" else "nccl",
    backend
  )
  local_rank <- suppressWarnings(as.integer(Sys.getenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
  info <- c_dist_init(engine, if (is.na(local_rank)) 0L else local_rank)
  if (!isTRUE(dist_state$finalizer)) {
    # MPI_Finalize when R ends, or mpirun reports the rank as failed
    reg.finalizer(dist_state, function(e) c_dist_finalize(), onexit = TRUE)
    dist_state$finalizer <- TRUE
  }
  new_distributed(info)
}

dist_state <- new.env(parent = emptyenv())

new_distributed <- function(info) {
  structure(list(rank = info$rank, size = info$size, backend = info$backend),
            class = "convlstm_distributed")
}

# Open MPI and MPICH (PMI) tell their processes so in the environment.
under_mpirun <- function() {
  any(nzchar(Sys.getenv(c("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))))
}

#' @export
print.convlstm_distributed <- function(x, ...) {
  cat(sprintf("<convlstm_distributed> rank %d of %d (%s)\n", x$rank, x$size, x$backend))
  invisible(x)
}

# convlstm_fit()'s `distributed`: NULL, TRUE (convlstm_distributed()) or one.
check_distributed <- function(x, call = sys.call(-1)) {
  if (is.null(x) || isFALSE(x)) return(NULL)
  if (isTRUE(x)) return(convlstm_distributed())
  if (!inherits(x, "convlstm_distributed")) {
    abort_arg("distributed", "NULL, TRUE or the result of convlstm_distributed()", x, call)
  }
  now <- c_dist_info()
  if (is.null(now$backend)) {
    abort_convlstm(paste("`distributed`: this process's communicator was finalized;",
                         "call convlstm_distributed() again."), call = call)
  }
  new_distributed(now)
}

# Rank r's rows of one global batch: contiguous, as equal as may be (the
# first ranks one more when it does not divide).
shard_rows <- function(idx, rank, size) {
  n <- length(idx)
  from <- (rank * n) %/% size
  to <- ((rank + 1L) * n) %/% size
  idx[seq_len(to - from) + from]
}

# Every rank draws the same shuffles: rank 0's generator state to all.
sync_rng <- function() {
  if (!exists(".Random.seed", envir = globalenv(), inherits = FALSE)) set.seed(NULL)
  seed <- get(".Random.seed", envir = globalenv(), inherits = FALSE)
  assign(".Random.seed", c_dist_broadcast_ints(seed, 0L), envir = globalenv())
}

# Every rank must take the same number of steps, or one waits in an
# all-reduce the others never start: rank 0's values against this rank's.
check_same_on_ranks <- function(values, rank, call = sys.call(-1)) {
  root <- stats::setNames(c_dist_broadcast_ints(values, 0L), names(values))
  differ <- names(values)[root != values]
  if (length(differ) > 0) {
    abort_convlstm(sprintf(paste0(
      "`distributed`: rank %d has %s, rank 0 %s; every rank must fit the same number of ",
      "samples, batch size and epochs (each gives all of `x` and takes its share)."),
      rank, paste(sprintf("%s %d", differ, values[differ]), collapse = ", "),
      paste(sprintf("%s %d", differ, root[differ]), collapse = ", ")
    ), call = call)
  }
  invisible(values)
}
