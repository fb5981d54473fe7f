# Fork safety of the CPU backend: a forked child inherits libgomp's
# bookkeeping for the parent's OpenMP thread pool but not its threads, so
# before the fix the child's first region with more than one thread waited
# forever (parallel::mclapply after training with threads = 2). Each scenario
# runs in a fresh R process under a timeout, so that a regression fails here
# instead of hanging the run; the children train the same tiny model as the
# parent, which has trained first with two threads (its regions started the
# pool the children inherit).

# Runs in the callr process (self-contained: callr sends the function alone).
# Returns the parent's losses before the fork, each child's losses and the
# parent's loss for one more step after the children are done.
fork_driver <- function(scenario, threads, steps_in_child) {
  library(convlstm)
  set.seed(42)
  x <- array(stats::runif(2 * 3 * 2 * 6 * 6, -1, 1), c(2, 3, 2, 6, 6))
  y <- array(stats::runif(2 * 2 * 6 * 6, -1, 1), c(2, 2, 6, 6))
  new_model <- function() convlstm(2, c(4, 2), 3, 2, device = "cpu", threads = threads)
  opt <- convlstm_optimizer_adam(lr = 0.01)
  steps <- function(m, n) vapply(seq_len(n), function(s) convlstm_train_step(m, x, y, opt), numeric(1))
  parent <- new_model()
  before <- steps(parent, 2)
  in_child <- switch(scenario,
    parent_model = function(i) steps(parent, steps_in_child),
    child_model = function(i) {
      m <- new_model()
      on.exit(convlstm_release(m))
      steps(m, steps_in_child)
    }
  )
  children <- parallel::mclapply(1:2, in_child, mc.cores = 2)
  list(before = before, children = children, parent_next = steps(parent, 1))
}

# The driver's result, or NULL when the process ran past `timeout` seconds
# (a hung child); the whole process tree is killed either way.
run_fork_scenario <- function(scenario, threads = 2L, steps_in_child = 3L, timeout = 90) {
  tryCatch(
    callr::r(fork_driver, list(scenario, threads, steps_in_child),
      timeout = timeout, cleanup_tree = TRUE
    ),
    callr_timeout_error = function(e) NULL,
    system_command_timeout_error = function(e) NULL
  )
}

expect_children_trained <- function(res, steps) {
  if (is.null(res)) {
    fail("the scenario ran past its timeout: a forked child hung (in an OpenMP region?)")
    return(invisible())
  }
  expect_length(res$children, 2)
  for (losses in res$children) {
    expect_type(losses, "double") # not a try-error, nor NULL from a crashed child
    expect_length(losses, steps)
    expect_true(all(is.finite(losses)))
  }
}

fork_cases <- list(
  list(
    name = "a model created and trained with threads = 2 in the parent trains in mclapply children",
    scenario = "parent_model", steps = 3L
  ),
  list(
    name = "a model created inside an mclapply child (after the parent used threads) trains",
    scenario = "child_model", steps = 3L
  )
)

for (case in fork_cases) {
  test_that(case$name, {
    skip_on_os("windows") # no fork
    skip_if_not_installed("callr")
    res <- run_fork_scenario(case$scenario, steps_in_child = case$steps)
    expect_children_trained(res, case$steps)
  })
}

test_that("a child's loss for a step equals the parent's for the same step from the same state", {
  skip_on_os("windows")
  skip_if_not_installed("callr")
  res <- run_fork_scenario("parent_model", steps_in_child = 1L)
  expect_children_trained(res, 1L)
  if (is.null(res)) return()
  # The children run on one thread, the parent on two: the sums differ in
  # order only.
  for (losses in res$children) expect_equal(losses, res$parent_next, tolerance = 1e-6)
  # and the step is a real one: the state moved since the first step
  expect_false(isTRUE(all.equal(res$before[1], res$parent_next, tolerance = 1e-6)))
})
