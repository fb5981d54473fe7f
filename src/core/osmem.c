/*
 * core/osmem.c -- what the operating system says this process holds: its
 * resident memory now and its high-water mark, read from /proc/self/status
 * (VmRSS, VmHWM) on Linux. It is the independent instrument beside the
 * accounting allocator: the allocator counts what the plan asked for, this
 * reads what the pages cost. Elsewhere it says why it cannot answer.
 *
 * Not here: device memory (the backend's mem_info slot answers for a GPU).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* "VmRSS:     1234 kB" -> bytes; 0 when the line is not that key. */
static int read_kb_line(const char *line, const char *key, size_t *bytes) {
  size_t n = strlen(key);
  if (strncmp(line, key, n) != 0 || line[n] != ':') return 0;
  unsigned long long kb = 0;
  if (sscanf(line + n + 1, "%llu", &kb) != 1) return 0;
  *bytes = (size_t)kb * 1024u;
  return 1;
}

int cl_os_process_memory(size_t *rss, size_t *hwm, char *why, size_t whylen) {
  *rss = *hwm = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) {
    snprintf(why, whylen, "no /proc/self/status on this platform: resident memory not measured");
    return 0;
  }
  char line[256];
  int got = 0;
  while (fgets(line, sizeof line, f)) {
    got |= read_kb_line(line, "VmRSS", rss) ? 1 : 0;
    got |= read_kb_line(line, "VmHWM", hwm) ? 2 : 0;
  }
  fclose(f);
  if (got != 3) {
    snprintf(why, whylen, "/proc/self/status has no VmRSS/VmHWM lines: resident memory not measured");
    return 0;
  }
  return 1;
}
