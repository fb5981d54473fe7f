/*
 * r_unif.c -- dropout masks drawn from R's generator in bulk. A mask
 * element is kept (keep) when its uniform draw is at least p, else 0, and
 * the draws must be exactly those of unif_rand() in order, so that
 * set.seed() gives the masks it gave before and R's stream goes on where
 * unif_rand() would have left it.
 *
 * unif_rand() costs ~6 ns a draw (a switch over the kinds, R's state in a
 * global array, a call per number); per-gate masks draw 4 times as many
 * numbers. When the generator is R's default Mersenne-Twister, r_unif runs
 * the same recurrence (R's RNG.c: MT_genrand, its 4357 seeding of a fresh
 * state, unif_rand's fixup away from 0 and 1) on a copy of .Random.seed,
 * compares the words with p as integers (mt_cut: the same decisions as the
 * doubles) and stores the copy back at the end; any other kind (or a user-supplied
 * one) is drawn through unif_rand() itself. test-dropout.R compares both
 * with runif().
 *
 * Use: r_unif_begin (for GetRNGstate), r_unif_mask per mask, r_unif_end (for
 * PutRNGstate).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "r_convlstm.h"

#define MT_N 624
#define MT_M 397
#define MT_KIND 3            /* MERSENNE_TWISTER in R's RNGkind codes */
#define I2_32M1 2.328306437080797e-10 /* 1 / (2^32 - 1), R's fixup margin */

static void mt_seed(uint32_t *mt, uint32_t seed) { /* R's MT_sgenrand */
  for (int i = 0; i < MT_N; i++) {
    mt[i] = seed & 0xffff0000u;
    seed = 69069 * seed + 1;
    mt[i] |= (seed & 0xffff0000u) >> 16;
    seed = 69069 * seed + 1;
  }
}

static void mt_next_block(uint32_t *mt) { /* MT_genrand's refill of all N words */
  static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
  int kk;
  uint32_t y;
  for (kk = 0; kk < MT_N - MT_M; kk++) {
    y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
    mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1u];
  }
  for (; kk < MT_N - 1; kk++) {
    y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
    mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1u];
  }
  y = (mt[MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
  mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1u];
}

static inline uint32_t mt_temper(uint32_t y) { /* MT_genrand's output of a word */
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

/* unif_rand() >= p without the double: unif_rand() returns y 2^-32 (R's
 * 2.3283064365386963e-10 is 2^-32 exactly, and y < 2^32 is exact in a
 * double), which is below 1, so fixup only moves y = 0 up to 2^-33 / (1 -
 * 2^-32). For y > 0, y 2^-32 >= p holds iff y >= p 2^32 (exact: a power of
 * two) iff y >= ceil(p 2^32). */
typedef struct mt_cut {
  uint64_t t; /* ceil(p 2^32), up to 2^32 */
  int zero;   /* whether y = 0 is kept */
} mt_cut;

static mt_cut mt_cut_of(double p) {
  mt_cut c = {(uint64_t)ceil(p * 4294967296.0), 0.5 * I2_32M1 >= p};
  return c;
}

static inline int mt_kept(uint32_t y, mt_cut c) { return y ? (uint64_t)y >= c.t : c.zero; }

void r_unif_begin(r_unif *u) {
  GetRNGstate();
  PutRNGstate(); /* .Random.seed now holds the state, created if it was missing */
  u->seed = R_NilValue;
  SEXP s = Rf_findVarInFrame(R_GlobalEnv, Rf_install(".Random.seed"));
  if (TYPEOF(s) != INTSXP || XLENGTH(s) != MT_N + 2 || INTEGER(s)[0] % 100 != MT_KIND) return;
  u->seed = PROTECT(Rf_duplicate(s)); /* the caller's r_unif_end unprotects it */
  u->mti = (uint32_t)INTEGER(u->seed)[1];
  u->mt = (uint32_t *)INTEGER(u->seed) + 2;
}

void r_unif_mask(r_unif *u, float *dst, size_t n, double p, float keep) {
  if (u->seed == R_NilValue) {
    for (size_t i = 0; i < n; i++) dst[i] = unif_rand() >= p ? keep : 0.0f;
    return;
  }
  const mt_cut c = mt_cut_of(p); /* p in (0, 1): the rates' range */
  const float value[2] = {0.0f, keep};
  for (size_t i = 0; i < n;) {
    if (u->mti >= MT_N) {
      if (u->mti == MT_N + 1) mt_seed(u->mt, 4357);
      mt_next_block(u->mt);
      u->mti = 0;
    }
    size_t k = MT_N - u->mti < n - i ? MT_N - u->mti : n - i;
    const uint32_t *w = u->mt + u->mti;
    for (size_t j = 0; j < k; j++) dst[i + j] = value[mt_kept(mt_temper(w[j]), c)];
    u->mti += (uint32_t)k, i += k;
  }
}

void r_unif_end(r_unif *u) {
  if (u->seed == R_NilValue) {
    PutRNGstate();
    return;
  }
  INTEGER(u->seed)[1] = (int)u->mti;
  Rf_defineVar(Rf_install(".Random.seed"), u->seed, R_GlobalEnv);
  UNPROTECT(1);
  GetRNGstate(); /* R's own copy of the state follows */
  PutRNGstate();
}
