/*
 * core/lifetimes.h -- the step buffers a program's ops use (program.h),
 * when, and where each layer's value of a kind may sit: read by the
 * planner (plan.c: lifetimes and shared places) and the executor's poison
 * check (execute.c).
 */
#ifndef CONVLSTM_CORE_LIFETIMES_H
#define CONVLSTM_CORE_LIFETIMES_H

#include "program.h" /* cl_op, cl_program */

/* How an op uses a view (cl_op_uses). A definition begins a new value:
 * what the view held before is dead from there. */
enum {
  CL_USE_READ = 0,   /* reads it, or adds to what it holds */
  CL_USE_DEF,        /* writes it whole before reading it */
  CL_USE_DEF_AFTER,  /* writes it whole once the op's other uses are done */
  CL_USE_DEF_STREAM  /* writes it step by step from the last, each step s once
                        the op has read steps s, s + 1, ... of the layer
                        above's view of the same kind (a layer's input-half
                        gradient, computed in recomputed chunks) */
};
/* The step buffers an op reads or writes, as (kind, layer) views (layer
 * -1: a buffer of the whole step), each once or more, through use(ctx,
 * kind, layer, how): the ones the program makes and consumes itself. Not
 * listed: the convolution workspace (every convolution's scratch), the
 * dropout masks and seed and a given initial state (uploaded before a
 * micro-batch's program runs), which live the whole step. */
typedef void (*cl_use_fn)(void *ctx, int kind, int layer, int how);
void cl_op_uses(const cl_op *o, const cl_arch *a, const cl_schedule *g, int n_layers,
                cl_use_fn use, void *ctx);
/* First and last op of a program that uses each view (-1: none), per kind
 * and layer + 1 (index 0: layer -1). */
typedef struct cl_lifetimes {
  int first[CL_BUF_NKIND][CL_MAX_LAYERS + 1], last[CL_BUF_NKIND][CL_MAX_LAYERS + 1];
} cl_lifetimes;
void cl_program_lifetimes(const cl_program *p, const cl_arch *a, const cl_schedule *g,
                          int n_layers, cl_lifetimes *out);
/* Where each layer's view of a kind sits in one region shared by them all,
 * derived from the program's live ranges (from a definition to the last
 * use before the next): at[l], in units of size[l] (the view's size in
 * them), is the lowest offset clear of every view whose range overlaps one
 * of layer l's, and, where l's value is streamed over the layer above's
 * (CL_USE_DEF_STREAM), clear of that one's steps still to be read. Layers
 * never live at once share offset 0. Returns the region's extent, max
 * at[l] + size[l]; -1 when the ranges could not be listed (out of memory). */
int cl_program_place(const cl_program *p, const cl_arch *a, const cl_schedule *g, int n_layers,
                     int kind, const int *size, int *at);
/* plan.c: the first and last op of t that use plan row e: its view's,
 * or for a row that serves every layer (layer -1) the union of theirs
 * (-1: none, or not a step buffer). */
void cl_plan_row_lifetime(const cl_plan_entry *e, const cl_lifetimes *t, int n_layers,
                          int *first, int *last);
#endif
