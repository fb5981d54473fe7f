/*
 * cpu/cpu_adam_tmpl.h -- torch's Adam written once in the vocabulary of
 * cpu_simd.h, instantiated by cpu_optim.c for plain float (adam_vec_generic,
 * the element the other code calls; l2_decayed_generic, SGD's and
 * RMSprop's too) and for AVX-512 and AVX2. Every
 * instantiation runs the same operations in the same order, each rounded
 * once (cpu_optim.c forbids fusing a * b + c), so a vector lane gives the
 * bits a float gives: the update and its guard's dry run agree on every
 * element whichever instruction set each ran.
 *
 * Needs adam_k (cpu_optim.c) and, for VW > 1, adam_run_generic.
 */

/* torch's L2 weight decay (Adam, SGD, RMSprop): wd * p added to the
 * gradient; wd 0 leaves it exactly as it was. SGD and RMSprop take the
 * float one (l2_decayed_generic). */
TGT static inline V FN(l2_decayed)(V g, float wd, V p) {
  return wd != 0.0f ? VADD(g, VMUL(VSET1(wd), p)) : g;
}

/* One vector of elements: g (the raw gradient) by value; p, m, v (and
 * amsgrad's vmax, when not NULL) their values before on entry, after on
 * return. torch's order: L2 decay into g, AdamW's decay of p, the moments,
 * then p += (-lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
TGT static inline void FN(adam_vec)(const adam_k *k, V g, V *p, V *m, V *v, V *vmax) {
  g = FN(l2_decayed)(g, k->wd, *p);
  if (k->decay != 1.0f) *p = VMUL(*p, VSET1(k->decay));
  *m = VADD(VMUL(*m, VSET1(k->beta1)), VMUL(VSET1(k->one_m_b1), g));
  *v = VADD(VMUL(*v, VSET1(k->beta2)), VMUL(VMUL(VSET1(k->one_m_b2), g), g));
  V den = *v;
  if (vmax) den = *vmax = VMAX(*vmax, *v); /* torch.maximum: a NaN v stays NaN */
  const V denom = VADD(VDIV(VSQRT(den), VSET1(k->bc2_sqrt)), VSET1(k->eps));
  *p = VADD(*p, VDIV(VMUL(VSET1(k->neg_step), *m), denom));
}

/* Elements [lo, hi) from p, g, m, v, vmax (m, v NULL: zeros, as before a
 * first step; vmax NULL: no amsgrad), whole vectors, then the rest one float
 * at a time: the new values stored to po, mo, vo (and xo) when po is not
 * NULL; else nothing stored and 1 when any element's gradient or new m, v or
 * p is not finite. Inlined into adam_span and adam_flags with each array's
 * presence fixed, so that the loop tests no pointer. */
TGT static inline __attribute__((always_inline)) int
FN(adam_run)(const adam_k *k, const float *p, const float *g, const float *m, const float *v,
             const float *vmax, float *po, float *mo, float *vo, float *xo, size_t lo,
             size_t hi) {
  int bad = 0;
  size_t i = lo;
  for (; i + VW <= hi; i += VW) {
    const V gi = VLOADU(g + i);
    V pi = VLOADU(p + i), mi = m ? VLOADU(m + i) : VZERO(), vi = v ? VLOADU(v + i) : VZERO();
    V xi = vmax ? VLOADU(vmax + i) : VZERO();
    FN(adam_vec)(k, gi, &pi, &mi, &vi, vmax ? &xi : NULL);
    if (!po) {
      bad |= VBAD(gi) | VBAD(mi) | VBAD(vi) | VBAD(pi);
      continue;
    }
    VSTOREU(po + i, pi), VSTOREU(mo + i, mi), VSTOREU(vo + i, vi);
    if (xo) VSTOREU(xo + i, xi);
  }
#if CL_SIMD > 1
  bad |= adam_run_generic(k, p, g, m, v, vmax, po, mo, vo, xo, i, hi);
#endif
  return bad;
}

/* The update of [lo, hi) stored in place (amsgrad when vmax is not NULL). */
TGT static void FN(adam_span)(const adam_k *k, float *p, const float *g, float *m, float *v,
                              float *vmax, size_t lo, size_t hi) {
  if (vmax)
    FN(adam_run)(k, p, g, m, v, vmax, p, m, v, vmax, lo, hi);
  else
    FN(adam_run)(k, p, g, m, v, NULL, p, m, v, NULL, lo, hi);
}

/* The guard's dry run of [lo, hi): nothing stored, 1 when the update would
 * meet or make a value that is not finite. */
TGT static int FN(adam_flags)(const adam_k *k, const float *p, const float *g, const float *m,
                              const float *v, const float *vmax, size_t lo, size_t hi) {
  if (m && v)
    return vmax ? FN(adam_run)(k, p, g, m, v, vmax, NULL, NULL, NULL, NULL, lo, hi)
                : FN(adam_run)(k, p, g, m, v, NULL, NULL, NULL, NULL, NULL, lo, hi);
  return FN(adam_run)(k, p, g, NULL, NULL, vmax, NULL, NULL, NULL, NULL, lo, hi);
}

#include "cpu_simd_end.h"
