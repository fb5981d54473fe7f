/*
 * cpu/cpu_cell_tmpl.h -- the vector rows of the fused cell (cpu_cell.c),
 * forward and backward, written once over a small vector vocabulary and
 * included once per instruction set, as cpu_direct_tmpl.h is for the GEMM.
 *
 * Not a header to include anywhere else: cpu_cell.c includes cpu_simd.h
 * (the vector vocabulary) and defines VSIGMOID(v) and VTANH(v) before each
 * inclusion; it undefines them all at its end, ready for the next
 * instruction set. The expressions and their order are the scalar rows'
 * (forward_scalar, backward_scalar, and with peepholes forward_peep_scalar,
 * backward_peep_scalar), which finish each row's tail.
 */

TGT static void FN(forward)(const cell_row *r) {
  int p = 0;
  for (; p + VW <= r->P; p += VW) {
    V i = VSIGMOID(VLOADU(r->i + p)), f = VSIGMOID(VLOADU(r->f + p));
    V o = VSIGMOID(VLOADU(r->o + p)), g = VTANH(VLOADU(r->g + p));
    V c = VMUL(i, g);
    if (r->cp) c = VADD(VMUL(f, VLOADU(r->cp + p)), c);
    VSTOREU(r->i + p, i), VSTOREU(r->f + p, f);
    VSTOREU(r->o + p, o), VSTOREU(r->g + p, g);
    VSTOREU(r->cn + p, c);
    VSTOREU(r->h + p, VMUL(o, VTANH(c)));
  }
  forward_scalar(r, p);
}

TGT static void FN(backward)(const cell_row *r) {
  const V one = VSET1(1.0f);
  int p = 0;
  for (; p + VW <= r->P; p += VW) {
    V i = VLOADU(r->i + p), f = VLOADU(r->f + p);
    V o = VLOADU(r->o + p), g = VLOADU(r->g + p);
    V tc = VTANH(VLOADU(r->c + p)), dh = VLOADU(r->dh + p);
    V d_o = VMUL(dh, tc);
    V dct = VADD(VLOADU(r->dc + p), VMUL(VMUL(dh, o), VSUB(one, VMUL(tc, tc))));
    V di = VMUL(dct, g), dg = VMUL(dct, i);
    V df = r->cp ? VMUL(dct, VLOADU(r->cp + p)) : VZERO();
    VSTOREU(r->dc + p, VMUL(dct, f));
    VSTOREU(r->i + p, VMUL(VMUL(di, i), VSUB(one, i)));
    VSTOREU(r->f + p, VMUL(VMUL(df, f), VSUB(one, f)));
    VSTOREU(r->o + p, VMUL(VMUL(d_o, o), VSUB(one, o)));
    VSTOREU(r->g + p, VMUL(dg, VSUB(one, VMUL(g, g))));
  }
  backward_scalar(r, p);
}

/* A row's peephole weight at pixels p..p+VW-1: its own per position, the
 * channel's one broadcast per channel. */
#define VPEEP(w, p) (r->ws ? VLOADU((w) + (p)) : VSET1((w)[0]))

TGT static void FN(forward_peep)(const cell_row *r) {
  int p = 0;
  for (; p + VW <= r->P; p += VW) {
    V zi = VLOADU(r->i + p), zf = VLOADU(r->f + p), cp = VZERO();
    if (r->cp) {
      cp = VLOADU(r->cp + p);
      zi = VADD(zi, VMUL(VPEEP(r->wi, p), cp));
      zf = VADD(zf, VMUL(VPEEP(r->wf, p), cp));
    }
    V i = VSIGMOID(zi), f = VSIGMOID(zf), g = VTANH(VLOADU(r->g + p));
    V c = VMUL(i, g);
    if (r->cp) c = VADD(VMUL(f, cp), c);
    V o = VSIGMOID(VADD(VLOADU(r->o + p), VMUL(VPEEP(r->wo, p), c)));
    VSTOREU(r->i + p, i), VSTOREU(r->f + p, f);
    VSTOREU(r->o + p, o), VSTOREU(r->g + p, g);
    VSTOREU(r->cn + p, c);
    VSTOREU(r->h + p, VMUL(o, VTANH(c)));
  }
  forward_peep_scalar(r, p);
}

TGT static void FN(backward_peep)(const cell_row *r) {
  const V one = VSET1(1.0f);
  int p = 0;
  for (; p + VW <= r->P; p += VW) {
    V i = VLOADU(r->i + p), f = VLOADU(r->f + p);
    V o = VLOADU(r->o + p), g = VLOADU(r->g + p);
    V tc = VTANH(VLOADU(r->c + p)), dh = VLOADU(r->dh + p);
    V dzo = VMUL(VMUL(VMUL(dh, tc), o), VSUB(one, o));
    V dct = VADD(VADD(VLOADU(r->dc + p), VMUL(VMUL(dh, o), VSUB(one, VMUL(tc, tc)))),
                 VMUL(dzo, VPEEP(r->wo, p)));
    V di = VMUL(dct, g), dg = VMUL(dct, i);
    V df = r->cp ? VMUL(dct, VLOADU(r->cp + p)) : VZERO();
    V dzi = VMUL(VMUL(di, i), VSUB(one, i)), dzf = VMUL(VMUL(df, f), VSUB(one, f));
    VSTOREU(r->dc + p, VADD(VADD(VMUL(dct, f), VMUL(dzi, VPEEP(r->wi, p))),
                            VMUL(dzf, VPEEP(r->wf, p))));
    VSTOREU(r->i + p, dzi);
    VSTOREU(r->f + p, dzf);
    VSTOREU(r->o + p, dzo);
    VSTOREU(r->g + p, VMUL(dg, VSUB(one, VMUL(g, g))));
  }
  backward_peep_scalar(r, p);
}

#undef VPEEP
#undef VSIGMOID
#undef VTANH
#include "cpu_simd_end.h"
