/*
 * core/json.c -- a small strict JSON reader (RFC 8259), for the header of a
 * safetensors file (core/safetensors.c reads its grammar with it).
 *
 * Why its own reader: the header is untrusted input, and all that is needed
 * of JSON is objects, strings and non-negative integers, so a reader of
 * exactly those is short enough to check by reading, never recurses (the
 * caller's grammar bounds the nesting) and turns every malformed input into
 * a message naming the byte, never into a crash. A libFuzzer target
 * (tests/fuzz/fuzz_json.c) and tests/c/test_core_json.c keep it so.
 *
 * What it refuses: text that is not UTF-8 (checked as a whole first),
 * control characters, unknown escapes, \u escapes that are short or hold an
 * unpaired surrogate or a NUL, numbers with a sign, a fraction, an exponent
 * or a leading zero, integers of 2^53 or more, trailing commas, and every
 * token the caller did not ask for (true, false, null, floats, nesting).
 *
 * Plain C11; it knows nothing of models or of safetensors.
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- UTF-8 ------------------------------------------------------------ */

/* Length of the well-formed UTF-8 sequence at p (at most n bytes), or 0:
 * no overlong forms, no surrogates, nothing above U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < len) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

/* Offset of the first byte that is not well-formed UTF-8, or n. */
size_t cl_utf8_check(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t l = utf8_len(p + i, n - i);
    if (l == 0) return i;
    i += l;
  }
  return n;
}

/* ---- the reader ------------------------------------------------------- */

cl_status cl_json_open(cl_json *p, const unsigned char *s, size_t n, const char *name, char *err,
                       size_t errlen) {
  p->s = s;
  p->n = n;
  p->i = 0;
  p->name = name;
  p->err = err;
  p->errlen = errlen;
  size_t bad = cl_utf8_check(s, n);
  if (bad < n) {
    if (err && errlen) snprintf(err, errlen, "%s byte %zu: not valid UTF-8", name, bad);
    return CL_E_INVALID;
  }
  return CL_OK;
}

cl_status cl_json_fail(cl_json *p, const char *what) {
  if (!p->err || !p->errlen) return CL_E_INVALID;
  if (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c >= 0x20 && c < 0x7f)
      snprintf(p->err, p->errlen, "%s byte %zu ('%c'): %s", p->name, p->i, c, what);
    else
      snprintf(p->err, p->errlen, "%s byte %zu (0x%02x): %s", p->name, p->i, c, what);
  } else {
    snprintf(p->err, p->errlen, "the %s ends early: %s", p->name, what);
  }
  return CL_E_INVALID;
}

void cl_json_ws(cl_json *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->i++;
  }
}

int cl_json_peek(const cl_json *p, unsigned char c) { return p->i < p->n && p->s[p->i] == c; }

cl_status cl_json_expect(cl_json *p, unsigned char c, const char *what) {
  cl_json_ws(p);
  if (!cl_json_peek(p, c)) return cl_json_fail(p, what);
  p->i++;
  cl_json_ws(p);
  return CL_OK;
}

cl_status cl_json_end(cl_json *p, const char *what) {
  cl_json_ws(p);
  if (p->i != p->n) return cl_json_fail(p, what);
  return CL_OK;
}

/* ---- strings ---------------------------------------------------------- */

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(cl_json *p, size_t at, unsigned *out) {
  if (at + 4 > p->n) return 0;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(p->s[at + k]);
    if (h < 0) return 0;
    v = v << 4 | (unsigned)h;
  }
  *out = v;
  return 1;
}

/* The character a one-letter escape (\" \\ \/ \b \f \n \r \t) stands for;
 * -1 for any other letter. */
static int simple_escape(unsigned char e) {
  switch (e) {
  case '"': return '"';
  case '\\': return '\\';
  case '/': return '/';
  case 'b': return '\b';
  case 'f': return '\f';
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  default: return -1;
  }
}

/* The code point of a \u escape, p->i just past its "\u" and the string
 * ending at j: a UTF-16 surrogate pair joins into one; a lone surrogate and
 * NUL (which no C string can hold) are refused. */
static cl_status read_u_escape(cl_json *p, size_t j, unsigned *cp) {
  unsigned lo;
  if (p->i + 4 > j || !read_hex4(p, p->i, cp)) return cl_json_fail(p, "\\u needs four hex digits");
  p->i += 4;
  if (*cp >= 0xD800 && *cp <= 0xDBFF) {
    if (p->i + 6 > j || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
        !read_hex4(p, p->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
      return cl_json_fail(p, "unpaired UTF-16 surrogate in a \\u escape");
    p->i += 6;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
    return cl_json_fail(p, "unpaired UTF-16 surrogate in a \\u escape");
  }
  if (*cp == 0) return cl_json_fail(p, "a string holds a NUL character (\\u0000)");
  return CL_OK;
}

/* cp as UTF-8 into buf at o (at most as long as the escape it came from);
 * returns the new end. */
static size_t put_utf8(char *buf, size_t o, unsigned cp) {
  if (cp < 0x80) {
    buf[o++] = (char)cp;
  } else if (cp < 0x800) {
    buf[o++] = (char)(0xC0 | cp >> 6);
    buf[o++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    buf[o++] = (char)(0xE0 | cp >> 12);
    buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[o++] = (char)(0x80 | (cp & 0x3F));
  } else {
    buf[o++] = (char)(0xF0 | cp >> 18);
    buf[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[o++] = (char)(0x80 | (cp & 0x3F));
  }
  return o;
}

/* The escape whose backslash is at p->i, in a string ending at j, decoded
 * into buf at *o; p->i moves past it (or, refused, to the offending letter). */
static cl_status read_escape(cl_json *p, size_t j, char *buf, size_t *o) {
  unsigned char e = p->s[p->i + 1];
  p->i += 2;
  int c = simple_escape(e);
  if (c >= 0) {
    buf[(*o)++] = (char)c;
    return CL_OK;
  }
  if (e != 'u') {
    p->i -= 1;
    return cl_json_fail(p, "invalid escape in a string");
  }
  unsigned cp;
  cl_status st = read_u_escape(p, j, &cp);
  if (st == CL_OK) *o = put_utf8(buf, *o, cp);
  return st;
}

/* The text was checked to be UTF-8 as a whole (cl_json_open), so raw bytes
 * copy as they are; escapes decode (read_escape), and a control character
 * must have been escaped. */
cl_status cl_json_string(cl_json *p, char **out) {
  *out = NULL;
  if (!cl_json_peek(p, '"')) return cl_json_fail(p, "expected a string");
  size_t j = p->i + 1;
  while (j < p->n && p->s[j] != '"') j += p->s[j] == '\\' ? 2 : 1;
  if (j >= p->n) return cl_json_fail(p, "unterminated string");
  char *buf = malloc(j - p->i); /* the raw text and a NUL: decoding never lengthens */
  if (!buf) {
    if (p->err && p->errlen)
      snprintf(p->err, p->errlen, "out of host memory reading the %s", p->name);
    return CL_E_OOM;
  }
  size_t o = 0;
  cl_status st = CL_OK;
  p->i++;
  while (p->i < j && st == CL_OK) {
    unsigned char c = p->s[p->i];
    if (c < 0x20) {
      st = cl_json_fail(p, "control character in a string (it must be escaped)");
    } else if (c == '\\') {
      st = read_escape(p, j, buf, &o);
    } else {
      buf[o++] = (char)c;
      p->i++;
    }
  }
  if (st != CL_OK) {
    free(buf);
    return st;
  }
  buf[o] = '\0';
  p->i = j + 1;
  *out = buf;
  return CL_OK;
}

/* ---- integers --------------------------------------------------------- */

/* The full number grammar is read so that 1.5, -1 or 1e3 get a clear
 * message. */
cl_status cl_json_uint(cl_json *p, const char *what, uint64_t *out) {
  size_t start = p->i;
  int neg = 0, frac = 0, expo = 0;
  if (cl_json_peek(p, '-')) {
    neg = 1;
    p->i++;
  }
  if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')) {
    p->i = start;
    return cl_json_fail(p, what);
  }
  uint64_t v = 0;
  int big = 0;
  size_t digits0 = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    v = v * 10 + (uint64_t)(p->s[p->i] - '0');
    if (v >= CL_JSON_MAX_UINT) big = 1, v = CL_JSON_MAX_UINT; /* saturate, keep reading */
    p->i++;
  }
  if (p->i - digits0 > 1 && p->s[digits0] == '0') {
    p->i = digits0;
    return cl_json_fail(p, "a number has a leading zero");
  }
  if (cl_json_peek(p, '.')) {
    frac = 1;
    p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) return cl_json_fail(p, "a number needs digits after '.'");
  }
  if (cl_json_peek(p, 'e') || cl_json_peek(p, 'E')) {
    expo = 1;
    p->i++;
    if (cl_json_peek(p, '+') || cl_json_peek(p, '-')) p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) return cl_json_fail(p, "a number needs digits in its exponent");
  }
  if (neg || frac || expo) {
    p->i = start;
    return cl_json_fail(p, what);
  }
  if (big) {
    p->i = start;
    return cl_json_fail(p, "an integer is too large (2^53 or more)");
  }
  *out = v;
  return CL_OK;
}

cl_status cl_json_uint_array(cl_json *p, uint64_t *v, int maxn, int *nv, const char *what,
                             const char *too_many) {
  *nv = 0;
  if (!cl_json_peek(p, '[')) return cl_json_fail(p, what);
  p->i++;
  cl_json_ws(p);
  if (cl_json_peek(p, ']')) {
    p->i++;
    return CL_OK;
  }
  for (;;) {
    if (*nv >= maxn) return cl_json_fail(p, too_many);
    cl_status s = cl_json_uint(p, "expected a non-negative integer", &v[*nv]);
    if (s != CL_OK) return s;
    (*nv)++;
    cl_json_ws(p);
    if (cl_json_peek(p, ',')) {
      p->i++;
      cl_json_ws(p);
      continue;
    }
    if (cl_json_peek(p, ']')) {
      p->i++;
      return CL_OK;
    }
    return cl_json_fail(p, "expected ',' or ']' in an array");
  }
}

/* ---- objects ---------------------------------------------------------- */

cl_status cl_json_object_open(cl_json *p, const char *what) {
  if (!cl_json_peek(p, '{')) return cl_json_fail(p, what);
  p->i++;
  cl_json_ws(p);
  return CL_OK;
}

int cl_json_object_end(cl_json *p) {
  if (!cl_json_peek(p, '}')) return 0;
  p->i++;
  return 1;
}

cl_status cl_json_key(cl_json *p, char **key) {
  cl_status s = cl_json_string(p, key);
  if (s == CL_OK) s = cl_json_expect(p, ':', "expected ':' after a key");
  if (s != CL_OK) {
    free(*key);
    *key = NULL;
  }
  return s;
}

cl_status cl_json_member_end(cl_json *p, const char *what) {
  cl_json_ws(p);
  if (cl_json_peek(p, ',')) {
    p->i++;
    cl_json_ws(p);
    if (cl_json_peek(p, '}')) return cl_json_fail(p, "trailing comma in an object");
  } else if (!cl_json_peek(p, '}')) {
    return cl_json_fail(p, what);
  }
  return CL_OK;
}
