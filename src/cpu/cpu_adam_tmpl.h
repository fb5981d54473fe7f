/*
 * cpu/cpu_adam_tmpl.h -- torch's Adam written once in the vocabulary of
 * cpu_simd.h, instantiated by cpu_optim.c for plain float (adam_vec_generic,
 * the element the other code calls) and for AVX-512 and AVX2. Every
 * instantiation runs the same operations in the same order, each rounded
 * once (cpu_optim.c forbids fusing a * b + c), so a vector lane gives the
 * bits a float gives: the update and its guard's dry run agree on every
 * element whichever instruction set each ran.
 *
 * Needs adam_k (cpu_optim.c) and, for VW > 1, adam_span_generic.
 */

/* One vector of elements: g (the raw gradient) by value; p, m, v (and
 * amsgrad's vmax, when not NULL) their values before on entry, after on
 * return. torch's order: L2 decay into g, AdamW's decay of p, the moments,
 * then p += (-lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
TGT static inline void FN(adam_vec)(const adam_k *k, V g, V *p, V *m, V *v, V *vmax) {
  if (k->wd != 0.0f) g = VADD(g, VMUL(VSET1(k->wd), *p));
  if (k->decay != 1.0f) *p = VMUL(*p, VSET1(k->decay));
  *m = VADD(VMUL(*m, VSET1(k->beta1)), VMUL(VSET1(k->one_m_b1), g));
  *v = VADD(VMUL(*v, VSET1(k->beta2)), VMUL(VMUL(VSET1(k->one_m_b2), g), g));
  V den = *v;
  if (vmax) den = *vmax = VMAX(*vmax, *v); /* torch.maximum: a NaN v stays NaN */
  const V denom = VADD(VDIV(VSQRT(den), VSET1(k->bc2_sqrt)), VSET1(k->eps));
  *p = VADD(*p, VDIV(VMUL(VSET1(k->neg_step), *m), denom));
}

/* Elements [lo, hi): with write, the update stored; without, nothing
 * stored and 1 when any element's gradient or new m, v or p is not finite
 * (m, v NULL: zeros, as before a first step). Whole vectors, then the rest
 * one float at a time. */
TGT static int FN(adam_span)(const adam_k *k, float *p, const float *g, float *m, float *v,
                             float *vmax, size_t lo, size_t hi, int write) {
  int bad = 0;
  size_t i = lo;
  for (; i + VW <= hi; i += VW) {
    const V gi = VLOADU(g + i);
    V pi = VLOADU(p + i), mi = m ? VLOADU(m + i) : VZERO(), vi = v ? VLOADU(v + i) : VZERO();
    V xi = vmax ? VLOADU(vmax + i) : VZERO();
    FN(adam_vec)(k, gi, &pi, &mi, &vi, vmax ? &xi : NULL);
    if (!write) {
      bad |= VBAD(gi) | VBAD(mi) | VBAD(vi) | VBAD(pi);
      continue;
    }
    VSTOREU(p + i, pi), VSTOREU(m + i, mi), VSTOREU(v + i, vi);
    if (vmax) VSTOREU(vmax + i, xi);
  }
#if CL_SIMD > 1
  bad |= adam_span_generic(k, p, g, m, v, vmax, i, hi, write);
#endif
  return bad;
}

#include "cpu_simd_end.h"
