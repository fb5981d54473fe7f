/*
 * tests/c/test_core_save_targets.c -- the atomic write's target, below
 * cl_model_save (core/safetensors.h): where cl_st_save_target resolves a
 * path through its symbolic links (relative ones from their own directory,
 * absolute ones, chains, dangling ones; loops and over-long paths refused),
 * and the check cl_st_write_close makes again just before its rename: a
 * directory, FIFO or link put at the target while the file was being written
 * is not replaced, and the temporary file is removed. What cl_model_save
 * writes through links and refuses is tested in test_core_safetensors.c.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, symlink, mkfifo, lstat */
#include "core/safetensors.h"
#include "ctest.h" /* CHECK */

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* Files in the test's directory whose names contain part. */
static int count(const char *part) {
  int n = 0;
  DIR *d = opendir(".");
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, part)) n++;
  if (d) closedir(d);
  return n;
}

static mode_t kind(const char *p) {
  struct stat sb;
  return lstat(p, &sb) == 0 ? sb.st_mode & S_IFMT : 0;
}

/* Relative names run in the test's directory (the working directory). */
static void test_resolve(void) {
  char abs_real[600], abs_link[600], abs_up[600];
  snprintf(abs_real, sizeof abs_real, "%s/real", dir);
  snprintf(abs_link, sizeof abs_link, "%s/sub/up", dir);
  snprintf(abs_up, sizeof abs_up, "%s/sub/../real", dir);
  CHECK(mkdir("sub", 0777) == 0 && symlink("real", "rel") == 0 && symlink("rel", "chain") == 0 &&
            symlink("../real", "sub/up") == 0 && symlink(abs_real, "abs") == 0 &&
            symlink("sub/up", "via_sub") == 0 && symlink("nowhere/new", "dangling") == 0 &&
            symlink("loop_b", "loop_a") == 0 && symlink("loop_a", "loop_b") == 0,
        "making the links");
  struct {
    const char *path, *target; /* target NULL: refused, with the message below */
    const char *says;
  } cases[] = {
    {"real", "real", NULL},           /* nothing there yet: itself */
    {"rel", "real", NULL},            /* a link with no directory part */
    {"chain", "real", NULL},          /* a chain */
    {"sub/up", "sub/../real", NULL},  /* relative to the link's directory */
    {"via_sub", "sub/../real", NULL}, /* a chain through another directory */
    {"abs", abs_real, NULL},          /* absolute */
    {abs_link, abs_up, NULL},         /* an absolute path to a relative link */
    {"dangling", "nowhere/new", NULL},
    {"loop_a", NULL, "more than 40 symbolic links"},
    {".", NULL, "it is a directory"},
    {"sub/", NULL, "it is a directory"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char target[CL_ST_MAX_TARGET + 1] = "", err[256] = "";
    cl_status s = cl_st_save_target(cases[i].path, target, sizeof target, err, sizeof err);
    if (cases[i].target) {
      CHECK(s == CL_OK && strcmp(target, cases[i].target) == 0, "%s: '%s' (%s), not '%s'",
            cases[i].path, target, err, cases[i].target);
    } else {
      CHECK(s == CL_E_INVALID && strstr(err, cases[i].says) && strstr(err, cases[i].path),
            "%s: %s", cases[i].path, err);
    }
  }
  /* a target longer than the bound, and one too long for the caller */
  char *longp = malloc(CL_ST_MAX_TARGET + 2);
  memset(longp, 'a', CL_ST_MAX_TARGET + 1);
  longp[CL_ST_MAX_TARGET + 1] = '\0';
  char target[CL_ST_MAX_TARGET + 1], err[256] = "";
  CHECK(cl_st_save_target(longp, target, sizeof target, err, sizeof err) == CL_E_INVALID &&
            strstr(err, "too long"),
        "a long path: %s", err);
  free(longp);
  char small[4];
  CHECK(cl_st_save_target("chain", small, sizeof small, err, sizeof err) == CL_E_INVALID,
        "a target overflowing the caller's buffer");
  const char *names[] = {"sub/up", "rel", "chain", "abs", "via_sub", "dangling", "loop_a", "loop_b"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(names[i]);
  rmdir("sub");
}

/* A file written through the writer; between open and close, put() puts
 * something at the target. */
static cl_status write_racing(const char *path, void (*put)(void), char *err, size_t errlen) {
  cl_st_writer w;
  cl_status s = cl_st_write_open(&w, path, err, errlen);
  if (s != CL_OK) return s;
  cl_st_buf h = {0};
  cl_st_buf_str(&h, "{}");
  cl_st_write_header(&w, &h);
  free(h.p);
  if (put) put();
  return cl_st_write_close(&w, path, CL_OK, err, errlen);
}

static int fifo_reader = -1;
/* With a reader, so that should anything open the FIFO to write, it cannot
 * block. */
static void put_fifo(void) {
  CHECK(mkfifo("target", 0666) == 0, "mkfifo");
  fifo_reader = open("target", O_RDONLY | O_NONBLOCK);
}
static void put_dir(void) { CHECK(mkdir("target", 0777) == 0, "mkdir"); }
static void put_link(void) {
  unlink("target");
  CHECK(symlink("victim", "target") == 0, "symlink");
}

static void test_recheck(void) {
  /* no race: the file is written, through a link too */
  char err[256] = "";
  CHECK(write_racing("target", NULL, err, sizeof err) == CL_OK && kind("target") == S_IFREG,
        "plain write: %s", err);
  CHECK(symlink("target", "link") == 0, "symlink");
  CHECK(write_racing("link", NULL, err, sizeof err) == CL_OK && kind("link") == S_IFLNK &&
            kind("target") == S_IFREG,
        "write through a link: %s", err);
  unlink("link");
  unlink("target");
  /* what appears at the target meanwhile is left there */
  FILE *f = fopen("victim", "wb");
  CHECK(f && fputs("keep", f) >= 0 && fclose(f) == 0, "cannot write victim");
  struct {
    void (*put)(void);
    int existed; /* a regular file at the target when the write began */
    mode_t left;
    const char *says;
  } cases[] = {
    {put_fifo, 0, S_IFIFO, "it is a FIFO, not a regular file"},
    {put_dir, 0, S_IFDIR, "it is a directory, not a regular file"},
    {put_link, 1, S_IFLNK, "it is a symbolic link, not a regular file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].existed) {
      f = fopen("target", "wb");
      CHECK(f != NULL, "case %zu: cannot create the target", i);
      if (f) fclose(f);
    }
    CHECK(write_racing("target", cases[i].put, err, sizeof err) == CL_E_INVALID &&
              strstr(err, cases[i].says),
          "case %zu: %s", i, err);
    CHECK(kind("target") == cases[i].left, "case %zu: the target was replaced", i);
    CHECK(count(".tmp") == 0, "case %zu: a temporary file left", i);
    if (fifo_reader >= 0) {
      char byte;
      CHECK(read(fifo_reader, &byte, 1) <= 0, "bytes were written into the FIFO");
      close(fifo_reader);
      fifo_reader = -1;
    }
    if (kind("target") == S_IFDIR) rmdir("target");
    else unlink("target");
  }
  char buf[8] = "";
  f = fopen("victim", "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  CHECK(n == 4 && strcmp(buf, "keep") == 0, "the file the new link pointed to changed");
  unlink("victim");
}

int main(void) {
  (void)uniform01; /* ctest.h's RNG: not needed here */
  char cwd[4096];
  snprintf(dir, sizeof dir, "/tmp/cl_test_targets_XXXXXX");
  if (!getcwd(cwd, sizeof cwd) || !mkdtemp(dir) || chdir(dir) != 0) {
    printf("FAIL cannot create a temporary directory\n");
    return 1;
  }
  test_resolve();
  test_recheck();
  CHECK(count("") == 2, "%d files left", count("") - 2); /* . and .. */
  if (chdir(cwd) != 0 || rmdir(dir) != 0) CHECK(0, "cannot remove %s", dir);
  return ctest_done("test_core_save_targets");
}
