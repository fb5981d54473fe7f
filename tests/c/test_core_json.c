/*
 * tests/c/test_core_json.c -- the strict JSON reader (src/core/json.c) on
 * its own: UTF-8 validation, strings and their escapes, integers, arrays of
 * them, objects, and what comes after a document; every accepted form with
 * what it decodes to, every refused form with its message and the byte it
 * names. Documents are walked by tests/c/json_walk.h, which also checks the
 * reader's invariants (decoded strings are UTF-8 without NUL, integers below
 * 2^53). Last, the seeds in tests/fuzz/corpus_json/ must parse and the
 * inputs the fuzzer once crashed on (tests/fuzz/regressions_json/) must not
 * crash. Exits nonzero on any failure.
 */
#define _POSIX_C_SOURCE 200809L /* opendir */
#include "core/json.h"
#include "ctest.h"     /* CHECK */
#include "json_walk.h" /* json_walk */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ------------------------------------------------------------ */

/* cl_utf8_check of the bytes s (len n) is want. */
#define UTF8(s, n, want)                                                              \
  do {                                                                                \
    size_t got_ = cl_utf8_check((const unsigned char *)(s), (n));                     \
    CHECK(got_ == (size_t)(want), "utf8 %s: %zu, want %zu", #s, got_, (size_t)(want)); \
  } while (0)

static void test_utf8(void) {
  UTF8("", 0, 0);
  UTF8("plain ascii ~\x7f", 14, 14);
  UTF8("\xc2\x80", 2, 2);             /* U+0080, the first 2-byte */
  UTF8("\xdf\xbf", 2, 2);             /* U+07FF */
  UTF8("\xe0\xa0\x80", 3, 3);         /* U+0800, the first 3-byte */
  UTF8("\xed\x9f\xbf", 3, 3);         /* U+D7FF, just below the surrogates */
  UTF8("\xee\x80\x80", 3, 3);         /* U+E000, just above them */
  UTF8("\xef\xbf\xbf", 3, 3);         /* U+FFFF */
  UTF8("\xf0\x90\x80\x80", 4, 4);     /* U+10000, the first 4-byte */
  UTF8("\xf4\x8f\xbf\xbf", 4, 4);     /* U+10FFFF, the last */
  UTF8("ab\xc3\xa9z", 5, 5);
  /* refused, at the offset of the sequence that is wrong */
  UTF8("ab\x80", 3, 2);               /* a lone continuation byte */
  UTF8("ab\xc0\x80", 4, 2);           /* overlong NUL */
  UTF8("ab\xc1\xbf", 4, 2);           /* overlong 2-byte */
  UTF8("ab\xe0\x9f\xbf", 5, 2);       /* overlong 3-byte */
  UTF8("ab\xf0\x8f\xbf\xbf", 6, 2);   /* overlong 4-byte */
  UTF8("ab\xed\xa0\x80", 5, 2);       /* U+D800, a surrogate */
  UTF8("ab\xed\xbf\xbf", 5, 2);       /* U+DFFF */
  UTF8("ab\xf4\x90\x80\x80", 6, 2);   /* above U+10FFFF */
  UTF8("ab\xf5\x80\x80\x80", 6, 2);   /* no such lead byte */
  UTF8("ab\xff", 3, 2);
  UTF8("ab\xe2\x82", 4, 2);           /* truncated 3-byte */
  UTF8("ab\xf0\x9f\x98", 5, 2);       /* truncated 4-byte */
  UTF8("ab\xe2\x82\xac", 4, 2);       /* cut by n, though the next byte would do */
  UTF8("ab\xf0\x9f\x98\x80", 5, 2);   /* the same, 4-byte */
  UTF8("ab\xe2\x28\xa1", 5, 2);       /* bad second byte */
  UTF8("ab\xe2\x82\x28", 5, 2);       /* bad third byte */
  UTF8("a\xc3\xa9\xc3", 4, 3);        /* the valid prefix is counted */
}

/* ---- documents -------------------------------------------------------- */

/* The document text is accepted and reads back as canon. */
static void accepts(const char *text, const char *canon) {
  char err[256] = "", got[1024];
  json_out o = {got, 0, sizeof got};
  got[0] = '\0';
  int r = json_walk((const unsigned char *)text, strlen(text), "doc", err, sizeof err, &o);
  CHECK(r == 0, "accept %s: %d (%s)", text, r, err);
  if (r == 0) CHECK(strcmp(got, canon) == 0, "accept %s: read %s, want %s", text, got, canon);
}

/* The document (n bytes) is refused with exactly the message msg. */
static void refuses_n(const char *text, size_t n, const char *msg) {
  char err[256] = "";
  int r = json_walk((const unsigned char *)text, n, "doc", err, sizeof err, NULL);
  CHECK(r == CL_E_INVALID, "refuse %s: status %d, want CL_E_INVALID (%s)", text, r, err);
  CHECK(strcmp(err, msg) == 0, "refuse %s: message \"%s\", want \"%s\"", text, err, msg);
}

static void refuses(const char *text, const char *msg) { refuses_n(text, strlen(text), msg); }

static void test_strings(void) {
  accepts("{\"a\":\"\"}", "{\"a\":\"\"}");
  accepts("{\"a\":\"xyz\"}", "{\"a\":\"xyz\"}");
  accepts("{\"e\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}",
          "{\"e\":\"\\x22 \\x5c / \\x08 \\x0c \\x0a \\x0d \\x09\"}");
  accepts("{\"u\":\"\\u0041\\u00e9\\u20AC\"}", "{\"u\":\"A\xc3\xa9\xe2\x82\xac\"}");
  accepts("{\"u\":\"\\u007f\\u0080\\u07ff\\u0800\\uffff\"}",
          "{\"u\":\"\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\"}");
  accepts("{\"s\":\"\\ud83d\\ude00\\uDBFF\\uDFFF\"}", "{\"s\":\"\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"}");
  accepts("{\"raw\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
          "{\"raw\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}");
  accepts("{\"\\u006b\":1}", "{\"k\":1}");

  refuses("{\"a\":\"x\\q\"}", "doc byte 8 ('q'): invalid escape in a string");
  refuses("{\"a\":\"x\\'\"}", "doc byte 8 ('''): invalid escape in a string");
  refuses("{\"a\":\"x\\u12\"}", "doc byte 9 ('1'): \\u needs four hex digits");
  refuses("{\"a\":\"\\u12G4\"}", "doc byte 8 ('1'): \\u needs four hex digits");
  refuses("{\"a\":\"\\u\"}", "doc byte 8 ('\"'): \\u needs four hex digits");
  refuses("{\"a\":\"\\ud800\"}", "doc byte 12 ('\"'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\ud800x\"}", "doc byte 12 ('x'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\ud800\\u0041\"}",
          "doc byte 12 ('\\'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\ud800\\ue000\"}", /* a low surrogate ends at U+DFFF */
          "doc byte 12 ('\\'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\ud800\\udbff\"}", /* and begins at U+DC00 */
          "doc byte 12 ('\\'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\ud800\\ud800\"}",
          "doc byte 12 ('\\'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\udc00\"}", "doc byte 12 ('\"'): unpaired UTF-16 surrogate in a \\u escape");
  refuses("{\"a\":\"\\u0000\"}", "doc byte 12 ('\"'): a string holds a NUL character (\\u0000)");
  refuses("{\"a\":\"x\ty\"}", "doc byte 7 (0x09): control character in a string (it must be escaped)");
  refuses("{\"a\":\"x\ny\"}", "doc byte 7 (0x0a): control character in a string (it must be escaped)");
  refuses("{\"a\":\"x\x1fy\"}", "doc byte 7 (0x1f): control character in a string (it must be escaped)");
  refuses("{\"a\":\"xyz}", "doc byte 5 ('\"'): unterminated string");
  refuses("{\"a\":\"xy\\\"}", "doc byte 5 ('\"'): unterminated string"); /* the quote is escaped */
  refuses("{\"a\":\"xy\\", "doc byte 5 ('\"'): unterminated string");  /* ends in a backslash */
  refuses("{\"a\":'x'}", "doc byte 5 ('''): expected a value");
  /* invalid UTF-8 anywhere is refused before any token is read */
  refuses("{\"a\":\"\xc0\x80\"}", "doc byte 6: not valid UTF-8");
  refuses("{\"a\":\"\xed\xa0\x80\"}", "doc byte 6: not valid UTF-8");
  refuses("{\"a\":\"x\"} \xf4\x90\x80\x80", "doc byte 10: not valid UTF-8");
}

static void test_integers(void) {
  accepts("{\"n\":0}", "{\"n\":0}");
  accepts("{\"n\":7,\"m\":123}", "{\"n\":7,\"m\":123}");
  accepts("{\"n\":9007199254740991}", "{\"n\":9007199254740991}"); /* 2^53 - 1 */
  refuses("{\"n\":9007199254740992}", "doc byte 5 ('9'): an integer is too large (2^53 or more)");
  /* far past 2^64: saturates instead of wrapping around to something small */
  refuses("{\"n\":36893488147419103232}",
          "doc byte 5 ('3'): an integer is too large (2^53 or more)");
  refuses("{\"n\":01}", "doc byte 5 ('0'): a number has a leading zero");
  refuses("{\"n\":00}", "doc byte 5 ('0'): a number has a leading zero");
  refuses("{\"n\":-1}", "doc byte 5 ('-'): expected a value");
  refuses("{\"n\":-0}", "doc byte 5 ('-'): expected a value");
  refuses("{\"n\":-}", "doc byte 5 ('-'): expected a value");
  refuses("{\"n\":+1}", "doc byte 5 ('+'): expected a value");
  refuses("{\"n\":1.5}", "doc byte 5 ('1'): expected a value");
  refuses("{\"n\":1.}", "doc byte 7 ('}'): a number needs digits after '.'");
  refuses("{\"n\":1e3}", "doc byte 5 ('1'): expected a value");
  refuses("{\"n\":1E+3}", "doc byte 5 ('1'): expected a value");
  refuses("{\"n\":1e}", "doc byte 7 ('}'): a number needs digits in its exponent");
  refuses("{\"n\":1e-}", "doc byte 8 ('}'): a number needs digits in its exponent");
  refuses("{\"n\":.5}", "doc byte 5 ('.'): expected a value");
  refuses("{\"n\":true}", "doc byte 5 ('t'): expected a value");
  refuses("{\"n\":null}", "doc byte 5 ('n'): expected a value");
  refuses("{\"n\":0x10}", "doc byte 6 ('x'): expected ',' or '}' in an object");
  refuses("{\"n\":", "the doc ends early: expected a value");
}

static void test_arrays(void) {
  accepts("{\"a\":[]}", "{\"a\":[]}");
  accepts("{\"a\":[ ]}", "{\"a\":[]}");
  accepts("{\"a\":[1,2,3]}", "{\"a\":[1,2,3]}");
  accepts("{\"a\":[ 0 ,\t9007199254740991\n]}", "{\"a\":[0,9007199254740991]}");
  accepts("{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}",
          "{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}");
  refuses("{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
          "doc byte 45 ('1'): more than 16 entries");
  refuses("{\"a\":[1,]}", "doc byte 8 (']'): expected a non-negative integer");
  refuses("{\"a\":[,1]}", "doc byte 6 (','): expected a non-negative integer");
  refuses("{\"a\":[1 2]}", "doc byte 8 ('2'): expected ',' or ']' in an array");
  refuses("{\"a\":[1;2]}", "doc byte 7 (';'): expected ',' or ']' in an array");
  refuses("{\"a\":[\"x\"]}", "doc byte 6 ('\"'): expected a non-negative integer");
  refuses("{\"a\":[[1]]}", "doc byte 6 ('['): expected a non-negative integer");
  refuses("{\"a\":[01]}", "doc byte 6 ('0'): a number has a leading zero");
  refuses("{\"a\":[1", "the doc ends early: expected ',' or ']' in an array");
  refuses("{\"a\":[", "the doc ends early: expected a non-negative integer");

  /* maxn bounds the count exactly, with the caller's message */
  char err[128] = "";
  uint64_t v[3] = {0, 0, 0};
  int n = -1;
  cl_json p;
  const char *two = "[5,6]", *three = "[5,6,7]";
  cl_json_open(&p, (const unsigned char *)two, strlen(two), "doc", err, sizeof err);
  CHECK(cl_json_uint_array(&p, v, 2, &n, "what", "too many") == CL_OK && n == 2 && v[0] == 5 &&
            v[1] == 6 && p.i == 5,
        "[5,6] with maxn 2: n %d, %llu %llu, at %zu", n, (unsigned long long)v[0],
        (unsigned long long)v[1], p.i);
  cl_json_open(&p, (const unsigned char *)three, strlen(three), "doc", err, sizeof err);
  CHECK(cl_json_uint_array(&p, v, 2, &n, "what", "too many") == CL_E_INVALID &&
            strcmp(err, "doc byte 5 ('7'): too many") == 0 && v[2] == 0,
        "[5,6,7] with maxn 2: \"%s\", v[2] = %llu", err, (unsigned long long)v[2]);
  cl_json_open(&p, (const unsigned char *)"7", 1, "doc", err, sizeof err);
  CHECK(cl_json_uint_array(&p, v, 2, &n, "an array, please", "too many") == CL_E_INVALID &&
            strcmp(err, "doc byte 0 ('7'): an array, please") == 0 && n == 0,
        "not an array: \"%s\", n %d", err, n);
}

static void test_objects(void) {
  accepts("{}", "{}");
  accepts(" \t\r\n{ \t\r\n} \t\r\n", "{}");
  accepts("{\"a\":1,\"b\":\"c\",\"d\":[2],\"e\":{\"f\":{}}}",
          "{\"a\":1,\"b\":\"c\",\"d\":[2],\"e\":{\"f\":{}}}");
  accepts("{ \"a\" : 1 , \"b\" :\n\"c\" }", "{\"a\":1,\"b\":\"c\"}");
  accepts("{\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}"); /* duplicates are the caller's business */
  accepts("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{}}}}}}}}",
          "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{}}}}}}}}"); /* 8 deep */

  refuses("", "the doc ends early: expected an object");
  refuses("   ", "the doc ends early: expected an object");
  refuses("[1]", "doc byte 0 ('['): expected an object");
  refuses("\"a\"", "doc byte 0 ('\"'): expected an object");
  refuses("{", "the doc ends early: expected a string");
  refuses("{\"a\"", "the doc ends early: expected ':' after a key");
  refuses("{\"a\":1", "the doc ends early: expected ',' or '}' in an object");
  refuses("{\"a\":1,", "the doc ends early: expected a string");
  refuses("{\"a\":1,}", "doc byte 7 ('}'): trailing comma in an object");
  refuses("{\"a\":1, }", "doc byte 8 ('}'): trailing comma in an object");
  refuses("{,}", "doc byte 1 (','): expected a string");
  refuses("{\"a\" 1}", "doc byte 5 ('1'): expected ':' after a key");
  refuses("{\"a\"::1}", "doc byte 5 (':'): expected a value");
  refuses("{1:2}", "doc byte 1 ('1'): expected a string");
  refuses("{a:2}", "doc byte 1 ('a'): expected a string");
  refuses("{\"a\":1 \"b\":2}", "doc byte 7 ('\"'): expected ',' or '}' in an object");
  refuses("{\"a\":1;\"b\":2}", "doc byte 6 (';'): expected ',' or '}' in an object");
  refuses("{\"a\":1]", "doc byte 6 (']'): expected ',' or '}' in an object");
  /* after the document only whitespace */
  refuses("{} x", "doc byte 3 ('x'): unexpected bytes after the document");
  refuses("{}{}", "doc byte 2 ('{'): unexpected bytes after the document");
  refuses("{}}", "doc byte 2 ('}'): unexpected bytes after the document");
  refuses_n("{}\0", 3, "doc byte 2 (0x00): unexpected bytes after the document");
  refuses("{}\x01", "doc byte 2 (0x01): unexpected bytes after the document");
  /* the walker's own bound (the reader never recurses): 9 deep is refused */
  refuses("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{\"h\":{}}}}}}}}}",
          "doc byte 40 ('{'): nested deeper than the walker goes");
}

/* Every prefix of a valid document is refused, as running out early. */
static void test_truncation(void) {
  const char *doc = "{\"k\":\"v\\u00e9\\ud83d\\ude00\",\"n\":[1,23],\"o\":{\"p\":45}}";
  size_t len = strlen(doc);
  int bad = 0;
  for (size_t n = 0; n < len; n++) {
    char err[256] = "";
    int r = json_walk((const unsigned char *)doc, n, "doc", err, sizeof err, NULL);
    if (r != CL_E_INVALID || (strncmp(err, "the doc ends early: ", 20) != 0 &&
                              strstr(err, "unterminated string") == NULL)) {
      if (!bad) printf("FAIL prefix of %zu bytes: %d \"%s\"\n", n, r, err);
      bad++;
    }
  }
  CHECK(bad == 0, "%d of %zu prefixes were not refused as truncated", bad, len);
  char err[256] = "";
  CHECK(json_walk((const unsigned char *)doc, len, "doc", err, sizeof err, NULL) == 0,
        "the whole document: %s", err);
}

/* The reader's primitives: positions, the name in messages, no err buffer. */
static void test_reader(void) {
  cl_json p;
  char err[128] = "";
  const char *t = "  \"ab\"  :  x";
  CHECK(cl_json_open(&p, (const unsigned char *)t, strlen(t), "hdr", err, sizeof err) == CL_OK &&
            p.i == 0 && p.n == strlen(t),
        "open: at %zu of %zu", p.i, p.n);
  cl_json_ws(&p);
  CHECK(p.i == 2 && cl_json_peek(&p, '"') && !cl_json_peek(&p, 'a'), "ws: at %zu", p.i);
  char *key = NULL;
  CHECK(cl_json_key(&p, &key) == CL_OK && key && strcmp(key, "ab") == 0 && p.i == 11,
        "key: \"%s\", at %zu", key ? key : "(null)", p.i);
  free(key);
  CHECK(cl_json_expect(&p, ',', "a comma") == CL_E_INVALID &&
            strcmp(err, "hdr byte 11 ('x'): a comma") == 0,
        "expect: \"%s\"", err);
  p.i = p.n;
  CHECK(cl_json_peek(&p, 'x') == 0 && cl_json_fail(&p, "more") == CL_E_INVALID &&
            strcmp(err, "the hdr ends early: more") == 0,
        "fail at the end: \"%s\"", err);
  /* a failed key leaves nothing to free */
  const char *nocolon = "\"k\" 1";
  cl_json_open(&p, (const unsigned char *)nocolon, strlen(nocolon), "hdr", err, sizeof err);
  key = (char *)err; /* not NULL before the call */
  CHECK(cl_json_key(&p, &key) == CL_E_INVALID && key == NULL &&
            strcmp(err, "hdr byte 4 ('1'): expected ':' after a key") == 0,
        "key without ':': \"%s\"", err);
  /* no message buffer: the same status, nothing written */
  const char *bad = "{\"a\":\"\\q\"}";
  CHECK(cl_json_open(&p, (const unsigned char *)"\xff", 1, "hdr", NULL, 0) == CL_E_INVALID,
        "open without err: not refused");
  cl_json_open(&p, (const unsigned char *)bad, strlen(bad), "hdr", NULL, 0);
  CHECK(json_walk_object(&p, 0, NULL) == CL_E_INVALID, "walk without err: not refused");
  /* the message is cut to the buffer, NUL-terminated */
  char small[8];
  cl_json_open(&p, (const unsigned char *)bad, strlen(bad), "hdr", small, sizeof small);
  CHECK(json_walk_object(&p, 0, NULL) == CL_E_INVALID && strcmp(small, "hdr byt") == 0,
        "short buffer: \"%s\"", small);
}

/* ---- files ------------------------------------------------------------ */

/* Every file in dir through the walker: must_parse, or merely no crash. */
static int walk_dir(const char *dir, int must_parse) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static unsigned char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char err[256] = "";
    int r = json_walk(buf, len, "doc", err, sizeof err, NULL);
    CHECK(r != -1, "%s: an invariant of the reader is broken", path);
    if (must_parse) CHECK(r == 0, "%s: refused: %s", path, err);
    else CHECK(r == 0 || err[0] != '\0', "%s: refused without a message", path);
    n++;
  }
  closedir(d);
  return n;
}

int main(void) {
  (void)uniform01; /* ctest.h's RNG: not needed here */
  test_utf8();
  test_strings();
  test_integers();
  test_arrays();
  test_objects();
  test_truncation();
  test_reader();
  int seeds = walk_dir("tests/fuzz/corpus_json", 1);
  CHECK(seeds > 0, "no seeds in tests/fuzz/corpus_json (run from the repository root)");
  int regs = walk_dir("tests/fuzz/regressions_json", 0);
  printf("%d seeds, %d regression inputs\n", seeds, regs);
  return ctest_done("test_core_json");
}
