/*
 * tests/c/test_core_safetensors.c -- saving and loading models through the
 * public header only (CPU): round trips of parameters, optimizer state and
 * metadata; a loaded model and optimizer continue training with exactly the
 * losses of the uninterrupted run; files written by others (no convlstm
 * metadata, other float dtypes); the atomic write; where a save writes
 * (through symbolic links) and what it refuses to replace (a directory,
 * FIFO, socket, a link to one, a link loop); and a table of broken files,
 * each refused with a message. Last, every file in tests/fuzz/corpus/
 * and tests/fuzz/regressions/ (inputs the fuzzer once crashed on) goes
 * through the loader, which must not crash. Exits nonzero on any failure.
 */
#define _POSIX_C_SOURCE 200809L /* opendir, mkdtemp, symlink, mkfifo */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_model */

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>


static char dir[256];

static const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static cl_model *make_model(int bias) {
  cl_config c = ctest_config(2, 3, 2, 3, 1, bias, 1);
  return ctest_model(&c);
}

enum { B = 2, T = 3, C = 2, H = 5, W = 4, CL = 2 };
static float xs[8][B * T * C * H * W], ys[8][B * CL * H * W];

static double step(cl_model *m, int i, const cl_optim *o) {
  cl_host_array x = {xs[i], CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array y = {ys[i], CL_HOST_TORCH_F32, 4, {B, CL, H, W, 0}};
  double loss = NAN;
  cl_status s = cl_model_train_step(m, &x, &y, CL_TARGET_LAST_STATE, o, NULL, &loss);
  CHECK(s == CL_OK, "train step: %s", cl_model_error(m));
  return loss;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
  *len = fread(b, 1, (size_t)n, f);
  fclose(f);
  return b;
}

/* The uninterrupted run against save after k steps, load, continue. */
static void test_resume(const cl_optim *o, int bias, const char *what) {
  ctest_rng = 12345;
  cl_model *a = make_model(bias);
  ctest_rng = 12345;
  cl_model *b = make_model(bias);
  const int k = 3, n = 7;
  double la[8], lb[8];
  for (int i = 0; i < n; i++) la[i] = step(a, i, o);
  for (int i = 0; i < k; i++) lb[i] = step(b, i, o);
  const char *path = tmp_path("resume.safetensors");
  cl_status s = cl_model_save(b, path, o, 0, NULL, NULL);
  CHECK(s == CL_OK, "%s: save: %s", what, cl_model_error(b));
  cl_model_free(b);
  char err[CL_ERRMSG_LEN];
  cl_model *c = NULL;
  /* the thread count is the caller's (the file does not hold it): the same
   * single thread keeps the reductions in the same order */
  cl_config rt;
  memset(&rt, 0, sizeof rt);
  rt.n_threads = 1;
  s = cl_model_load(path, &rt, 1, &c, err, sizeof err);
  CHECK(s == CL_OK, "%s: load: %s", what, err);
  if (!c) return;
  CHECK(cl_model_optimizer_steps(c) == k, "%s: steps %lld", what,
        (long long)cl_model_optimizer_steps(c));
  cl_saved *sv = NULL;
  CHECK(cl_saved_read(path, &sv, err, sizeof err) == CL_OK, "%s: read: %s", what, err);
  cl_optim back;
  int64_t steps = -1;
  memset(&back, 0, sizeof back);
  CHECK(sv && cl_saved_optimizer(sv, &back, &steps) == 1 && steps == k, "%s: no optimizer", what);
  CHECK(back.kind == o->kind && back.lr == o->lr && back.weight_decay == o->weight_decay &&
            (o->kind == CL_OPTIM_SGD ? back.momentum == o->momentum
                                     : back.beta1 == o->beta1 && back.beta2 == o->beta2 &&
                                           back.eps == o->eps),
        "%s: hyperparameters do not round-trip exactly (lr %.17g, wd %.17g, eps %.17g)", what,
        back.lr, back.weight_decay, back.eps);
  cl_saved_free(sv);
  for (int i = k; i < n; i++) lb[i] = step(c, i, o);
  for (int i = 0; i < n; i++)
    CHECK(la[i] == lb[i], "%s: loss %d: %.17g uninterrupted, %.17g resumed", what, i, la[i], lb[i]);
  CHECK(ctest_same_params(a, c), "%s: parameters differ after resuming", what);
  /* without the optimizer the resumed run differs (Adam restarts) */
  cl_model *d = NULL;
  CHECK(cl_model_load(path, NULL, 0, &d, err, sizeof err) == CL_OK, "load: %s", err);
  CHECK(d && cl_model_optimizer_steps(d) == 0, "%s: optimizer restored though not asked", what);
  cl_model_free(d);
  cl_model_free(a);
  cl_model_free(c);
}

static void test_metadata_and_info(void) {
  cl_model *m = make_model(1);
  const char *keys[] = {"epoch", "note"}, *vals[] = {"12", "quote \" backslash \\ tab\t \xc3\xa9"};
  const char *path = tmp_path("meta.safetensors");
  CHECK(cl_model_save(m, path, NULL, 2, keys, vals) == CL_OK, "save: %s", cl_model_error(m));
  char err[CL_ERRMSG_LEN];
  cl_saved *s = NULL;
  CHECK(cl_saved_read(path, &s, err, sizeof err) == CL_OK, "read: %s", err);
  if (!s) return;
  int found = 0;
  for (int i = 0; i < cl_saved_n_metadata(s); i++) {
    const char *k, *v;
    cl_saved_metadata(s, i, &k, &v);
    if (strcmp(k, "note") == 0) found += strcmp(v, vals[1]) == 0;
    if (strcmp(k, "epoch") == 0) found += strcmp(v, "12") == 0;
  }
  CHECK(found == 2, "user metadata did not round-trip");
  CHECK(cl_saved_optimizer(s, NULL, NULL) == 0, "an optimizer appeared");
  const cl_config *c = cl_saved_config(s);
  CHECK(c->input_dim == 2 && c->n_layers == 2 && c->hidden_dims[1] == 2 && c->kernel_sizes[0] == 3 &&
            c->bias == 1,
        "architecture did not round-trip");
  CHECK(cl_saved_n_tensors(s) == 4, "%d tensors", cl_saved_n_tensors(s));
  const char *name, *dt;
  int nd;
  int64_t d[8];
  CHECK(cl_saved_tensor_info(s, 0, &name, &dt, &nd, d) == CL_OK &&
            strcmp(name, "cell_list.0.conv.bias") == 0 && strcmp(dt, "F32") == 0 && nd == 1 &&
            d[0] == 12,
        "tensor info");
  cl_saved_free(s);
  /* reserved names, duplicates */
  const char *bad[] = {"convlstm.input_dim", "format", ""};
  for (int i = 0; i < 3; i++) {
    const char *v = "x";
    CHECK(cl_model_save(m, path, NULL, 1, &bad[i], &v) == CL_E_INVALID, "reserved name %s accepted",
          bad[i]);
  }
  const char *dk[] = {"a", "a"}, *dv[] = {"1", "2"};
  CHECK(cl_model_save(m, path, NULL, 2, dk, dv) == CL_E_INVALID, "duplicate metadata accepted");
  const char *nk = "bad", *nv = "\xff\xfe";
  CHECK(cl_model_save(m, path, NULL, 1, &nk, &nv) == CL_E_INVALID, "non-UTF-8 accepted");
  cl_model_free(m);
}

static void test_optimizer_mismatch(void) {
  cl_model *m = make_model(1);
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0.9, 0, 0, 0, 0};
  step(m, 0, &adam);
  CHECK(cl_model_save(m, tmp_path("mismatch.safetensors"), &sgd, 0, NULL, NULL) == CL_E_INVALID,
        "saving Adam's state as SGD's was accepted");
  CHECK(strstr(cl_model_error(m), "Adam") != NULL, "message: %s", cl_model_error(m));
  /* an optimizer that has not stepped yet: hyperparameters, no state */
  cl_model *f = make_model(0);
  CHECK(cl_model_save(f, tmp_path("fresh.safetensors"), &sgd, 0, NULL, NULL) == CL_OK, "save: %s",
        cl_model_error(f));
  char err[CL_ERRMSG_LEN];
  cl_model *g = NULL;
  CHECK(cl_model_load(tmp_path("fresh.safetensors"), NULL, 1, &g, err, sizeof err) == CL_OK,
        "load: %s", err);
  CHECK(g && cl_model_optimizer_steps(g) == 0, "fresh optimizer steps");
  cl_model_free(g);
  cl_model_free(f);
  cl_model_free(m);
}

/* Loading into an existing model: the architecture must match, and running
 * out of memory for the optimizer state leaves the model as it was. */
static void test_load_into(void) {
  cl_model *a = make_model(1);
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  step(a, 0, &adam);
  const char *path = tmp_path("into.safetensors");
  CHECK(cl_model_save(a, path, &adam, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(a));
  char err[CL_ERRMSG_LEN];
  cl_saved *s = NULL;
  CHECK(cl_saved_read(path, &s, err, sizeof err) == CL_OK, "read: %s", err);
  if (!s) return;
  cl_model *other = make_model(0); /* no bias: another architecture */
  CHECK(cl_saved_load_into(s, other, 1) == CL_E_INVALID &&
            strstr(cl_model_error(other), "architecture") != NULL,
        "loading into another architecture: %s", cl_model_error(other));
  cl_model_free(other);
  /* room for the parameters (and a step) but not for Adam's state */
  cl_model *b = make_model(1);
  cl_mem_stats st;
  cl_model_memory_stats(b, &st);
  cl_model_set_memory_limit(b, st.allocated + 100);
  float w0[12 * 5 * 9], w1[12 * 5 * 9];
  cl_model_get_param(b, "cell_list.0.conv.weight", w0, sizeof w0 / sizeof w0[0]);
  CHECK(cl_saved_load_into(s, b, 1) == CL_E_OOM, "load under a tight limit: %s", cl_model_error(b));
  cl_model_get_param(b, "cell_list.0.conv.weight", w1, sizeof w1 / sizeof w1[0]);
  CHECK(memcmp(w0, w1, sizeof w0) == 0, "a failed load changed the parameters");
  cl_model_memory_stats(b, &st);
  CHECK(st.current[CL_MEM_OPTIMIZER] == 0 && cl_model_optimizer_steps(b) == 0,
        "a failed load left optimizer state");
  /* without the optimizer it fits, and then the weights are a's */
  CHECK(cl_saved_load_into(s, b, 0) == CL_OK, "load weights: %s", cl_model_error(b));
  CHECK(ctest_same_params(a, b), "weights differ after loading into a model");
  cl_model_set_memory_limit(b, 0);
  CHECK(cl_saved_load_into(s, b, 1) == CL_OK && cl_model_optimizer_steps(b) == 1,
        "load with optimizer: %s", cl_model_error(b));
  cl_saved_free(s);
  cl_model_free(a);
  cl_model_free(b);
}

/* ---- files written by hand --------------------------------------------- */

static size_t build(unsigned char *out, size_t cap, const char *header, const void *data,
                    size_t dlen) {
  size_t n = strlen(header);
  if (8 + n + dlen > cap) return 0;
  for (int i = 0; i < 8; i++) out[i] = (unsigned char)((unsigned long long)n >> (8 * i));
  memcpy(out + 8, header, n);
  if (dlen) memcpy(out + 8 + n, data, dlen);
  return 8 + n + dlen;
}

static cl_status parse_and_create(const unsigned char *b, size_t n, char *err, size_t errlen) {
  cl_saved *s = NULL;
  cl_status st = cl_saved_parse(b, n, &s, err, errlen);
  if (st != CL_OK) return st;
  cl_model *m = NULL;
  cl_config rt;
  memset(&rt, 0, sizeof rt);
  rt.n_threads = 1;
  rt.memory_limit = 64u << 20;
  st = cl_saved_create_model(s, &rt, 1, &m, err, errlen);
  cl_model_free(m);
  cl_saved_free(s);
  return st;
}

/* A one-layer model, input 1, hidden 1, kernel 1, bias: weight [4, 2, 1, 1]
 * (8 floats), bias [4] (4 floats): 48 bytes of data. */
static float tiny[12] = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f, 0.7f, -0.8f, 0.01f, 0.02f, 0.03f, 0.04f};
/* Header pieces as JSON text: a float32 tensor's entry; the tiny model's
 * weight [4, 2, 1, 1] at bytes [0, 32) and bias [4] at [32, 48) (TINY_WB:
 * both and the header's end); a header whose weight entry holds the given
 * fields (W_FIELDS) or shape and offsets (W_AT), then the bias; a
 * __metadata__ object of the given entries, and one with the tiny model's
 * four (then more). */
#define TENSOR(name, shape, offsets) \
  "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offsets "}"
#define WEIGHT "cell_list.0.conv.weight"
#define BIAS "cell_list.0.conv.bias"
#define TINY_W TENSOR(WEIGHT, "[4,2,1,1]", "[0,32]")
#define TINY_B TENSOR(BIAS, "[4]", "[32,48]")
#define TINY_WB TINY_W "," TINY_B "}"
#define F32_W "\"dtype\":\"F32\",\"shape\":[4,2,1,1]"
#define W_FIELDS(fields) "{\"" WEIGHT "\":{" fields "}," TINY_B "}"
#define W_AT(shape, offsets) "{" TENSOR(WEIGHT, shape, offsets) "," TINY_B "}"
#define META(entries) "{\"__metadata__\":{" entries "},"
#define TINY_META(more)                                                                        \
  META("\"convlstm.input_dim\":\"1\",\"convlstm.hidden_dims\":\"[1]\","                      \
       "\"convlstm.kernel_sizes\":\"[1]\",\"convlstm.bias\":\"true\"" more)

static void test_foreign_files(void) {
  unsigned char buf[4096];
  char err[CL_ERRMSG_LEN];
  /* PyTorch's save_file(state_dict): no metadata, architecture from shapes */
  size_t n = build(buf, sizeof buf, "{" TINY_W "," TINY_B "}", tiny, sizeof tiny);
  cl_saved *s = NULL;
  CHECK(cl_saved_parse(buf, n, &s, err, sizeof err) == CL_OK, "plain state dict: %s", err);
  if (s) {
    const cl_config *c = cl_saved_config(s);
    CHECK(c->input_dim == 1 && c->n_layers == 1 && c->hidden_dims[0] == 1 && c->kernel_sizes[0] == 1 &&
              c->bias == 1,
          "inferred architecture");
    cl_model *m = NULL;
    CHECK(cl_saved_create_model(s, NULL, 1, &m, err, sizeof err) == CL_OK, "create: %s", err);
    float w[8];
    CHECK(m && cl_model_get_param(m, "cell_list.0.conv.weight", w, 8) == CL_OK &&
              memcmp(w, tiny, sizeof w) == 0,
          "weights of a plain state dict");
    cl_model_free(m);
    cl_saved_free(s);
  }
  /* F64 and BF16 weights convert (0.5 and -0.25 are exact in both) */
  double w64[8] = {0.5, -0.25, 0.5, -0.25, 0.5, -0.25, 0.5, -0.25};
  n = build(buf, sizeof buf,
            "{\"cell_list.0.conv.weight\":{\"dtype\":\"F64\",\"shape\":[4,2,1,1],"
            "\"data_offsets\":[0,64]}}",
            w64, sizeof w64);
  CHECK(parse_and_create(buf, n, err, sizeof err) == CL_OK, "F64 weights: %s", err);
  unsigned short w16[8] = {0x3f00, 0xbe80, 0x3f00, 0xbe80, 0x3f00, 0xbe80, 0x3f00, 0xbe80};
  n = build(buf, sizeof buf,
            "{\"cell_list.0.conv.weight\":{\"dtype\":\"BF16\",\"shape\":[4,2,1,1],"
            "\"data_offsets\":[0,16]}}  ",
            w16, sizeof w16);
  s = NULL;
  CHECK(cl_saved_parse(buf, n, &s, err, sizeof err) == CL_OK, "BF16 weights: %s", err);
  if (s) {
    cl_model *m = NULL;
    float w[8];
    CHECK(cl_saved_create_model(s, NULL, 0, &m, err, sizeof err) == CL_OK, "create: %s", err);
    CHECK(m && cl_model_get_param(m, "cell_list.0.conv.weight", w, 8) == CL_OK && w[0] == 0.5f &&
              w[1] == -0.25f,
          "BF16 values");
    cl_model_free(m);
    cl_saved_free(s);
  }
}

/* Adam's metadata with lr, beta1, beta2 and steps given, and its state tensors (role
 * "exp_avg" or "exp_avg_sq") for the tiny model: weight [w0, w1), bias [w1, b1). */
#define ADAM_META(lr, beta1, beta2, steps)                                                    \
  "\"convlstm.optimizer\":\"adam\",\"convlstm.optimizer.lr\":\"" lr "\","                     \
  "\"convlstm.optimizer.weight_decay\":\"0\",\"convlstm.optimizer.beta1\":\"" beta1 "\","     \
  "\"convlstm.optimizer.beta2\":\"" beta2 "\",\"convlstm.optimizer.eps\":\"1e-8\","         \
  "\"convlstm.optimizer.steps\":\"" steps "\""
/* SGD's metadata with lr and steps given. */
#define SGD_META(lr, steps)                                                                   \
  "\"convlstm.optimizer\":\"sgd\",\"convlstm.optimizer.lr\":\"" lr "\","                      \
  "\"convlstm.optimizer.weight_decay\":\"0\",\"convlstm.optimizer.momentum\":\"0\","         \
  "\"convlstm.optimizer.steps\":\"" steps "\""
#define ADAM_STATE(role, w0, w1, b1)                                                          \
  "\"optimizer." role ".cell_list.0.conv.weight\":{\"dtype\":\"F32\",\"shape\":[4,2,1,1],"     \
  "\"data_offsets\":[" w0 "," w1 "]},\"optimizer." role ".cell_list.0.conv.bias\":"              \
  "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[" w1 "," b1 "]}"

typedef struct bad_case {
  const char *what, *header;
  int data_len; /* bytes of tiny to append, -1 for 48 */
  const char *expect; /* a piece of the message */
} bad_case;

static const bad_case BAD[] = {
    {"not JSON", "hello", -1, "JSON object"},
    {"array header", "[]", -1, "JSON object"},
    {"empty object", "{}", 0, "not a convlstm"},
    {"unterminated", "{\"a\":", -1, "ends early"},
    {"trailing comma", "{" TINY_W "," TINY_B ",}", -1, "trailing comma"},
    {"missing colon", "{\"cell_list.0.conv.weight\" {}}", -1, "':'"},
    {"single quotes", "{'a':1}", -1, "expected a string"},
    {"bad escape", "{\"a\\q\":{}}", -1, "invalid escape"},
    {"lone surrogate", "{\"\\ud800\":{}}", -1, "surrogate"},
    {"NUL escape", "{\"\\u0000\":{}}", -1, "NUL"},
    {"raw control char", "{\"a\tb\":{}}", -1, "control character"},
    {"bad UTF-8", "{\"\xc3\x28\":{}}", -1, "UTF-8"},
    {"overlong UTF-8", "{\"\xc0\xaf\":{}}", -1, "UTF-8"},
    {"garbage after", "{" TINY_W "," TINY_B "} x", -1, "after the header"},
    {"tensor not object", "{\"cell_list.0.conv.weight\":5}", -1, "must be an object"},
    {"unknown key", W_FIELDS(F32_W ",\"data_offsets\":[0,32],\"extra\":1"), -1, "may only have"},
    {"missing dtype", W_FIELDS("\"shape\":[4,2,1,1],\"data_offsets\":[0,32]"), -1,
     "lacks its dtype"},
    {"duplicate key", W_FIELDS("\"dtype\":\"F32\"," F32_W ",\"data_offsets\":[0,32]"), -1, "twice"},
    {"unknown dtype", W_FIELDS("\"dtype\":\"F33\",\"shape\":[4,2,1,1],\"data_offsets\":[0,32]"), -1,
     "unknown dtype"},
    {"integer dtype", W_FIELDS("\"dtype\":\"I32\",\"shape\":[4,2,1,1],\"data_offsets\":[0,32]"), -1,
     "dtype I32"},
    {"negative dim", W_AT("[-4,2,1,1]", "[0,32]"), -1, "non-negative integer"},
    {"fractional dim", W_AT("[4.0,2,1,1]", "[0,32]"), -1, "non-negative integer"},
    {"leading zero", W_AT("[04,2,1,1]", "[0,32]"), -1, "leading zero"},
    {"huge dim", W_AT("[99999999999999999999,2,1,1]", "[0,32]"), -1, "too large"},
    {"size overflow", W_AT("[4000000000,4000000000,1,1]", "[0,32]"), -1, "overflows"},
    {"rank 9", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
     4, "more than 8"},
    {"three offsets", W_AT("[4,2,1,1]", "[0,32,48]"), -1, "exactly 2"},
    {"offsets reversed", W_AT("[4,2,1,1]", "[32,0]"), -1, "end before"},
    {"size mismatch", W_AT("[4,2,1,1]", "[0,28]"), -1, "needs 32"},
    {"overlap", "{" TINY_W "," TENSOR(BIAS, "[4]", "[16,32]") "}", -1, "overlaps"},
    {"gap", "{" TENSOR(WEIGHT, "[4,2,1,1]", "[4,36]") "," TENSOR(BIAS, "[3]", "[36,48]") "}", -1,
     "gap"},
    {"data too short", "{" TINY_W "," TINY_B "}", 40, "cover 48 bytes"},
    {"data too long", "{" TINY_W "}", 48, "cover 32 bytes"},
    {"duplicate tensor", "{" TINY_W "," TINY_W "}", 32, "appears twice"},
    {"weight odd rows", "{" TENSOR(WEIGHT, "[3,2,1,2]", "[0,48]") "}", -1, "[4 * hidden"},
    {"even kernel", "{" TENSOR(WEIGHT, "[4,2,2,2]", "[0,128]") "}", -2, "kh, kw odd"},
    {"extra tensor", "{" TINY_W "," TENSOR("junk", "[4]", "[32,48]") "}", -1,
     "unexpected tensor \"junk\""},
    {"missing bias of layer", TINY_META("") TINY_W "}", 32, "cell_list.0.conv.bias is missing"},
    {"metadata shape mismatch",
     META("\"convlstm.input_dim\":\"2\",\"convlstm.hidden_dims\":\"[1]\","
          "\"convlstm.kernel_sizes\":\"[1]\",\"convlstm.bias\":\"true\"") TINY_WB,
     -1, "the model needs [4, 3, 1, 1]"},
    {"metadata partial", META("\"convlstm.input_dim\":\"1\"") TINY_WB, -1, "only in part"},
    {"metadata dilation list too long", TINY_META(",\"convlstm.dilation_h\":\"[1, 2]\"") TINY_WB,
     -1, "convlstm.dilation_h must be a list of 1"},
    {"metadata kernel width zero", TINY_META(",\"convlstm.kernel_widths\":\"[0]\"") TINY_WB, -1,
     "convlstm.kernel_widths must be"},
    {"metadata dropout of 1", TINY_META(",\"convlstm.dropout\":\"[1]\"") TINY_WB, -1,
     "convlstm.dropout must be a list of 1 numbers in [0, 1)"},
    {"metadata recurrent_dropout malformed",
     TINY_META(",\"convlstm.recurrent_dropout\":\"[0.5,0.1]\"") TINY_WB, -1,
     "convlstm.recurrent_dropout must be"},
    {"metadata dropout negative", TINY_META(",\"convlstm.dropout\":\"[-0.5]\"") TINY_WB, -1,
     "convlstm.dropout must be"},
    {"metadata bad list",
     META("\"convlstm.input_dim\":\"1\",\"convlstm.hidden_dims\":\"[1,]\","
          "\"convlstm.kernel_sizes\":\"[1]\",\"convlstm.bias\":\"true\"") TINY_WB,
     -1, "hidden_dims"},
    {"metadata non-string", META("\"a\":1") TINY_WB, -1, "must be strings"},
    {"metadata twice", META("") "\"__metadata__\":{}," TINY_WB, -1, "twice"},
    {"metadata dup key", META("\"a\":\"1\",\"a\":\"2\"") TINY_WB, -1, "twice"},
    {"future version", META("\"convlstm.format_version\":\"3\"") TINY_WB, -1, "version"},
    {"bad optimizer", META("\"convlstm.optimizer\":\"adagrad\"") TINY_WB, -1,
     "\"sgd\" or \"rmsprop\""},
    {"optimizer missing lr", META("\"convlstm.optimizer\":\"sgd\"") TINY_WB, -1,
     "optimizer.lr is missing"},
    {"optimizer lr NaN", META(SGD_META("nan", "0")) TINY_WB, -1, "lr"},
    {"optimizer hex lr", META(SGD_META("0x1p-3", "0")) TINY_WB, -1, "lr"},
    {"optimizer negative steps", META(SGD_META("0.1", "-1")) TINY_WB, -1, "steps"},
    {"adam beta1 = 1", META(ADAM_META("0.1", "1", "0.9", "0")) TINY_WB, -1, "beta1"},
    {"adam steps without state", META(ADAM_META("0.1", "0.9", "0.9", "3")) TINY_WB, -1,
     "state (exp_avg"},
    {"orphan optimizer key", META("\"convlstm.optimizer.lr\":\"0.1\"") TINY_WB, -1,
     "convlstm.optimizer (the kind)"},
    {"state without optimizer",
     "{" TINY_W "," TENSOR("optimizer.momentum_buffer." WEIGHT, "[4,2,1,1]", "[32,64]") "}", -3,
     "no convlstm.optimizer"},
    /* valid doubles that the float update cannot use (cl_optim_check) */
    {"beta2 rounds to 1 as a float", META(ADAM_META("0.001", "0.9", "0.9999999999", "1")) TINY_WB,
     -1, "`betas`"},
    {"lr beyond float", META(ADAM_META("1e39", "0.9", "0.999", "1")) TINY_WB, -1, "`lr`"},
    /* Adam's second moments below zero (tiny holds negative values) */
    {"negative exp_avg_sq",
     META(ADAM_META("0.001", "0.9", "0.999", "1")) TINY_W "," TINY_B "," ADAM_STATE(
         "exp_avg", "48", "80", "96") "," ADAM_STATE("exp_avg_sq", "96", "128", "144") "}",
     -4, "negative value"},
};

static void test_broken_files(void) {
  unsigned char buf[8192], data[256] = {0};
  char err[CL_ERRMSG_LEN];
  memcpy(data, tiny, sizeof tiny);
  memcpy(data + 48, tiny, sizeof tiny);
  memcpy(data + 96, tiny, sizeof tiny);
  int nbad = (int)(sizeof BAD / sizeof BAD[0]);
  for (int i = 0; i < nbad; i++) {
    const bad_case *c = &BAD[i];
    size_t dl = c->data_len == -1 ? 48 : c->data_len == -2 ? 128 : c->data_len == -3 ? 64
              : c->data_len == -4 ? 144 : (size_t)c->data_len;
    size_t n = build(buf, sizeof buf, c->header, data, dl);
    err[0] = '\0';
    cl_status st = parse_and_create(buf, n, err, sizeof err);
    CHECK(st != CL_OK, "%s: accepted", c->what);
    CHECK(strstr(err, c->expect) != NULL, "%s: message \"%s\" lacks \"%s\"", c->what, err, c->expect);
  }
  printf("broken files: %d cases\n", nbad);
  /* header length fields */
  size_t n = build(buf, sizeof buf, "{" TINY_W "," TINY_B "}", tiny, sizeof tiny);
  CHECK(parse_and_create(buf, n, err, sizeof err) == CL_OK, "the valid base file: %s", err);
  unsigned char b2[8192];
  memcpy(b2, buf, n);
  b2[7] = 0x80; /* 2^63 */
  CHECK(parse_and_create(b2, n, err, sizeof err) == CL_E_INVALID && strstr(err, "header length"),
        "huge header length: %s", err);
  memcpy(b2, buf, n);
  b2[0] = 1, b2[1] = b2[2] = 0;
  CHECK(parse_and_create(b2, n, err, sizeof err) == CL_E_INVALID, "header length 1: %s", err);
  /* every truncation of a valid file is refused, never read past */
  int refused = 0;
  for (size_t k = 0; k < n; k++) refused += parse_and_create(buf, k, err, sizeof err) != CL_OK;
  CHECK(refused == (int)n, "%d of %zu truncations refused", refused, n);
  /* non-finite parameters are counted */
  float nanw[12];
  memcpy(nanw, tiny, sizeof nanw);
  nanw[2] = NAN;
  nanw[5] = INFINITY;
  n = build(buf, sizeof buf, "{" TINY_W "," TINY_B "}", nanw, sizeof nanw);
  CHECK(parse_and_create(buf, n, err, sizeof err) == CL_E_INVALID && strstr(err, "2 non-finite"),
        "non-finite: %s", err);
  /* a file on disk: missing, a directory, too short */
  cl_saved *s = NULL;
  CHECK(cl_saved_read(tmp_path("nope.safetensors"), &s, err, sizeof err) == CL_E_INVALID &&
            strstr(err, "cannot open"),
        "missing file: %s", err);
  CHECK(cl_saved_read(dir, &s, err, sizeof err) == CL_E_INVALID, "a directory: %s", err);
  FILE *f = fopen(tmp_path("short.safetensors"), "wb");
  fwrite("abc", 1, 3, f);
  fclose(f);
  CHECK(cl_saved_read(tmp_path("short.safetensors"), &s, err, sizeof err) == CL_E_INVALID &&
            strstr(err, "too few"),
        "short file: %s", err);
}

/* Temporary files (name.tmp<pid>.<n>) left in the test's directory. */
static int temps_left(void) {
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".tmp")) n++;
  if (d) closedir(d);
  return n;
}

static void test_atomic_write(void) {
  cl_model *m = make_model(1);
  const char *path = tmp_path("atomic.safetensors");
  CHECK(cl_model_save(m, path, NULL, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(m));
  size_t n1 = 0;
  unsigned char *first = slurp(path, &n1);
  CHECK(first && n1 > 8 && (n1 % 4) == 0, "file size %zu", n1);
  /* the data starts 8-aligned, as safetensors writers align it */
  unsigned long long hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | first[i];
  CHECK((8 + hl) % 8 == 0, "header length %llu leaves the data unaligned", hl);
  free(first);
  /* overwrite: the new file replaces the old one, nothing is left beside it */
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0.5, 0, 0, 0, 0};
  step(m, 1, &sgd);
  CHECK(cl_model_save(m, path, &sgd, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(m));
  CHECK(temps_left() == 0, "%d temporary files left", temps_left());
  /* a directory that does not exist: an error, nothing written */
  CHECK(cl_model_save(m, tmp_path("no/such/dir.safetensors"), NULL, 0, NULL, NULL) == CL_E_INVALID,
        "save into a missing directory");
  CHECK(strstr(cl_model_error(m), "cannot create") != NULL, "message: %s", cl_model_error(m));
  /* a path that is a directory: refused */
  CHECK(cl_model_save(m, dir, NULL, 0, NULL, NULL) == CL_E_INVALID, "save over a directory");
  cl_model_free(m);
}

/* 1 when a file at path holds exactly m's parameters. */
static int file_holds(const char *path, cl_model *m) {
  cl_model *l = NULL;
  char err[CL_ERRMSG_LEN];
  if (cl_model_load(path, NULL, 0, &l, err, sizeof err) != CL_OK) return 0;
  int same = ctest_same_params(l, m);
  cl_model_free(l);
  return same;
}

static int is_link_to(const char *path, const char *to) {
  char buf[512];
  struct stat sb;
  ssize_t k = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) ? readlink(path, buf, sizeof buf - 1) : -1;
  if (k < 0) return 0;
  buf[k] = '\0';
  return strcmp(buf, to) == 0;
}

/* Through symbolic links: the file they lead to is replaced (or made, for
 * a dangling link), the links stay links. */
static void test_save_through_links(void) {
  cl_model *old = make_model(1), *new = make_model(1);
  mkdir(tmp_path("sub"), 0777);
  struct {
    const char *save, *file; /* the name saved to, the file that gets the model */
    int exists;              /* 0: the link dangles */
    const char *links[2][2]; /* {name, what it points to} */
  } cases[] = {
    {"t_link", "t_real.st", 1, {{"t_link", "t_real.st"}, {NULL, NULL}}},
    {"t_outer", "t_real.st", 1, {{"t_outer", "t_inner"}, {"t_inner", "t_real.st"}}},
    {"t_sublink", "sub/t_real.st", 1, {{"t_sublink", "sub/t_real.st"}, {NULL, NULL}}},
    {"t_dangling", "sub/t_new.st", 0, {{"t_dangling", "sub/t_new.st"}, {NULL, NULL}}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char save[512], file[512], e[CL_ERRMSG_LEN];
    snprintf(save, sizeof save, "%s", tmp_path(cases[i].save));
    snprintf(file, sizeof file, "%s", tmp_path(cases[i].file));
    if (cases[i].exists)
      CHECK(cl_model_save(old, file, NULL, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(old));
    for (int k = 0; k < 2 && cases[i].links[k][0]; k++)
      CHECK(symlink(cases[i].links[k][1], tmp_path(cases[i].links[k][0])) == 0, "symlink");
    CHECK(cl_save_target_check(save, e, sizeof e) == CL_OK, "%s: check: %s", cases[i].save, e);
    CHECK(cl_model_save(new, save, NULL, 0, NULL, NULL) == CL_OK, "%s: save: %s", cases[i].save,
          cl_model_error(new));
    for (int k = 0; k < 2 && cases[i].links[k][0]; k++)
      CHECK(is_link_to(tmp_path(cases[i].links[k][0]), cases[i].links[k][1]),
            "%s: %s is no longer a link to %s", cases[i].save, cases[i].links[k][0],
            cases[i].links[k][1]);
    CHECK(file_holds(file, new), "%s: %s does not hold the new model", cases[i].save, file);
    CHECK(temps_left() == 0, "%s: %d temporary files left", cases[i].save, temps_left());
    for (int k = 0; k < 2 && cases[i].links[k][0]; k++) unlink(tmp_path(cases[i].links[k][0]));
    unlink(file);
  }
  CHECK(rmdir(tmp_path("sub")) == 0, "files left in sub/");
  cl_model_free(old);
  cl_model_free(new);
}

/* What is not a regular file is refused, by cl_save_target_check and by
 * cl_model_save, and left as it was; so is a file elsewhere. */
static void test_save_refused(void) {
  cl_model *m = make_model(1);
  char keep[512];
  snprintf(keep, sizeof keep, "%s", tmp_path("t_keep.st"));
  CHECK(cl_model_save(m, keep, NULL, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(m));
  size_t nk = 0;
  unsigned char *kept = slurp(keep, &nk);
  CHECK(mkdir(tmp_path("t_dir"), 0777) == 0, "mkdir");
  CHECK(mkfifo(tmp_path("t_fifo"), 0666) == 0, "mkfifo");
  /* a reader, so that opening the FIFO to write could not block */
  int rd = open(tmp_path("t_fifo"), O_RDONLY | O_NONBLOCK);
  int sock = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tmp_path("t_sock"));
  CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0, "socket");
  CHECK(symlink("t_dir", tmp_path("t_dirlink")) == 0 && symlink("t_fifo", tmp_path("t_fifolink")) == 0 &&
            symlink("t_loop2", tmp_path("t_loop1")) == 0 && symlink("t_loop1", tmp_path("t_loop2")) == 0,
        "symlink");
  struct {
    const char *name, *says;
  } refused[] = {
    {"t_dir", "it is a directory, not a regular file"},
    {"t_fifo", "it is a FIFO, not a regular file"},
    {"t_sock", "it is a socket, not a regular file"},
    {"t_dirlink", "t_dir', a directory, not a regular file"},
    {"t_fifolink", "t_fifo', a FIFO, not a regular file"},
    {"t_loop1", "more than 40 symbolic links"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char p[512], e[CL_ERRMSG_LEN] = "";
    snprintf(p, sizeof p, "%s", tmp_path(refused[i].name));
    struct stat before, after;
    CHECK(lstat(p, &before) == 0, "lstat %s", p);
    CHECK(cl_save_target_check(p, e, sizeof e) == CL_E_INVALID && strstr(e, refused[i].says) &&
              strstr(e, p),
          "%s: check: %s", refused[i].name, e);
    CHECK(cl_model_save(m, p, NULL, 0, NULL, NULL) == CL_E_INVALID &&
              strstr(cl_model_error(m), refused[i].says),
          "%s: save: %s", refused[i].name, cl_model_error(m));
    CHECK(lstat(p, &after) == 0 && after.st_ino == before.st_ino &&
              (after.st_mode & S_IFMT) == (before.st_mode & S_IFMT),
          "%s was replaced", refused[i].name);
    CHECK(temps_left() == 0, "%s: %d temporary files left", refused[i].name, temps_left());
  }
  char byte;
  CHECK(rd >= 0 && read(rd, &byte, 1) <= 0, "bytes were written into the FIFO");
  /* a regular file, a link to one, nothing yet: accepted */
  char e[CL_ERRMSG_LEN] = "";
  CHECK(symlink("t_keep.st", tmp_path("t_keeplink")) == 0, "symlink");
  CHECK(cl_save_target_check(keep, e, sizeof e) == CL_OK, "check: %s", e);
  CHECK(cl_save_target_check(tmp_path("t_keeplink"), e, sizeof e) == CL_OK, "check: %s", e);
  CHECK(cl_save_target_check(tmp_path("t_none.st"), e, sizeof e) == CL_OK, "check: %s", e);
  CHECK(cl_save_target_check("", e, sizeof e) == CL_E_INVALID, "an empty path accepted");
  /* the other file, untouched throughout */
  size_t n2 = 0;
  unsigned char *now = slurp(keep, &n2);
  CHECK(kept && now && n2 == nk && memcmp(kept, now, nk) == 0, "t_keep.st changed");
  free(kept);
  free(now);
  if (rd >= 0) close(rd);
  if (sock >= 0) close(sock);
  const char *names[] = {"t_fifo", "t_sock", "t_dirlink", "t_fifolink", "t_loop1", "t_loop2",
                         "t_keeplink", "t_keep.st"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
  rmdir(tmp_path("t_dir"));
  cl_model_free(m);
}

/* Every file in a folder through the loader: any status, no crash. */
static int feed_folder(const char *folder) {
  DIR *d = opendir(folder);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  char path[1024], err[CL_ERRMSG_LEN];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
    size_t len = 0;
    unsigned char *b = slurp(path, &len);
    if (!b) continue;
    parse_and_create(b, len, err, sizeof err);
    free(b);
    n++;
  }
  closedir(d);
  return n;
}

int main(void) {
  /* The CPU backend picks BLAS or its own GEMM per model by timing them;
   * under load (or valgrind) two models may pick differently and round
   * differently. Exact resumption needs the same kernels, so pin them. */
  setenv("CONVLSTM_GEMM", "internal", 1);
  snprintf(dir, sizeof dir, "/tmp/cl_test_st_XXXXXX");
  if (!mkdtemp(dir)) {
    printf("FAIL cannot create a temporary directory\n");
    return 1;
  }
  for (int i = 0; i < 8; i++) {
    for (size_t j = 0; j < sizeof xs[i] / sizeof(float); j++) xs[i][j] = (float)(2 * uniform01(NULL) - 1);
    for (size_t j = 0; j < sizeof ys[i] / sizeof(float); j++) ys[i][j] = (float)(2 * uniform01(NULL) - 1);
  }
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0.01, 0, 0, 0};
  cl_optim sgd = {CL_OPTIM_SGD, 0.05, 0, 0, 0, 0.9, 0, 0, 0, 0};
  cl_optim plain = {CL_OPTIM_SGD, 0.05, 0, 0, 0, 0, 0, 0, 0, 0};
  test_resume(&adam, 1, "adam");
  test_resume(&sgd, 1, "sgd momentum");
  test_resume(&plain, 0, "sgd, no bias");
  test_metadata_and_info();
  test_optimizer_mismatch();
  test_load_into();
  test_foreign_files();
  test_broken_files();
  test_atomic_write();
  test_save_through_links();
  test_save_refused();
  int corpus = feed_folder("tests/fuzz/corpus");
  int regressions = feed_folder("tests/fuzz/regressions");
  printf("fuzz corpus: %d files, regressions: %d files, loaded without a crash\n", corpus,
         regressions);
  CHECK(cl_models_alive() == 0, "%d models alive at the end", cl_models_alive());
  /* leave nothing behind */
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[600];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    remove(p);
  }
  if (d) closedir(d);
  rmdir(dir);
  return ctest_done("test_core_safetensors");
}
