# setup-cache.R -- convlstm_memory_advise() stores its measured rates in the user's
# cache folder (R/advise.R, rates_file()); the suite's calls store them in a
# temporary folder instead, leaving the user's folders as they were.
Sys.setenv(R_USER_CACHE_DIR = file.path(tempdir(), "convlstm-test-cache"))
