/*
 * core/dropout_rng.h -- the numbers dropout's masks are drawn from, one
 * definition for the core (the host copy cl_model_dropout_mask gives) and
 * both backends' mask_draw (backend.h), so that one seed gives the same
 * masks bit for bit on every backend.
 *
 * Counter-based: element e of a stream is a pure function of the stream's
 * key and e (splitmix64's output for counter e), so a mask can be drawn
 * straight into the planned buffer, by any number of threads, micro-batch by
 * micro-batch, with nothing kept between calls. A training call's seed
 * (from R's generator, r_dropout.c) gives each layer and kind its own key;
 * within a stream, element e of the mask [B, G, C, H, W] of the call's
 * whole batch is e (row-major), so a sequence's masks do not depend on how
 * the batch is split into micro-batches.
 *
 * An element is kept, as 1 / (1 - p), when the word's top 32 bits are at
 * least cut = ceil(p 2^32): a uniform word in [0, 2^32) is kept with
 * probability 1 - cut 2^-32, within 2^-32 of 1 - p.
 */
#ifndef CL_DROPOUT_RNG_H
#define CL_DROPOUT_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CL_RNG_FN static __host__ __device__ inline
#else
#define CL_RNG_FN static inline
#endif

#define CL_RNG_GAMMA 0x9e3779b97f4a7c15ull /* splitmix64's increment */

/* splitmix64's finaliser: a bijection of 64-bit words that mixes every bit. */
CL_RNG_FN uint64_t cl_rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of layer l's input (kind 0) or h (kind 1) masks under a call's seed. */
CL_RNG_FN uint64_t cl_rng_key(uint64_t seed, int layer, int kind) {
  return cl_rng_mix(seed ^ cl_rng_mix((uint64_t)(2 * layer + kind + 1) * CL_RNG_GAMMA));
}

/* Element e of the stream `key`: a mask value, keep or 0. */
CL_RNG_FN float cl_rng_mask_value(uint64_t key, uint64_t e, uint64_t cut, float keep) {
  uint64_t word = cl_rng_mix(key + (e + 1) * CL_RNG_GAMMA) >> 32;
  return word >= cut ? keep : 0.0f;
}

/* cut for a rate p in [0, 1): ceil(p 2^32) (exact: p 2^32 is a double). */
static inline uint64_t cl_rng_cut(double p) { return (uint64_t)ceil(p * 4294967296.0); }

#endif
