/*
 * tests/c/json_walk.h -- a document grammar over the JSON reader
 * (src/core/json.h), for tests/c/test_core_json.c and the libFuzzer target
 * tests/fuzz/fuzz_json.c: the reader has no generic value, so this walks
 * one made of its pieces. A document is an object; a value is a string, an
 * object (nested at most JSON_WALK_DEPTH deep: the walker's own bound, as
 * the reader never recurses), an array of at most 16 integers, or an
 * integer. Whatever else is there fails as the reader says.
 *
 * The walk writes what it read in a canonical form to out (when not NULL):
 * {"key":value,...}, strings with their decoded bytes (bytes below 0x20 and
 * the quote and backslash as \xHH), arrays as [1,2]. Every decoded string is
 * checked to be UTF-8 without NUL, every integer below 2^53, the position
 * never past the end; a broken invariant returns -1, not a cl_status.
 */
#ifndef CONVLSTM_TESTS_JSON_WALK_H
#define CONVLSTM_TESTS_JSON_WALK_H

#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_WALK_DEPTH 8

typedef struct json_out {
  char *p;
  size_t n, cap; /* cap 0: nothing is written */
} json_out;

static void json_out_put(json_out *o, const char *s, size_t len) {
  if (!o || !o->cap) return;
  for (size_t k = 0; k < len && o->n + 1 < o->cap; k++) o->p[o->n++] = s[k];
  o->p[o->n] = '\0';
}

static void json_out_str(json_out *o, const char *s) { json_out_put(o, s, strlen(s)); }

static int json_walk_value(cl_json *p, int depth, json_out *o);

static int json_walk_string(cl_json *p, json_out *o) {
  char *s = NULL;
  cl_status st = cl_json_string(p, &s);
  if (st != CL_OK) return s == NULL ? (int)st : -1;
  size_t len = strlen(s);
  int ok = cl_utf8_check((const unsigned char *)s, len) == len && p->i <= p->n;
  json_out_str(o, "\"");
  for (size_t k = 0; k < len; k++) {
    unsigned char c = (unsigned char)s[k];
    char hex[8];
    snprintf(hex, sizeof hex, "\\x%02x", c);
    if (c < 0x20 || c == '"' || c == '\\') json_out_str(o, hex);
    else json_out_put(o, (const char *)&c, 1);
  }
  json_out_str(o, "\"");
  free(s);
  return ok ? 0 : -1;
}

static int json_walk_object(cl_json *p, int depth, json_out *o) {
  if (depth >= JSON_WALK_DEPTH) return (int)cl_json_fail(p, "nested deeper than the walker goes");
  cl_status st = cl_json_object_open(p, "expected an object");
  if (st != CL_OK) return (int)st;
  json_out_str(o, "{");
  int first = 1;
  while (!cl_json_object_end(p)) {
    char *key = NULL;
    st = cl_json_key(p, &key);
    if (st != CL_OK) return key == NULL ? (int)st : -1;
    json_out_str(o, first ? "\"" : ",\"");
    json_out_str(o, key);
    json_out_str(o, "\":");
    first = 0;
    free(key);
    int r = json_walk_value(p, depth + 1, o);
    if (r != 0) return r;
    st = cl_json_member_end(p, "expected ',' or '}' in an object");
    if (st != CL_OK) return (int)st;
  }
  json_out_str(o, "}");
  return p->i <= p->n ? 0 : -1;
}

static int json_walk_value(cl_json *p, int depth, json_out *o) {
  char t[32];
  if (cl_json_peek(p, '"')) return json_walk_string(p, o);
  if (cl_json_peek(p, '{')) return json_walk_object(p, depth, o);
  if (cl_json_peek(p, '[')) {
    uint64_t v[16];
    int n = -1;
    cl_status st = cl_json_uint_array(p, v, 16, &n, "expected an array", "more than 16 entries");
    if (st != CL_OK) return (int)st;
    if (n < 0 || n > 16) return -1;
    json_out_str(o, "[");
    for (int k = 0; k < n; k++) {
      if (v[k] >= CL_JSON_MAX_UINT) return -1;
      snprintf(t, sizeof t, "%s%llu", k ? "," : "", (unsigned long long)v[k]);
      json_out_str(o, t);
    }
    json_out_str(o, "]");
    return 0;
  }
  uint64_t v = CL_JSON_MAX_UINT;
  cl_status st = cl_json_uint(p, "expected a value", &v);
  if (st != CL_OK) return (int)st;
  if (v >= CL_JSON_MAX_UINT) return -1;
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  json_out_str(o, t);
  return 0;
}

/* A whole document s[0..n): UTF-8, an object, then only whitespace. */
static int json_walk(const unsigned char *s, size_t n, const char *name, char *err, size_t errlen,
                     json_out *o) {
  cl_json p;
  cl_status st = cl_json_open(&p, s, n, name, err, errlen);
  if (st != CL_OK) return (int)st;
  cl_json_ws(&p);
  int r = json_walk_object(&p, 0, o);
  if (r != 0) return r;
  return (int)cl_json_end(&p, "unexpected bytes after the document");
}

#endif
