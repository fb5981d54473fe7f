# test-values-data.R -- the generated data sets pinned by values computed
# here in plain R (issue 38, items 1 and 2): convlstm_moving_mnist() in its general
# case (several digits, overlaps, long bouncing trajectories) rebuilt frame
# by frame from its documented construction, convlstm_read_idx() on files written
# byte by byte, convlstm_moving_digits() against the font written out here, and
# convlstm_moving_beams() against its pixels worked out by hand. Every limit is
# tried on both sides of its edge.

# An idx file written byte by byte: the magic number (two zero bytes, the
# type, the number of dimensions), the dimensions as big-endian 32-bit
# integers, then the values. `gz`: written through gzip.
write_idx_file <- function(path, dims, bytes, type = 8, magic0 = as.raw(c(0, 0)), gz = FALSE) {
  con <- if (gz) gzfile(path, "wb") else file(path, "wb")
  on.exit(close(con))
  writeBin(c(magic0, as.raw(type), as.raw(length(dims))), con)
  writeBin(as.integer(dims), con, size = 4, endian = "big")
  writeBin(as.raw(bytes), con)
}

# Images [n, rows, cols] (0..255) to an idx file in row-major order.
write_images <- function(path, img) {
  write_idx_file(path, dim(img), as.vector(aperm(img, rev(seq_along(dim(img))))))
}

# Three 5 x 3 glyphs (taller than wide, so that a swap of rows and columns
# shows), each of one grey level: 51 (0.2), 153 (0.6) and 255 (1.0), a few
# pixels left dark so that a glyph's shape matters.
mnist_glyphs <- function() {
  img <- array(0L, c(3, 5, 3))
  img[1, , ] <- 51L
  img[2, , ] <- 153L
  img[3, , ] <- 255L
  img[1, 1, 1] <- 0L
  img[2, 5, 3] <- 0L
  img[3, 3, 2] <- 0L
  img
}

mnist_files <- function(img = mnist_glyphs(), labels = c(7L, 3L, 5L)) {
  images <- tempfile(fileext = ".idx")
  lab <- tempfile(fileext = ".idx")
  write_images(images, img)
  write_idx_file(lab, length(labels), labels)
  list(images = images, labels = lab, img = img, lab = labels)
}

# Moving MNIST rebuilt from its documentation: with set.seed(seed), the
# digits' rows in the file, then their starting places (a uniform fraction
# of the room a digit has, rows then columns), directions and speeds, one
# draw per digit (digit j of sequence i is draw i + (j - 1) n). Each frame a
# digit first moves, then stops at an edge it passed and reverses that
# component; its place is truncated to whole pixels; overlapping digits
# give the brighter pixel.
ref_moving_mnist <- function(img, n, n_digits, seq_len, size, speed, seed) {
  set.seed(seed)
  m <- n * n_digits
  index <- sample.int(dim(img)[[1]], m, replace = TRUE)
  row <- stats::runif(m)
  col <- stats::runif(m)
  angle <- stats::runif(m, 0, 2 * pi)
  v <- if (length(speed) == 2) stats::runif(m, speed[[1]], speed[[2]]) else rep(speed, m)
  gh <- dim(img)[[2]]
  gw <- dim(img)[[3]]
  frames <- array(0, c(n, seq_len, size, size))
  sums <- frames # what a sum of the digits would give, to show overlaps
  for (k in seq_len(m)) {
    i <- (k - 1) %% n + 1
    g <- img[index[[k]], , ] / 255
    p <- c(row[[k]] * (size - gh), col[[k]] * (size - gw))
    vel <- v[[k]] * c(sin(angle[[k]]), cos(angle[[k]]))
    hi <- c(size - gh, size - gw)
    for (t in seq_len(seq_len)) {
      p <- p + vel
      for (a in 1:2) {
        if (p[[a]] <= 0) {
          p[[a]] <- 0
          vel[[a]] <- -vel[[a]]
        } else if (p[[a]] >= hi[[a]]) {
          p[[a]] <- hi[[a]]
          vel[[a]] <- -vel[[a]]
        }
      }
      r <- floor(p[[1]]) + seq_len(gh)
      cc <- floor(p[[2]]) + seq_len(gw)
      frames[i, t, r, cc] <- pmax(frames[i, t, r, cc], g)
      sums[i, t, r, cc] <- sums[i, t, r, cc] + g
    }
  }
  list(frames = frames, sums = sums, index = matrix(index, n, n_digits))
}

test_that("moving_mnist with several digits equals its construction rebuilt frame by frame", {
  f <- mnist_files()
  n <- 4
  d <- convlstm_moving_mnist(n = n, n_frames = 25, size = 9, n_digits = 3, speed = c(0.5, 2.5),
                    horizon = 6, images = f$images, labels = f$labels, seed = 17)
  ref <- ref_moving_mnist(f$img, n, 3, 25, 9, c(0.5, 2.5), 17)
  expect_identical(d$index, ref$index)
  # each label is the label file's entry for the digit drawn
  expect_identical(d$digits, matrix(f$lab[ref$index], n, 3))
  expect_identical(dim(d$x), c(4L, 19L, 1L, 9L, 9L))
  expect_identical(dim(d$y), c(4L, 6L, 1L, 9L, 9L))
  # x is frames 1..19, y the 6 that follow
  expect_equal(d$x[, , 1, , ], ref$frames[, 1:19, , ], tolerance = 0)
  expect_equal(d$y[, , 1, , ], ref$frames[, 20:25, , ], tolerance = 0)
  # the case has overlaps where the rule matters (a sum would differ: e.g.
  # a 0.2 and a 0.6 digit meeting give 0.6, not 0.8), and nothing exceeds 1
  expect_gt(sum(abs(ref$sums - ref$frames) > 0.1), 20)
  expect_gt(sum(ref$sums > 1), 0)
  expect_true(max(d$x, d$y) <= 1)
})

test_that("overlapping digits hold the brighter pixel, never the sum", {
  # two solid 3 x 3 digits of 0.4 (102) and 1.0 (255) in a frame their own
  # size: they cannot move, so they overlap everywhere in every frame
  img <- array(c(rep(102L, 9), rep(255L, 9)), c(3, 3, 2))
  img <- aperm(img, c(3, 1, 2))
  f <- mnist_files(img, labels = c(4L, 9L))
  d <- convlstm_moving_mnist(n = 6, n_frames = 3, size = 3, n_digits = 2, horizon = 1, speed = 1,
                    images = f$images, labels = f$labels, seed = 2)
  for (i in 1:6) {
    want <- max(c(0.4, 1)[d$index[i, ]]) # the brighter of the two digits drawn
    expect_identical(unique(as.vector(d$x[i, , , , ])), want)
    expect_identical(unique(as.vector(d$y[i, , , , ])), want)
    expect_identical(d$digits[i, ], c(4L, 9L)[d$index[i, ]])
  }
  expect_true(any(d$index[, 1] != d$index[, 2])) # a 0.4 and a 1.0 met somewhere
})

test_that("over a long trajectory every digit reaches all four edges, the last row and column too", {
  img <- array(255L, c(1, 4, 4)) # solid: the occupied cells are the digit's place exactly
  f <- mnist_files(img, labels = 1L)
  d <- convlstm_moving_mnist(n = 5, n_frames = 150, size = 10, n_digits = 1, speed = 1.7, horizon = 0,
                    images = f$images, labels = f$labels, seed = 23)
  for (i in 1:5) {
    rows <- apply(d$x[i, , 1, , ], 1, function(fr) range(which(rowSums(fr) > 0)))
    cols <- apply(d$x[i, , 1, , ], 1, function(fr) range(which(colSums(fr) > 0)))
    expect_identical(range(rows), c(1L, 10L), label = paste("rows of sequence", i))
    expect_identical(range(cols), c(1L, 10L), label = paste("columns of sequence", i))
    # always one whole 4 x 4 digit in the frame
    expect_true(all(apply(d$x[i, , 1, , ], 1, sum) == 16))
    expect_true(all(rows[2, ] - rows[1, ] == 3) && all(cols[2, ] - cols[1, ] == 3))
  }
})

test_that("convlstm_moving_mnist's limits: the horizon, the frame size against the digits", {
  f <- mnist_files()
  args <- list(n = 1, n_digits = 1, speed = 1, images = f$images, labels = f$labels, seed = 1)
  # horizon n_frames - 1: one input frame; n_frames: none, refused
  d <- do.call(convlstm_moving_mnist, c(args, list(n_frames = 4, size = 6, horizon = 3)))
  expect_identical(dim(d$x), c(1L, 1L, 1L, 6L, 6L))
  expect_identical(dim(d$y), c(1L, 3L, 1L, 6L, 6L))
  expect_convlstm_error(do.call(convlstm_moving_mnist, c(args, list(n_frames = 4, size = 6, horizon = 4))),
                        regexp = "`horizon`")
  # the 5 x 3 digits fit a 5-pixel frame exactly (rows pinned at 0), not a 4-pixel one
  d <- do.call(convlstm_moving_mnist, c(args, list(n_frames = 3, size = 5, horizon = 0)))
  g <- f$img[d$index[1, 1], , ] / 255
  for (t in 1:3) {
    fr <- d$x[1, t, 1, , ]
    expect_equal(fr[, which(colSums(fr) > 0)[[1]] + 0:2], g, tolerance = 0)
  }
  expect_convlstm_error(do.call(convlstm_moving_mnist, c(args, list(n_frames = 3, size = 4, horizon = 0))),
                        regexp = "`size`")
})

test_that("read_idx round-trips the values written and refuses a wrong magic number by class", {
  path <- tempfile(fileext = ".idx")
  vals <- c(0, 255, 1, 128, 254, 7, 9, 200, 3, 4, 5, 6)
  write_idx_file(path, c(2, 3, 2), vals)
  a <- convlstm_read_idx(path)
  # row-major: a[i, r, c] is value (i - 1) * 6 + (r - 1) * 2 + c
  want <- array(0L, c(2, 3, 2))
  for (i in 1:2) for (r in 1:3) for (cc in 1:2) want[i, r, cc] <- as.integer(vals[(i - 1) * 6 + (r - 1) * 2 + cc])
  expect_identical(a, want)
  # the same through gzip
  gz <- tempfile(fileext = ".gz")
  write_idx_file(gz, c(2, 3, 2), vals, gz = TRUE)
  expect_identical(convlstm_read_idx(gz), want)
  # one dimension: a plain vector; a dimension of 1 is accepted
  write_idx_file(path, 3, c(9, 8, 7))
  expect_identical(convlstm_read_idx(path), c(9L, 8L, 7L))
  write_idx_file(path, c(1, 1, 2), c(5, 6))
  expect_identical(convlstm_read_idx(path), array(c(5L, 6L), c(1, 1, 2)))
  # the magic number's first byte and its second byte must both be 0
  write_idx_file(path, 3, c(9, 8, 7), magic0 = as.raw(c(1, 0)))
  expect_convlstm_error(convlstm_read_idx(path), regexp = "magic")
  write_idx_file(path, 3, c(9, 8, 7), magic0 = as.raw(c(0x80, 0)))
  expect_convlstm_error(convlstm_read_idx(path), regexp = "magic")
  write_idx_file(path, 3, c(9, 8, 7), magic0 = as.raw(c(0, 1)))
  expect_convlstm_error(convlstm_read_idx(path), regexp = "magic")
  # type 0x08 only; 0x09 (signed bytes) refused
  write_idx_file(path, 3, c(9, 8, 7), type = 9)
  expect_convlstm_error(convlstm_read_idx(path), regexp = "0x09")
  # a dimension of 0 and no dimensions at all are refused
  write_idx_file(path, c(2, 0), integer())
  expect_convlstm_error(convlstm_read_idx(path), regexp = "zero dimension")
  write_idx_file(path, integer(), integer())
  expect_convlstm_error(convlstm_read_idx(path), regexp = "no dimensions")
  # exactly as many values as the dimensions say: one fewer or one more refused
  write_idx_file(path, c(2, 2), 1:3)
  expect_convlstm_error(convlstm_read_idx(path), regexp = "fewer")
  write_idx_file(path, c(2, 2), 1:5)
  expect_convlstm_error(convlstm_read_idx(path), regexp = "beyond")
  write_idx_file(path, c(2, 2), 1:4)
  expect_identical(convlstm_read_idx(path), matrix(1:4, 2, 2, byrow = TRUE))
})

# The 5 x 7 font of convlstm_moving_digits(), written out again here as the reference.
font_ref <- list(
  "0" = c(" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
  "1" = c("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
  "2" = c(" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
  "3" = c("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
  "4" = c("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
  "5" = c("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
  "6" = c("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
  "7" = c("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
  "8" = c(" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
  "9" = c(" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  ")
)
glyph_ref <- function(digit, scale = 1) {
  m <- do.call(rbind, lapply(strsplit(font_ref[[as.character(digit)]], ""), function(r) (r == "#") * 1))
  m[rep(1:7, each = scale), rep(1:5, each = scale), drop = FALSE]
}

# Whether the glyph g sits in the frame fr at some place, alone (nothing else lit).
holds_glyph <- function(fr, g) {
  if (sum(fr) != sum(g)) return(FALSE)
  for (r in 0:(nrow(fr) - nrow(g))) for (cc in 0:(ncol(fr) - ncol(g))) {
    if (all(fr[r + seq_len(nrow(g)), cc + seq_len(ncol(g))] == g)) return(TRUE)
  }
  FALSE
}

test_that("moving_digits draws the glyph of the label it returns, in every frame", {
  d <- convlstm_moving_digits(n = 6, n_frames = 8, size = 12, n_digits = 1, scale = 1, speed = 1.5,
                     horizon = 3, seed = 4)
  expect_identical(dim(d$x), c(6L, 5L, 1L, 12L, 12L))
  expect_identical(dim(d$y), c(6L, 3L, 1L, 12L, 12L))
  expect_true(length(unique(d$digits[, 1])) > 2)
  for (i in 1:6) {
    g <- glyph_ref(d$digits[i, 1])
    for (t in 1:5) expect_true(holds_glyph(d$x[i, t, 1, , ], g), label = paste("x", i, t))
    for (t in 1:3) expect_true(holds_glyph(d$y[i, t, 1, , ], g), label = paste("y", i, t))
  }
  # scale 2: each font pixel a 2 x 2 block
  d2 <- convlstm_moving_digits(n = 2, n_frames = 2, size = 16, n_digits = 1, scale = 2, seed = 5)
  for (i in 1:2) expect_true(holds_glyph(d2$x[i, 1, 1, , ], glyph_ref(d2$digits[i, 1], 2)))
  # y is the frames after x: the whole sequence drawn with the same seed
  all <- convlstm_moving_digits(n = 6, n_frames = 8, size = 12, n_digits = 1, scale = 1, speed = 1.5,
                       horizon = 0, seed = 4)
  expect_identical(d$x, all$x[, 1:5, , , , drop = FALSE])
  expect_identical(d$y, all$x[, 6:8, , , , drop = FALSE])
})

test_that("moving_digits combines overlapping digits by their maximum and keeps its limits", {
  d <- convlstm_moving_digits(n = 5, n_frames = 6, size = 8, n_digits = 4, scale = 1, seed = 6)
  # 0/1 glyphs: a maximum stays 0/1 (a sum would give 2 where they overlap,
  # and four 7 x 5 digits in an 8 x 8 frame always overlap)
  expect_true(all(d$x %in% c(0, 1)))
  # every frame holds at least the largest single glyph's pixels and at most their total
  for (i in 1:5) {
    sums <- vapply(d$digits[i, ], function(g) sum(glyph_ref(g)), numeric(1))
    per <- apply(d$x[i, , 1, , ], 1, sum)
    expect_true(all(per >= max(sums) & per <= sum(sums)))
  }
  # the bounce: reflected off 0 and off hi, by hand
  expect_equal(bounce(1, -3, 10, 3), c(1, 2, 5))
  expect_equal(bounce(9, 2, 10, 3), c(9, 9, 7))
  # a glyph of exactly the frame's height fits; one pixel more does not
  expect_identical(dim(convlstm_moving_digits(n = 1, n_frames = 2, size = 14, scale = 2, seed = 1)$x),
                   c(1L, 2L, 1L, 14L, 14L))
  expect_convlstm_error(convlstm_moving_digits(n = 1, n_frames = 2, size = 13, scale = 2), regexp = "`scale`")
  expect_identical(dim(convlstm_moving_digits(n = 1, n_frames = 3, size = 8, horizon = 2, seed = 1)$x),
                   c(1L, 1L, 1L, 8L, 8L))
  expect_convlstm_error(convlstm_moving_digits(n = 1, n_frames = 3, size = 8, horizon = 3), regexp = "`horizon`")
})

test_that("moving_beams puts the beam where the tutorial's construction says, by hand", {
  d <- convlstm_moving_beams(n = 4, n_frames = 3, size = 8, seed = 3)
  expect_identical(dim(d$x), c(4L, 2L, 1L, 8L, 8L))
  expect_identical(dim(d$y), c(4L, 1L, 8L, 8L))
  # size 8: a beam of 8 %/% 4 = 2 pixels starting at row 8 %/% 2 + 1 = 5,
  # column 8 %/% 4 + 1 = 3, going down-right; each frame it moves one row
  # up and one column right (sequence 1 is untranslated)
  lit <- function(fr) {
    w <- which(fr > 0, arr.ind = TRUE)
    w[order(w[, 1], w[, 2]), , drop = FALSE]
  }
  expect_equal(unname(lit(d$x[1, 1, 1, , ])), rbind(c(5, 3), c(6, 4)))
  expect_equal(unname(lit(d$x[1, 2, 1, , ])), rbind(c(4, 4), c(5, 5)))
  expect_equal(unname(lit(d$y[1, 1, , ])), rbind(c(3, 5), c(4, 6)))
  expect_true(all(d$x %in% c(0, 1)) && all(d$y %in% c(0, 1)))
  # the other sequences: the same movie moved by one shift of at most 4
  # pixels for all its frames, whatever leaves the frame dropped
  ref <- list(d$x[1, 1, 1, , ], d$x[1, 2, 1, , ], d$y[1, 1, , ])
  shift <- function(fr, dy, dx) {
    out <- matrix(0, 8, 8)
    w <- which(fr > 0, arr.ind = TRUE)
    w[, 1] <- w[, 1] + dy
    w[, 2] <- w[, 2] + dx
    w <- w[w[, 1] >= 1 & w[, 1] <= 8 & w[, 2] >= 1 & w[, 2] <= 8, , drop = FALSE]
    out[w] <- 1
    out
  }
  for (i in 2:4) {
    frames <- list(d$x[i, 1, 1, , ], d$x[i, 2, 1, , ], d$y[i, 1, , ])
    found <- FALSE
    for (dy in -4:4) for (dx in -4:4) {
      if (all(vapply(1:3, function(t) identical(shift(ref[[t]], dy, dx), frames[[t]]), logical(1)))) {
        found <- TRUE
      }
    }
    expect_true(found, label = paste("sequence", i, "is sequence 1 moved"))
  }
})
