/*
 * tests/fuzz/make_corpus.c -- writes the fuzzer's seed corpus,
 * tests/fuzz/corpus/: small files the library itself saves (every
 * optimizer kind, with and without bias and metadata), state dicts as
 * PyTorch writes them (no convlstm metadata; F32, F64, BF16), and a few
 * broken files. Run from the repository root by `tests/fuzz/run.sh --seeds`;
 * the corpus is committed, so this only runs when the format changes.
 */
#define _POSIX_C_SOURCE 200809L
#include "convlstm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long rng = 1;
static double uniform01(void *ctx) {
  (void)ctx;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static void put(const char *name, const void *bytes, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "tests/fuzz/corpus/%s", name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static void put_st(const char *name, const char *header, const void *data, size_t dlen) {
  size_t n = strlen(header);
  unsigned char *b = malloc(8 + n + dlen);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((unsigned long long)n >> (8 * i));
  memcpy(b + 8, header, n);
  memcpy(b + 8 + n, data, dlen);
  put(name, b, 8 + n + dlen);
  free(b);
}

static void saved(const char *name, int in, int h0, int h1, int k0, int bias, const cl_optim *o,
                  int steps, int meta) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = in;
  c.n_layers = h1 ? 2 : 1;
  c.hidden_dims[0] = h0;
  c.hidden_dims[1] = h1;
  c.kernel_sizes[0] = k0;
  c.kernel_sizes[1] = 1;
  c.bias = bias;
  c.n_threads = 1;
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  if (cl_model_create(&c, &m, err, sizeof err) != CL_OK) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  cl_model_init_params(m, uniform01, NULL);
  int C = h1 ? h1 : h0;
  float x[1 * 2 * 4 * 3 * 3], y[1 * 4 * 3 * 3];
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {1, 2, in, 3, 3}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {1, C, 3, 3, 0}};
  double loss;
  for (int i = 0; i < steps; i++)
    if (cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, o, NULL, &loss) != CL_OK) {
      fprintf(stderr, "%s\n", cl_model_error(m));
      exit(1);
    }
  const char *keys[] = {"epoch", "note"}, *vals[] = {"3", "seed \"corpus\"\n"};
  char path[256];
  snprintf(path, sizeof path, "tests/fuzz/corpus/%s", name);
  if (cl_model_save(m, path, o, meta ? 2 : 0, keys, vals) != CL_OK) {
    fprintf(stderr, "%s\n", cl_model_error(m));
    exit(1);
  }
  cl_model_free(m);
}

int main(void) {
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0};
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0.9, 1e-4};
  saved("weights.safetensors", 1, 1, 0, 1, 1, NULL, 0, 0);
  saved("weights_nobias.safetensors", 2, 2, 1, 3, 0, NULL, 0, 1);
  saved("adam.safetensors", 1, 2, 1, 1, 1, &adam, 2, 1);
  saved("adam_fresh.safetensors", 1, 1, 0, 1, 1, &adam, 0, 0);
  saved("sgd_momentum.safetensors", 1, 2, 0, 3, 1, &sgd, 1, 0);
  float w[12] = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f, 0.7f, -0.8f, 0.01f, 0.02f, 0.03f, 0.04f};
  put_st("torch_state_dict.safetensors",
         "{\"cell_list.0.conv.weight\":{\"dtype\":\"F32\",\"shape\":[4,2,1,1],\"data_offsets\":[0,32]},"
         "\"cell_list.0.conv.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[32,48]}}",
         w, sizeof w);
  double w64[8] = {0.5, -0.25, 0.5, -0.25, 0.5, -0.25, 0.5, -0.25};
  put_st("torch_f64.safetensors",
         "{\"__metadata__\":{\"format\":\"pt\"},\"cell_list.0.conv.weight\":{\"dtype\":\"F64\","
         "\"shape\":[4,2,1,1],\"data_offsets\":[0,64]}}",
         w64, sizeof w64);
  unsigned short w16[8] = {0x3f00, 0xbe80, 0x3f00, 0xbe80, 0x3f00, 0xbe80, 0x3f00, 0xbe80};
  put_st("torch_bf16.safetensors",
         "{\"cell_list.0.conv.weight\":{\"shape\":[4,2,1,1],\"data_offsets\":[0,16],\"dtype\":"
         "\"BF16\"}}      ",
         w16, sizeof w16);
  put_st("escapes.safetensors",
         "{\"__metadata__\":{\"k\\u00e9\\ud83d\\ude00\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"},"
         "\"cell_list.0.conv.weight\":{\"dtype\":\"F32\",\"shape\":[4,2,1,1],\"data_offsets\":[0,32]}}",
         w, 32);
  put_st("broken_overlap.safetensors",
         "{\"cell_list.0.conv.weight\":{\"dtype\":\"F32\",\"shape\":[4,2,1,1],\"data_offsets\":[0,32]},"
         "\"cell_list.0.conv.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
         w, 48);
  put_st("broken_json.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}",
         w, 4);
  put("broken_short.safetensors", "\x10\0\0\0\0\0\0\0{}", 10);
  printf("corpus written to tests/fuzz/corpus/\n");
  return 0;
}
