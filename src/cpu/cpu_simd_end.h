/*
 * cpu/cpu_simd_end.h -- undefines the vocabulary of cpu_simd.h (and
 * CL_SIMD), ready for the next instruction set. Templates include it at
 * their end. No include guard, as cpu_simd.h.
 */
#undef FN
#undef TGT
#undef V
#undef VW
#undef VZERO
#undef VLOADU
#undef VSTOREU
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VSQRT
#undef VMAX
#undef VBAD
#undef VFMA
#undef VI
#undef VSTRIDES
#undef VGATHER
#undef VGATHERN
#undef VLANES
#undef VLOADN
#undef VSTOREN
#undef CL_SIMD
