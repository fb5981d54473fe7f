/*
 * cpu/cpu_cell_tmpl.h -- the rows of the fused cell (cpu_cell.c), forward
 * and backward, with and without peepholes, written once over a small
 * vector vocabulary and included once per instruction set, as
 * cpu_direct_tmpl.h is for the GEMM: CL_SIMD 1 (plain float: the scalar
 * rows, expf/tanhf), then 512 and 256, whose rows finish their tails
 * (P % VW pixels) with the plain ones. Each defines FN(forward),
 * FN(forward_peep), FN(backward) and FN(backward_peep), all
 * (const cell_row *r, int p): the row from pixel p on.
 *
 * PEEP is a constant argument of an always-inlined body, as the CUDA twin's
 * template flag: each of the two versions is compiled on its own, and the
 * one without peepholes holds none of their loads or operations (the code
 * it was before peepholes existed). Both evaluate the same expressions in
 * the same order at every vector width, so every instruction set gives the
 * same floats up to its exp/tanh.
 *
 * Not a header to include anywhere else: cpu_cell.c includes cpu_simd.h
 * (the vector vocabulary) and defines VSIGMOID(v) and VTANH(v) before each
 * inclusion; they and the vocabulary are undefined at the end, ready for
 * the next instruction set.
 */

/* A row's peephole weight at pixels p..p+VW-1: its own per position, the
 * channel's one broadcast per channel. */
#define VPEEP(w, p) (r->ws ? VLOADU((w) + (p)) : VSET1((w)[0]))

/* c = f c_prev + i g, h = o tanh(c); with peepholes i and f see c_prev, o
 * the new c. */
TGT CL_CELL_BODY void FN(forward_body)(const cell_row *r, int p, const int PEEP) {
  for (; p + VW <= r->P; p += VW) {
    V zi = VLOADU(r->i + p), zf = VLOADU(r->f + p), cp = VZERO();
    if (r->cp) cp = VLOADU(r->cp + p);
    if (PEEP && r->cp) {
      zi = VADD(zi, VMUL(VPEEP(r->wi, p), cp));
      zf = VADD(zf, VMUL(VPEEP(r->wf, p), cp));
    }
    V i = VSIGMOID(zi), f = VSIGMOID(zf), g = VTANH(VLOADU(r->g + p));
    V c = VMUL(i, g);
    if (r->cp) c = VADD(VMUL(f, cp), c);
    V zo = VLOADU(r->o + p);
    if (PEEP) zo = VADD(zo, VMUL(VPEEP(r->wo, p), c));
    V o = VSIGMOID(zo);
    VSTOREU(r->i + p, i), VSTOREU(r->f + p, f);
    VSTOREU(r->o + p, o), VSTOREU(r->g + p, g);
    VSTOREU(r->cn + p, c);
    VSTOREU(r->h + p, VMUL(o, VTANH(c)));
  }
#if VW > 1
  cell_fns_generic[FORWARD][PEEP](r, p); /* the tail */
#endif
}

/* backend.h's formulas: activations in, pre-activation gradients out; with
 * peepholes o's gradient reaches c_t through w_co, i's and f's reach
 * c_{t-1} through w_ci and w_cf. */
TGT CL_CELL_BODY void FN(backward_body)(const cell_row *r, int p, const int PEEP) {
  const V one = VSET1(1.0f);
  for (; p + VW <= r->P; p += VW) {
    V i = VLOADU(r->i + p), f = VLOADU(r->f + p);
    V o = VLOADU(r->o + p), g = VLOADU(r->g + p);
    V tc = VTANH(VLOADU(r->c + p)), dh = VLOADU(r->dh + p);
    V dzo = VMUL(VMUL(VMUL(dh, tc), o), VSUB(one, o));
    V dct = VADD(VLOADU(r->dc + p), VMUL(VMUL(dh, o), VSUB(one, VMUL(tc, tc))));
    if (PEEP) dct = VADD(dct, VMUL(dzo, VPEEP(r->wo, p)));
    V di = VMUL(dct, g), dg = VMUL(dct, i);
    V df = r->cp ? VMUL(dct, VLOADU(r->cp + p)) : VZERO();
    V dzi = VMUL(VMUL(di, i), VSUB(one, i)), dzf = VMUL(VMUL(df, f), VSUB(one, f));
    V dcp = VMUL(dct, f);
    if (PEEP) dcp = VADD(VADD(dcp, VMUL(dzi, VPEEP(r->wi, p))), VMUL(dzf, VPEEP(r->wf, p)));
    VSTOREU(r->dc + p, dcp);
    VSTOREU(r->i + p, dzi);
    VSTOREU(r->f + p, dzf);
    VSTOREU(r->o + p, dzo);
    VSTOREU(r->g + p, VMUL(dg, VSUB(one, VMUL(g, g))));
  }
#if VW > 1
  cell_fns_generic[BACKWARD][PEEP](r, p); /* the tail */
#endif
}

TGT static void FN(forward)(const cell_row *r, int p) { FN(forward_body)(r, p, 0); }
TGT static void FN(forward_peep)(const cell_row *r, int p) { FN(forward_body)(r, p, 1); }
TGT static void FN(backward)(const cell_row *r, int p) { FN(backward_body)(r, p, 0); }
TGT static void FN(backward_peep)(const cell_row *r, int p) { FN(backward_body)(r, p, 1); }

/* The four rows of this instruction set, as cpu_cell.c's dispatch reads
 * them: [FORWARD or BACKWARD][peep]. */
static cell_fn const FN(cell_fns)[2][2] = {{FN(forward), FN(forward_peep)},
                                            {FN(backward), FN(backward_peep)}};

#undef VPEEP
#undef VSIGMOID
#undef VTANH
#include "cpu_simd_end.h"
