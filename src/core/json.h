/*
 * core/json.h -- a small strict JSON reader: the JSON a safetensors header
 * is made of (objects, strings, non-negative integers, arrays of them), read
 * a token at a time by a caller that knows which token comes next. There is
 * no tree and no generic value: whatever the caller's grammar does not ask
 * for is an error, with the byte it was found at. See json.c.
 *
 * It depends on nothing but convlstm.h's cl_status (and CL_OK).
 */
#ifndef CONVLSTM_CORE_JSON_H
#define CONVLSTM_CORE_JSON_H

#include "convlstm.h" /* cl_status */

#include <stddef.h>
#include <stdint.h>

/* Integers read stay below 2^53, as JSON readers that hold numbers in
 * doubles (Python's, R's) can represent them. */
#define CL_JSON_MAX_UINT ((uint64_t)1 << 53)

typedef struct cl_json {
  const unsigned char *s; /* the text, s[0..n) */
  size_t n, i;            /* its length, and where reading stands */
  const char *name;       /* what the text is, for messages: "header byte 12 ..." */
  char *err;              /* where messages go (may be NULL) */
  size_t errlen;
} cl_json;

/* Length of the well-formed UTF-8 prefix of p[0..n) (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF): n when all of it is. */
size_t cl_utf8_check(const unsigned char *p, size_t n);

/* A reader at the start of s[0..n), which must be UTF-8 as a whole (else
 * CL_E_INVALID). Every other function needs a reader opened by this one. */
cl_status cl_json_open(cl_json *p, const unsigned char *s, size_t n, const char *name, char *err,
                       size_t errlen);

/* CL_E_INVALID with "NAME byte I ('c'): what" (or "the NAME ends early: what"). */
cl_status cl_json_fail(cl_json *p, const char *what);
/* Skips whitespace. */
void cl_json_ws(cl_json *p);
/* 1 when the next byte is c. */
int cl_json_peek(const cl_json *p, unsigned char c);
/* Whitespace, c, whitespace; else fails with what. */
cl_status cl_json_expect(cl_json *p, unsigned char c, const char *what);
/* Nothing but whitespace up to the end; else fails with what. */
cl_status cl_json_end(cl_json *p, const char *what);

/* A string, decoded into a new NUL-terminated buffer (*out; NULL on
 * failure); a \u0000 is refused. CL_E_OOM when out of memory. */
cl_status cl_json_string(cl_json *p, char **out);
/* A number that must be an integer in [0, CL_JSON_MAX_UINT); else fails
 * with what (or a message about its form). */
cl_status cl_json_uint(cl_json *p, const char *what, uint64_t *out);
/* [n, n, ...] of at most maxn such integers into v, the count in *nv; not
 * an array: fails with what; more than maxn entries: with too_many. */
cl_status cl_json_uint_array(cl_json *p, uint64_t *v, int maxn, int *nv, const char *what,
                             const char *too_many);

/* Objects: open, then `while (!cl_json_object_end(p)) { key, value,
 * member_end }`. */
cl_status cl_json_object_open(cl_json *p, const char *what); /* '{' else fails with what */
int cl_json_object_end(cl_json *p);                          /* 1 (and past it) at '}' */
/* A member's name and the ':' after it (*key: NULL on failure). */
cl_status cl_json_key(cl_json *p, char **key);
/* After a member's value: ',' and another member, or the '}'; else fails
 * with what. A ',' before the '}' is refused. */
cl_status cl_json_member_end(cl_json *p, const char *what);

#endif
