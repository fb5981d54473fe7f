/*
 * host/x86.h -- whether this build compiles x86 vector code function by
 * function (GCC's or clang's target attribute on an x86 target), and the
 * intrinsics then: CL_CPU_X86 1 or 0. The one place the test is written;
 * every vector kernel file of src/cpu/ and the host's half conversions
 * (host/half.c) ask it. Which instructions run is decided at run time
 * (__builtin_cpu_supports), never here.
 */
#ifndef CONVLSTM_HOST_X86_H
#define CONVLSTM_HOST_X86_H

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CL_CPU_X86 1
#include <immintrin.h> /* AVX2 / AVX-512 intrinsics, usable inside target() functions */
#else
#define CL_CPU_X86 0
#endif

#endif
