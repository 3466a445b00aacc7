// dezero_kernels.h: what every library of fused kernels shares (the cpu backend).
//
// A generated library includes this header, then defines one extern "C" function per
// kernel: a comment naming the group and its nodes, the kernel's shape, and its body,
// the C++ of one element, inside DEZERO_FOR_EACH_ELEMENT (below), which runs the body
// over every element with the loop that fits the arguments it was given.
#pragma once
#include <cmath>
#include <cstdint>
#include <omp.h>
#include <vector>

// glibc's libmvec (2.35 and later, x86-64) has SIMD versions of these math functions,
// declared SIMD-callable only under -ffast-math; declaring them here lets the
// `#pragma omp simd` loops call e.g. _ZGVeN16v_tanhf, 16 floats at a time.
#if defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define DEZERO_SIMD(name)                                                      \
  _Pragma("omp declare simd notinbranch") float name##f(float);                  \
  _Pragma("omp declare simd notinbranch") double name(double);
#define DEZERO_SIMD2(name)                                                     \
  _Pragma("omp declare simd notinbranch") float name##f(float, float);           \
  _Pragma("omp declare simd notinbranch") double name(double, double);
extern "C" {
DEZERO_SIMD(acos) DEZERO_SIMD(acosh) DEZERO_SIMD(asin) DEZERO_SIMD(asinh) DEZERO_SIMD(atan)
DEZERO_SIMD(atanh) DEZERO_SIMD(cbrt) DEZERO_SIMD(cos) DEZERO_SIMD(cosh) DEZERO_SIMD(erf)
DEZERO_SIMD(erfc) DEZERO_SIMD(exp) DEZERO_SIMD(exp10) DEZERO_SIMD(exp2) DEZERO_SIMD(expm1)
DEZERO_SIMD(log) DEZERO_SIMD(log10) DEZERO_SIMD(log1p) DEZERO_SIMD(log2) DEZERO_SIMD(sin)
DEZERO_SIMD(sinh) DEZERO_SIMD(tan) DEZERO_SIMD(tanh)
DEZERO_SIMD2(atan2) DEZERO_SIMD2(hypot) DEZERO_SIMD2(pow)
}
#endif

namespace dezero_kernels {
using namespace std;  // tanh(x) on a float calls the float overload, not the double one
typedef intptr_t npy_intp;

// fmax/fmin as comparisons (the libm calls do not vectorise); a NaN argument
// yields the other one, as C's fmax does.
template <class T> inline T max_num(T a, T b) { return (a > b || b != b) ? a : b; }
template <class T> inline T min_num(T a, T b) { return (a < b || b != b) ? a : b; }
template <class A, class B> inline auto fmax(A a, B b) -> decltype(a + b) {
  return max_num<decltype(a + b)>(a, b); }
template <class A, class B> inline auto fmin(A a, B b) -> decltype(a + b) {
  return min_num<decltype(a + b)>(a, b); }

// The heads of a CPython object, a numpy array and a numpy dtype: numpy's stable
// ABI (PyArrayObject_fields, PyArray_Descr), read without Python's or numpy's
// headers. dezero_layout() lets the Python side check them once per process.
struct Object { intptr_t refcnt; void* type; };
struct Descr { Object head; void* typeobj; char kind, type, byteorder, flags; int type_num; };
struct Array {
  Object head; char* data; int nd; npy_intp* dims; npy_intp* strides; Object* base;
  Descr* descr; int flags;
};
enum { C_CONTIGUOUS = 0x1, ALIGNED = 0x100, WRITEABLE = 0x400 };
static void* ndarray_type = nullptr;  // numpy.ndarray, set by dezero_init
// Python's C API as the entries below use it, its addresses set by dezero_init too.
static void (*incref)(Object*) = nullptr;
static void* (*save_thread)() = nullptr;
static void (*restore_thread)(void*) = nullptr;
static int tuple_items = 0;  // where a tuple's items begin (tuple.__basicsize__)
// 0 in a child process forked after OpenMP ran: GNU OpenMP's threads did not
// survive the fork, and a parallel region there would wait for them forever.
static int threads_ok = 1;

// How an argument meets a kernel: -1 refused (the Python side converts it or
// explains), else its strides in elements broadcast to `shape` (0 on broadcast
// axes) and whether it is C-contiguous of the full shape (1) or one element (2).
static int arg_layout(Object* o, int type_num, npy_intp item, int nd,
                      const npy_intp* shape, npy_intp* st) {
  if (o->type != ndarray_type) return -1;
  const Array* a = (const Array*)o;
  if (a->descr->type_num != type_num || a->descr->byteorder == '>' ||
      !(a->flags & ALIGNED) || a->nd > nd) return -1;
  const int lead = nd - a->nd;
  bool full = true, one = true;
  for (int k = 0; k < nd; ++k) {
    const npy_intp dim = k < lead ? 1 : a->dims[k - lead];
    if (dim != shape[k] && dim != 1) return -1;
    full = full && dim == shape[k];
    one = one && dim == 1;
    st[k] = dim == 1 ? 0 : a->strides[k - lead] / item;
  }
  return one ? 2 : (full && (a->flags & C_CONTIGUOUS)) ? 1 : 0;
}

// Whether a kernel may write `size` elements of type_num into o: a C-contiguous, aligned,
// writeable ndarray of that many that views no other memory and has at most `most`
// references (more: someone besides the replay holds it, and it must keep its values).
static bool writable(const Object* o, int type_num, npy_intp size, npy_intp most) {
  if (o->type != ndarray_type || o->refcnt > most) return false;
  const Array* a = (const Array*)o;
  const int flags = C_CONTIGUOUS | ALIGNED | WRITEABLE;
  if (a->base || a->descr->type_num != type_num || a->descr->byteorder == '>' ||
      (a->flags & flags) != flags) return false;
  npy_intp n = 1;
  for (int d = 0; d < a->nd; ++d) n *= a->dims[d];
  return n == size;
}

// The values of a kernel's symbolic sizes (B, T ...), which a replay passes after the
// outputs: `o` a C-contiguous, aligned array of `count` integers of type_num (numpy's
// intp), else nullptr.
static const npy_intp* size_values(Object* o, int type_num, npy_intp count) {
  if (o->type != ndarray_type) return nullptr;
  const Array* a = (const Array*)o;
  if (a->descr->type_num != type_num || a->descr->byteorder == '>' || a->nd != 1 ||
      a->dims[0] != count || (a->flags & (C_CONTIGUOUS | ALIGNED)) != (C_CONTIGUOUS | ALIGNED))
    return nullptr;
  return (const npy_intp*)a->data;
}

// An argument of a reduction kernel as K rows of R positions: `o` broadcast to `shape`
// (nd dims), its axes taken in `order`, the first `kept` of them the rows, the others
// the positions of a row; each group must collapse to one stride (in elements), else it
// returns false and the Python side lays the argument out (cpu_reductions.reduction_call).
static bool rows_layout(Object* o, int type_num, npy_intp item, int nd, const npy_intp* shape,
                        const int* order, int kept, npy_intp* k_stride, npy_intp* r_stride) {
  npy_intp st[64];  // numpy's most dimensions
  if (nd > 64 || arg_layout(o, type_num, item, nd, shape, st) < 0) return false;
  for (int g = 0; g < 2; ++g) {
    npy_intp stride = 0, span = 0;  // the group's stride; elements of the axes after
    for (int i = g ? nd - 1 : kept - 1; i >= (g ? kept : 0); --i) {
      const int d = order[i];
      if (shape[d] == 1) continue;
      if (span == 0) stride = st[d], span = 1;
      else if (st[d] != stride * span) return false;
      span *= shape[d];
    }
    *(g ? r_stride : k_stride) = stride;
  }
  return true;
}

// A kernel as a builtin function of Python (METH_FASTCALL: its arguments arrive as an
// array, no tuple is built and no ctypes conversion runs). `self` is the tuple (params,
// the method's definition, the codes -3 .. n as Python ints); params, an intp array: the
// threads to run on, whether the GIL may be released meanwhile, the most references an
// output may have. It returns the code of `body` (0: done; k + 1: input k must be
// converted first) or of the checks: -1 another number of arrays, n_in + 1 + j: output j
// is not an array the kernel may write (a new one must be given instead).
typedef int (*Body)(Object* const* a, int threads);
static Object* call_entry(Object* self, Object* const* a, npy_intp n, int n_in, int n_out,
                          const int* types, const npy_intp* sizes, Body body) {
  Object* const* items = (Object* const*)((char*)self + tuple_items);
  const npy_intp* p = (const npy_intp*)((const Array*)items[0])->data;
  int code = n == n_in + n_out ? 0 : -1;
  bool over = false;  // an output written over an input: no thread may take it meanwhile
  for (int j = 0; code == 0 && j < n_out; ++j) {
    if (!writable(a[n_in + j], types[j], sizes[j], p[2])) code = n_in + 1 + j;
    for (int k = 0; k < n_in; ++k) over = over || a[k] == a[n_in + j];
  }
  if (code == 0 && p[1] && !over) {
    void* state = save_thread();
    code = body(a, (int)p[0]);
    restore_thread(state);
  } else if (code == 0) {
    code = body(a, (int)p[0]);
  }
  Object* result = items[code + 5];  // the codes begin at -3
  incref(result);
  return result;
}

// [lo, hi) of n for this OpenMP thread, in blocks of 64 elements.
static inline void thread_range(npy_intp n, npy_intp* lo, npy_intp* hi) {
  const npy_intp parts = omp_get_num_threads(), me = omp_get_thread_num();
  const npy_intp chunk = ((n + parts - 1) / parts + 63) / 64 * 64;
  *lo = me * chunk < n ? me * chunk : n;
  *hi = *lo + chunk < n ? *lo + chunk : n;
}

// The sum of a[0 .. n) in numpy's order (its pairwise summation: eight partial
// sums up to 128 terms, halves beyond), so that a reduction kernel's sum over a
// contiguous last axis is numpy's to the bit.
template <class T> T pairwise_sum(const T* a, npy_intp n) {
  if (n < 8) {
    T s = -0.0;
    for (npy_intp i = 0; i < n; ++i) s += a[i];
    return s;
  }
  if (n <= 128) {
    T r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    npy_intp i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    T s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) s += a[i];
    return s;
  }
  npy_intp half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}
}  // namespace dezero_kernels

extern "C" void dezero_init(dezero_kernels::Object* ndarray, void* incref, void* save,
                            void* restore, int tuple_items) {
  dezero_kernels::ndarray_type = ndarray;
  dezero_kernels::incref = (void (*)(dezero_kernels::Object*))incref;
  dezero_kernels::save_thread = (void* (*)())save;
  dezero_kernels::restore_thread = (void (*)(void*))restore;
  dezero_kernels::tuple_items = tuple_items;
}

extern "C" void dezero_serial() { dezero_kernels::threads_ok = 0; }

// What this library reads from an array: data, ndim, dims[0], type_num, flags, base.
extern "C" void dezero_layout(dezero_kernels::Object* o, intptr_t* out) {
  const dezero_kernels::Array* a = (const dezero_kernels::Array*)o;
  out[0] = (intptr_t)a->data; out[1] = a->nd; out[2] = a->dims[0];
  out[3] = a->strides[0]; out[4] = a->descr->type_num; out[5] = a->flags;
  out[6] = (intptr_t)a->base;
}

// IN(k): input k of the element at hand; OUT(T, j): where output j (of C++ type T) of it
// goes. Each loop of DEZERO_FOR_EACH_ELEMENT defines _load for its way of reading inputs.
#define IN(k) _load(k, _i)
#define OUT(T, j) ((T*)_ptr[_n_in + (j)])[_base + _i]

// DEZERO_FOR_EACH_ELEMENT(T, type_num, nd, n_in, n_out, fast, body...): run `body` for
// every element of a kernel's `_shape` (nd dims), on the kernel's `_threads` OpenMP
// threads (measured per kernel, kernels/measure.py), on the arrays _arg[0 .. n_in + n_out)
// (inputs of C++ type T, numpy type number type_num, then outputs of the full shape);
// _one[k] says that input k has one element, _bool[k] that it is a numpy bool array (a
// mask), read as T's 0 or 1. The function returns k + 1
// when input k must be converted first (its dtype, byte order or alignment), else 0.
// Three loops, the body written into each by the preprocessor:
//   fast     every input C-contiguous of the full shape or of one element (when the
//            kernel's inputs allow it, `fast`): one flat loop, split among threads;
//   rows     rows of the last axis, each contiguous in every input (a bias row, a
//            scalar): a loop that indexes by i, which GCC vectorises;
//   strided  rows of the last axis, every input at its broadcast strides.
#define DEZERO_FOR_EACH_ELEMENT(T, TYPE_NUM, ND, N_IN, N_OUT, FAST, ...)             \
  constexpr int _nd = ND, _last = ND > 0 ? ND - 1 : 0, _n_in = N_IN;               \
  npy_intp _n = 1;                                                                  \
  for (int _d = 0; _d < _nd; ++_d) _n *= _shape[_d];                                \
  const npy_intp _inner = _nd > 0 ? _shape[_nd - 1] : 1;                            \
  char* _ptr[N_IN + N_OUT];                                                         \
  npy_intp _st[N_IN + 1][_last + 1] = {};                                           \
  bool _fast = FAST, _unit = true;                                                  \
  for (int _k = 0; _k < N_IN; ++_k) {                                               \
    const int _kind = arg_layout(_arg[_k], _bool[_k] ? 0 : TYPE_NUM,                 \
                                 _bool[_k] ? 1 : sizeof(T), _nd, _shape, _st[_k]);      \
    if (_kind < 0) return _k + 1;                                                   \
    _fast = _fast && _kind == (_one[_k] ? 2 : 1);                                   \
    _unit = _unit && (_one[_k] ? _kind == 2 : _st[_k][_last] == 1);                 \
  }                                                                                 \
  if (_n == 0) return 0;                                                            \
  for (int _k = 0; _k < N_IN + N_OUT; ++_k) _ptr[_k] = ((Array*)_arg[_k])->data;   \
  T _val[N_IN + 1];                                                                 \
  for (int _k = 0; _k < N_IN; ++_k) _val[_k] = _bool[_k] ? (T)*(const bool*)_ptr[_k] \
                                                         : *(const T*)_ptr[_k];      \
  /* One thread: no OpenMP region at all. Entering one costs about a microsecond */ \
  /* even when its if clause keeps it to one thread (once per segment of a       */ \
  /* horizontal kernel), more than a small kernel's work.                        */ \
  const bool _serial = _threads <= 1 || !threads_ok;                               \
  if (_fast) {                                                                      \
    const npy_intp _base = 0;                                                       \
    auto _load = [&](int k, npy_intp i) -> T {                                      \
      return _one[k] ? _val[k] : _bool[k] ? (T)((const bool*)_ptr[k])[i]            \
                                          : ((const T*)_ptr[k])[i]; };               \
    auto _range = [&](npy_intp _lo, npy_intp _hi) {                                 \
      _Pragma("omp simd")                                                           \
      for (npy_intp _i = _lo; _i < _hi; ++_i) { __VA_ARGS__ }                       \
    };                                                                              \
    if (_serial) { /* a call of its own, as the OpenMP region's body: inlined */    \
      /* here, where the arrays it reads escape into that region, GCC left the   */ \
      /* loop scalar (exp called on one element at a time: 10x slower) */            \
      [&]() __attribute__((noinline)) { _range(0, _n); }();                         \
      return 0;                                                                     \
    }                                                                               \
    _Pragma("omp parallel num_threads(_threads)")                                   \
    {                                                                               \
      npy_intp _lo, _hi;                                                            \
      thread_range(_n, &_lo, &_hi);                                                 \
      _range(_lo, _hi);                                                             \
    }                                                                               \
    return 0;                                                                       \
  }                                                                                 \
  auto _row_of = [&](npy_intp _row) {                                               \
    npy_intp _off[N_IN + 1] = {};                                                   \
    for (int _k = 0; _k < N_IN; ++_k)                                               \
      for (npy_intp _d = _nd - 2, _rest = _row; _d >= 0; _rest /= _shape[_d], --_d) \
        _off[_k] += (_rest % _shape[_d]) * _st[_k][_d];                             \
    const npy_intp _base = _row * _inner;                                           \
    if (_unit) {                                                                    \
      auto _load = [&](int k, npy_intp i) -> T {                                    \
        return _one[k] ? _val[k] : _bool[k] ? (T)((const bool*)_ptr[k] + _off[k])[i] \
                                            : ((const T*)_ptr[k] + _off[k])[i]; };    \
      _Pragma("omp simd")                                                           \
      for (npy_intp _i = 0; _i < _inner; ++_i) { __VA_ARGS__ }                      \
      return;                                                                       \
    }                                                                               \
    auto _load = [&](int k, npy_intp i) -> T {                                      \
      return _bool[k] ? (T)((const bool*)_ptr[k] + _off[k])[i * _st[k][_last]]      \
                      : ((const T*)_ptr[k] + _off[k])[i * _st[k][_last]]; };         \
    _Pragma("omp simd")                                                             \
    for (npy_intp _i = 0; _i < _inner; ++_i) { __VA_ARGS__ }                        \
  };                                                                                \
  if (_serial || _n <= _inner) {                                                    \
    for (npy_intp _row = 0; _row < _n / _inner; ++_row) _row_of(_row);              \
    return 0;                                                                       \
  }                                                                                 \
  _Pragma("omp parallel for num_threads(_threads)")                                 \
  for (npy_intp _row = 0; _row < _n / _inner; ++_row) _row_of(_row);               \
  return 0;
