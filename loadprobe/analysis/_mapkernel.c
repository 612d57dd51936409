/* The map step's integer aggregation of one file's spans, in C.
 *
 * loadprobe/analysis/ckernel.py loads this library with ctypes and documents what it computes;
 * the numpy kernel, loadprobe/analysis/kernel_numpy.py, is the reference it must match exactly
 * (tests/analysis/test_analyze_fast.py). Nothing here allocates: the caller passes every array.
 * A plain shared library, not a Python module (it needs no Python headers): setup.py builds it
 * as an optional extension only so that pip compiles, names and installs it; ckernel.py finds
 * it by that name and calls it through ctypes, which releases the GIL during each call. Without
 * a C compiler the build skips it and loadprobe uses numpy.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;
typedef uint8_t u8;

/* HdrHistogram layout (loadprobe/analysis/histogram.py); ckernel.py checks these against it. */
#define HIGHEST_TRACKABLE ((i64)1 << 42)
#define HALF_MAGNITUDE 10
#define HALF_COUNT 1024
#define SUB_MASK 2047
#define COUNTS_LEN 34816
#define MAX_DEPTH 64 /* parent links followed from a span up to its root (kernel_numpy.MAX_DEPTH) */
#define NS 1000000000LL
#define ROOT (-2) /* parent_row of a root span (parent id 0); -1: a parent not in the file */

/* Per-stage sums and histogram statistics: the column order ckernel.py names. */
enum { S_COUNT, S_SELF, S_IN_REQUEST, S_SELF_IN_REQUEST, S_OFFSET, S_OFFSET_N, S_WIDTH };
enum { H_TOTAL, H_SUM_HI, H_SUM_LO, H_MIN, H_MAX, H_CLAMPED, H_WIDTH };

typedef struct {
    i64 *const *counts; /* per row, that histogram's counts array (COUNTS_LEN): the caller's own */
    i64 *stats;         /* (rows, H_WIDTH) */
} histogram;

typedef struct {
    i64 n;
    const i64 *ts, *dur;
    const u8 *valid;
    const i64 *span_id, *parent; /* parent 0: a root span */
    const u8 *has_req;           /* NULL: every span has a request id iff req_const */
    i64 req_const;
    const i32 *stage, *status, *shape, *engine; /* dictionary codes, -1 for null */
    i64 n_stage, n_status, n_shape, n_engine;
    /* Optional columns (NULL: absent), each with its Arrow validity bitmap from bit *_bit0
     * (NULL: every row has a value); values under a clear bit are arbitrary. */
    const i64 *queue, *tokens_in, *tokens_out, *batch;
    const double *flops, *bytes;
    const u8 *queue_bits, *tokens_in_bits, *tokens_out_bits, *batch_bits, *flops_bits, *bytes_bits;
    i64 queue_bit0, tokens_in_bit0, tokens_out_bit0, batch_bit0, flops_bit0, bytes_bit0;
    i64 sec_lo, n_sec;
    i64 win_start, win_stop; /* INT64_MIN: no run window / no stop */
    i64 id_lo, id_size;      /* the dense join's id table; id_size 0: parent_row is given */
} map_input;

typedef struct {
    i32 *parent_row; /* (n) given, or filled by the dense join: row of the parent in the file, ROOT, or -1 */
    i32 *id_table;   /* (id_size) scratch, any contents */
    i64 *child_sum;  /* (n) scratch */
    i64 *sums;       /* (n_stage, S_WIDTH) */
    i64 *statuses, *shapes, *engines;   /* (n_stage, n_status | n_shape | n_engine) */
    i64 *busy, *busy_n;                 /* (n_stage, n_sec) */
    i64 *request_sums;                  /* count, Σdur, Σself, Σqueue of their spans */
    i64 *request_statuses;              /* (n_status) */
    i64 *arrivals, *root_arrivals;      /* (n_sec) */
    i64 *edges;                         /* first ns, last ns, outside the window, unjoined, requests */
    i64 *request_ts;                    /* (n) start of each request, in row order */
    i32 *batch_rows, *flops_rows, *bytes_rows;       /* (n) rows grouped by stage */
    i64 *batch_bounds, *flops_bounds, *bytes_bounds; /* (n_stage + 1) */
    i32 *sort_buffer;                                /* (n) scratch */
    i64 *batch_values, *batch_durs, *flops_durs, *bytes_durs; /* (n) per grouped row: its value, duration */
    double *flops_values, *bytes_values;
    /* Float sums per stage, rounded exactly as numpy's sums round (numpy_sum): */
    double *fit;                   /* (n_stage, 5) Σb, Σb², Σl, Σbl, Σl² over batch rows, l = duration in ms */
    double *flops_sum, *bytes_sum; /* (n_stage) */
    i64 *flops_dur, *bytes_dur;    /* (n_stage) Σ duration of the rows with FLOPs, bytes */
    double *float_scratch;         /* (3n; read only when rows carry batch sizes) */
    histogram latency, queue, tokens_in, tokens_out, request;
} map_output;

static inline i64 floor_div(i64 a, i64 b) {
    i64 q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline i64 bucket_index(i64 v) {
    i64 c = v < HIGHEST_TRACKABLE ? v : HIGHEST_TRACKABLE;
    int exponent = 63 - __builtin_clzll((unsigned long long)(c | SUB_MASK));
    int bucket = exponent - HALF_MAGNITUDE;
    return ((i64)(bucket + 1) << HALF_MAGNITUDE) + ((c >> bucket) - HALF_COUNT);
}

/* A histogram's statistics, accumulated in registers while rows of one stage follow each other. */
typedef struct { i64 total, sum_hi, sum_lo, min, max, clamped; } tally;
#define EMPTY_TALLY ((tally){0, 0, 0, INT64_MAX, INT64_MIN, 0})

static inline void tally_add(tally *t, i64 *restrict counts, i64 v) {
    counts[bucket_index(v)] += 1;
    t->total += 1;
    t->sum_hi += v >> 32;
    t->sum_lo += v & 0xFFFFFFFFLL;
    if (v < t->min) t->min = v;
    if (v > t->max) t->max = v;
    if (v > HIGHEST_TRACKABLE) t->clamped += 1;
}

static inline void tally_flush(tally *t, i64 *restrict stats) {
    stats[H_TOTAL] += t->total;
    stats[H_SUM_HI] += t->sum_hi;
    stats[H_SUM_LO] += t->sum_lo;
    if (t->min < stats[H_MIN]) stats[H_MIN] = t->min;
    if (t->max > stats[H_MAX]) stats[H_MAX] = t->max;
    stats[H_CLAMPED] += t->clamped;
    *t = EMPTY_TALLY;
}

/* A run of one stage's rows: its sums (the columns of S_COUNT...) and the statistics of its
 * latencies, kept in registers until the stage changes. */
typedef struct {
    i64 count, self, in_request, self_in_request, offset, offset_n;
    tally latency;
} run_sums;

#define EMPTY_RUN ((run_sums){0, 0, 0, 0, 0, 0, EMPTY_TALLY})

/* Adds one run of stage k's rows to that stage's sums and statistics, and restarts it. */
static inline void flush_run(run_sums *r, i64 k, i64 *restrict sums, const map_output *out) {
    sums += k * S_WIDTH;
    sums[S_COUNT] += r->count;
    sums[S_SELF] += r->self;
    sums[S_IN_REQUEST] += r->in_request;
    sums[S_SELF_IN_REQUEST] += r->self_in_request;
    sums[S_OFFSET] += r->offset;
    sums[S_OFFSET_N] += r->offset_n;
    tally_flush(&r->latency, out->latency.stats + k * H_WIDTH);
    *r = EMPTY_RUN;
}

/* Row of each valid child's parent through a dense id table (first row wins among equal ids,
 * as with a stable sort), ROOT for a root, else -1; adds each child's duration to its parent's child_sum (zero
 * on entry). Returns how many children's parent is not in the file.
 *
 * The table is never cleared: a slot another file left behind holds a row whose span id is not
 * the one looked up (every id of this file was written first), so each hit is checked. */
static i64 join_dense(const map_input *in, map_output *out) {
    const i64 n = in->n, lo = in->id_lo, size = in->id_size;
    const i64 *restrict span_id = in->span_id, *restrict parent = in->parent, *restrict dur = in->dur;
    const u8 *restrict valid = in->valid;
    i32 *restrict table = out->id_table;
    i32 *restrict parent_row = out->parent_row;
    i64 *restrict child_sum = out->child_sum;
    i64 unjoined = 0;
    for (i64 i = n - 1; i >= 0; i--) table[span_id[i] - lo] = (i32)i;
    for (i64 i = 0; i < n; i++) {
        i64 p = parent[i], row = p == 0 ? ROOT : -1;
        if (p != 0 && valid[i]) {
            i64 k = p - lo;
            if (k >= 0 && k < size) {
                row = table[k];
                if (row < 0 || row >= n || span_id[row] != p) row = -1;
            }
            if (row < 0) {
                unjoined++;
            } else {
                child_sum[row] += dur[i];
            }
        }
        parent_row[i] = (i32)row;
    }
    return unjoined;
}

/* Sorts `rows` (in row order) by their stage, stably: `bounds[k + 1]` holds stage k's count
 * on entry and becomes where stage k's rows end; `buffer` has room for `m` rows. */
static void group_by_stage(i32 *restrict rows, i64 m, i64 *restrict bounds, const i32 *restrict stage,
                           i64 n_stage, i32 *restrict buffer) {
    for (i64 k = 0; k < n_stage; k++) bounds[k + 1] += bounds[k];
    for (i64 j = 0; j < m; j++) buffer[bounds[stage[rows[j]]]++] = rows[j]; /* bounds[k] moves to bounds[k + 1] */
    for (i64 k = n_stage; k > 0; k--) bounds[k] = bounds[k - 1];
    bounds[0] = 0;
    memcpy(rows, buffer, (size_t)m * sizeof(i32));
}

/* numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): 8 accumulators over
 * blocks of up to 128 values, halves beyond. The float sums of a partial must come out the
 * same whichever path mapped the file, so this adds in numpy's order; compiled without
 * contracting a*b+c into one rounding (setup.py: -ffp-contract=off). */
static double pairwise_sum(const double *a, i64 n) {
    if (n < 8) {
        double sum = 0.;
        for (i64 i = 0; i < n; i++) sum += a[i];
        return sum;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        i64 i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) sum += a[i];
        return sum;
    }
    i64 half = n / 2;
    half -= half % 8;
    return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

/* What `array.sum()` returns for a contiguous float64 array: the reduction starts from 0. */
static double numpy_sum(const double *a, i64 n) { return 0. + pairwise_sum(a, n); }

/* out[i] = a[i] * b[i], then its numpy sum: `(a * b).sum()`. */
static double product_sum(const double *a, const double *b, i64 n, double *out) {
    for (i64 i = 0; i < n; i++) out[i] = a[i] * b[i];
    return numpy_sum(out, n);
}

/* Per stage with rows in [bounds[k], bounds[k + 1]): the batch fit's sums, then the FLOPs' and
 * bytes' sums and their durations, as kernel_numpy.batch_and_float_sums computes them. */
static void float_sums(const map_output *out, i64 n_stage, i64 n) {
    double *bf = out->float_scratch, *lf = bf + n, *tmp = lf + n;
    for (i64 k = 0; k < n_stage; k++) {
        const i64 lo = out->batch_bounds[k], m = out->batch_bounds[k + 1] - lo;
        double *fit = out->fit + 5 * k;
        if (m > 0) {
            for (i64 j = 0; j < m; j++) {
                bf[j] = (double)out->batch_values[lo + j];
                lf[j] = (double)out->batch_durs[lo + j] / 1e6;
            }
            fit[0] = numpy_sum(bf, m);
            fit[1] = product_sum(bf, bf, m, tmp);
            fit[2] = numpy_sum(lf, m);
            fit[3] = product_sum(bf, lf, m, tmp);
            fit[4] = product_sum(lf, lf, m, tmp);
        }
        const i64 *bounds[2] = {out->flops_bounds, out->bytes_bounds};
        const double *values[2] = {out->flops_values, out->bytes_values};
        const i64 *durs[2] = {out->flops_durs, out->bytes_durs};
        double *sums[2] = {out->flops_sum, out->bytes_sum};
        i64 *dur_sums[2] = {out->flops_dur, out->bytes_dur};
        for (int key = 0; key < 2; key++) {
            const i64 start = bounds[key][k], stop = bounds[key][k + 1];
            if (stop == start) continue;
            sums[key][k] = numpy_sum(values[key] + start, stop - start);
            uint64_t total = 0; /* wraps as numpy's int64 sum does */
            for (i64 j = start; j < stop; j++) total += (uint64_t)durs[key][j];
            dur_sums[key][k] = (i64)total;
        }
    }
}

/* Whether bit `offset + i` of an Arrow validity bitmap is set (NULL: no bitmap, all valid). */
static inline int is_set(const u8 *bits, i64 offset, i64 i) {
    return bits == NULL || ((bits[(offset + i) >> 3] >> ((offset + i) & 7)) & 1);
}

/* How many rows from row i on a validity bitmap (from bit bit0) proves null, in whole bytes; 0
 * when it cannot tell. The optional columns are mostly null, in long runs (rows come grouped by
 * stage), so their passes below skip them 64 or 8 at a time. */
static inline i64 null_run(const u8 *restrict bits, i64 bit0, i64 i, i64 n) {
    if (bits == NULL || ((bit0 + i) & 7) != 0) return 0;
    const u8 *restrict b = bits + ((bit0 + i) >> 3);
    i64 skip = 0;
    while (i + skip + 64 <= n) {
        uint64_t word;
        memcpy(&word, b + (skip >> 3), 8);
        if (word) break;
        skip += 64;
    }
    while (i + skip + 8 <= n && b[skip >> 3] == 0) skip += 8;
    return skip;
}

/* The rows, in row order, of valid spans with a stage and a value in an optional column
 * (`ints`: values >= 0; else `floats`: not NaN), counted per stage into bounds[stage + 1];
 * returns how many. */
static i64 collect(const i64 *restrict ints, const double *restrict floats, const u8 *restrict bits, i64 bit0,
                   const u8 *restrict valid, const i32 *restrict stage, i64 n, i32 *restrict rows,
                   i64 *restrict bounds) {
    i64 m = 0;
    for (i64 i = 0; i < n; i++) {
        const i64 skip = null_run(bits, bit0, i, n);
        if (skip) {
            i += skip - 1;
            continue;
        }
        if (!is_set(bits, bit0, i) || !valid[i] || stage[i] < 0 || (ints ? ints[i] < 0 : isnan(floats[i]))) continue;
        rows[m++] = (i32)i;
        bounds[stage[i] + 1]++;
    }
    return m;
}

/* An optional int column's values (>= 0) of spans with a stage into histogram h's row of that
 * stage, the statistics of each run of one stage's rows kept in registers. */
static void tally_column(const i64 *restrict values, const u8 *restrict bits, i64 bit0, const i32 *restrict stage,
                         i64 n, histogram h) {
    tally t = EMPTY_TALLY;
    i64 run = -1;
    i64 *restrict counts = NULL;
    for (i64 i = 0; i < n; i++) {
        const i64 skip = null_run(bits, bit0, i, n);
        if (skip) {
            i += skip - 1;
            continue;
        }
        const i32 k = stage[i];
        if (k < 0 || !is_set(bits, bit0, i) || values[i] < 0) continue;
        if (k != run) {
            if (run >= 0) tally_flush(&t, h.stats + run * H_WIDTH);
            run = k;
            counts = h.counts[k];
        }
        tally_add(&t, counts, values[i]);
    }
    if (run >= 0) tally_flush(&t, h.stats + run * H_WIDTH);
}

/* Everything integer about a file's spans: the join, one pass over the rows for what every span
 * has, then a short pass per optional column (batch, FLOPs, bytes, queue, tokens): folded into
 * the main pass, their pointers and counters made the compiler spill registers on every row
 * (about a fifth of the kernel's time). Every field is read into a local first: stores through
 * the output arrays could otherwise alias the structs' fields, and the compiler would reload
 * them for every row. */
void lp_map_spans(const map_input *in, map_output *out) {
    const i64 n = in->n, n_stage = in->n_stage, n_sec = in->n_sec, sec_lo = in->sec_lo;
    const i64 n_status = in->n_status, n_shape = in->n_shape, n_engine = in->n_engine;
    const i64 *restrict ts = in->ts, *restrict dur = in->dur;
    const u8 *restrict valid = in->valid, *restrict has_req = in->has_req;
    const int req_const = in->req_const == 1;
    const i32 *restrict stage = in->stage, *restrict status = in->status;
    const i32 *restrict shape = in->shape, *restrict engine = in->engine;
    const i64 *restrict queue = in->queue, *restrict tokens_in = in->tokens_in, *restrict tokens_out = in->tokens_out;
    const i64 *restrict batch = in->batch;
    const double *restrict flops = in->flops, *restrict bytes = in->bytes;
    const u8 *restrict batch_bits = in->batch_bits, *restrict flops_bits = in->flops_bits;
    const u8 *restrict bytes_bits = in->bytes_bits, *restrict queue_bits = in->queue_bits;
    const u8 *restrict tokens_in_bits = in->tokens_in_bits, *restrict tokens_out_bits = in->tokens_out_bits;
    const i64 batch_bit0 = in->batch_bit0, flops_bit0 = in->flops_bit0, bytes_bit0 = in->bytes_bit0;
    const i64 queue_bit0 = in->queue_bit0, tokens_in_bit0 = in->tokens_in_bit0;
    const i64 tokens_out_bit0 = in->tokens_out_bit0;
    i32 *restrict parent_row = out->parent_row;
    i64 *restrict child_sum = out->child_sum;
    i64 *restrict sums = out->sums, *restrict statuses = out->statuses, *restrict shapes = out->shapes;
    i64 *restrict engines = out->engines, *restrict busy = out->busy, *restrict busy_n = out->busy_n;
    i64 *restrict arrivals = out->arrivals, *restrict root_arrivals = out->root_arrivals;
    i64 *restrict request_ts = out->request_ts, *restrict request_statuses = out->request_statuses;
    i32 *restrict batch_rows = out->batch_rows, *restrict flops_rows = out->flops_rows;
    i32 *restrict bytes_rows = out->bytes_rows;
    i64 *restrict nb = out->batch_bounds, *restrict nf = out->flops_bounds, *restrict ny = out->bytes_bounds;
    const histogram latency = out->latency;

    memset(child_sum, 0, (size_t)n * sizeof(i64));
    i64 unjoined = 0;
    if (in->id_size > 0) {
        unjoined = join_dense(in, out); /* pass 1: parents and children's time per parent */
    } else {
        for (i64 i = 0; i < n; i++) { /* pass 1 when the caller joined: children's time per parent */
            i64 p = parent_row[i];
            if (p >= 0) child_sum[p] += dur[i];
        }
    }

    /* Pass 1b: a child's recorded queue time (waiting in a batcher, a pool) was spent inside its
     * parent too, so it is not the parent's own time: subtracted like the child's duration, and
     * summed for the requests' queued share. */
    i64 request_queued = 0;
    if (queue) {
        for (i64 i = 0; i < n; i++) {
            const i64 skip = null_run(queue_bits, queue_bit0, i, n);
            if (skip) {
                i += skip - 1;
                continue;
            }
            const i64 p = parent_row[i];
            if (p < 0 || !valid[i] || !is_set(queue_bits, queue_bit0, i) || queue[i] <= 0) continue;
            child_sum[p] += queue[i];
            if (has_req ? has_req[i] : req_const) request_queued += queue[i];
        }
    }

    /* Pass 2. Per-stage sums and latency statistics run in registers while rows of one stage
     * follow each other (files group each row group's rows by stage), the requests' statistics
     * for the whole file. Then the optional columns: rows with a batch size, FLOPs or bytes are
     * collected in row order and counted per stage (grouped below), queue times and tokens go
     * into their histograms. */
    i64 n_req = 0, first = INT64_MAX, last = INT64_MIN, outside = 0;
    i64 request_count = 0, request_dur = 0, request_self = 0;
    const int check_window = in->win_start != INT64_MIN, check_stop = in->win_stop != INT64_MIN;
    const i64 win_start = in->win_start, win_stop = in->win_stop;
    i64 run = -1; /* the stage whose rows are being summed in registers */
    run_sums acc = EMPTY_RUN;
    tally requests = EMPTY_TALLY;
    i64 *restrict lat_counts = NULL;
    i64 *restrict request_counts = out->request.counts[0];
    for (i64 i = 0; i < n; i++) {
        const i64 t = ts[i], d = dur[i], end = t + d;
        const int ok = valid[i];
        if (t < first) first = t;
        if (end > last) last = end;
        if (check_window && (t < win_start || (check_stop && end > win_stop))) outside++;
        i64 own = d - child_sum[i];
        if (own < 0) own = 0;
        const int req = has_req ? has_req[i] : req_const;
        const i64 sec = floor_div(t, NS) - sec_lo;
        const i32 k = stage[i];
        if (k >= 0) {
            if (k != run) {
                if (run >= 0) flush_run(&acc, run, sums, out);
                run = k;
                lat_counts = latency.counts[k];
            }
            acc.count++;
            if (ok) {
                tally_add(&acc.latency, lat_counts, d);
                acc.self += own;
                busy[k * n_sec + sec] += d;
                busy_n[k * n_sec + sec]++;
                if (req) {
                    acc.in_request += d;
                    acc.self_in_request += own;
                }
            }
            i32 s = status[i];
            if (s >= 0) statuses[k * n_status + s]++;
            const i64 p0 = parent_row[i];
            if (p0 >= 0) {
                i64 p = p0;
                for (int depth = 0; depth < MAX_DEPTH; depth++) { /* up to the request's root; ids may cycle */
                    i64 up = parent_row[p];
                    if (up < 0) break;
                    p = up;
                }
                i64 off = t - ts[p];
                acc.offset += off > 0 ? off : 0;
                acc.offset_n++;
            }
            i32 c = shape[i];
            if (c >= 0) shapes[k * n_shape + c]++;
            c = engine[i];
            if (c >= 0) engines[k * n_engine + c]++;
        }
        if (parent_row[i] == ROOT) {
            root_arrivals[sec]++;
            if (req) {
                request_count++;
                request_ts[n_req++] = t;
                arrivals[sec]++;
                i32 s = status[i];
                if (s >= 0) request_statuses[s]++;
                if (ok) {
                    tally_add(&requests, request_counts, d);
                    request_dur += d;
                    request_self += own;
                }
            }
        }
    }
    if (run >= 0) flush_run(&acc, run, sums, out);
    if (requests.total) tally_flush(&requests, out->request.stats);
    const i64 n_batch = batch ? collect(batch, NULL, batch_bits, batch_bit0, valid, stage, n, batch_rows, nb) : 0;
    const i64 n_flops = flops ? collect(NULL, flops, flops_bits, flops_bit0, valid, stage, n, flops_rows, nf) : 0;
    const i64 n_bytes = bytes ? collect(NULL, bytes, bytes_bits, bytes_bit0, valid, stage, n, bytes_rows, ny) : 0;
    if (queue) tally_column(queue, queue_bits, queue_bit0, stage, n, out->queue);
    if (tokens_in) tally_column(tokens_in, tokens_in_bits, tokens_in_bit0, stage, n, out->tokens_in);
    if (tokens_out) tally_column(tokens_out, tokens_out_bits, tokens_out_bit0, stage, n, out->tokens_out);
    group_by_stage(batch_rows, n_batch, nb, stage, n_stage, out->sort_buffer);
    group_by_stage(flops_rows, n_flops, nf, stage, n_stage, out->sort_buffer);
    group_by_stage(bytes_rows, n_bytes, ny, stage, n_stage, out->sort_buffer);
    for (i64 j = 0; j < n_batch; j++) { /* the values the float sums read, gathered once here */
        out->batch_values[j] = batch[batch_rows[j]];
        out->batch_durs[j] = dur[batch_rows[j]];
    }
    for (i64 j = 0; j < n_flops; j++) {
        out->flops_values[j] = flops[flops_rows[j]];
        out->flops_durs[j] = dur[flops_rows[j]];
    }
    for (i64 j = 0; j < n_bytes; j++) {
        out->bytes_values[j] = bytes[bytes_rows[j]];
        out->bytes_durs[j] = dur[bytes_rows[j]];
    }
    float_sums(out, n_stage, n);
    out->request_sums[0] += request_count;
    out->request_sums[1] += request_dur;
    out->request_sums[2] += request_self;
    out->request_sums[3] += request_queued;
    out->edges[0] = first;
    out->edges[1] = last;
    out->edges[2] = outside;
    out->edges[3] = unjoined;
    out->edges[4] = n_req;
}

/* out[i] = values[i] where Arrow's validity bitmap `bits` (from bit `offset`) is set, else fill.
 * Whole bitmap bytes that are all set or all clear (nulls come in runs: files group rows by
 * stage) are copied or filled eight rows at a time. */
#define FILL_NULLS(NAME, T)                                                                  \
    void NAME(const T *restrict values, const u8 *restrict bits, i64 offset, T fill,        \
              T *restrict out, i64 n) {                                                      \
        i64 i = 0;                                                                           \
        for (; i < n && ((offset + i) & 7); i++)                                             \
            out[i] = ((bits[(offset + i) >> 3] >> ((offset + i) & 7)) & 1) ? values[i] : fill; \
        for (; i + 8 <= n; i += 8) {                                                         \
            u8 b = bits[(offset + i) >> 3];                                                  \
            if (b == 0xFF) {                                                                 \
                memcpy(out + i, values + i, 8 * sizeof(T));                                  \
            } else {                                                                         \
                for (int j = 0; j < 8; j++) out[i + j] = ((b >> j) & 1) ? values[i + j] : fill; \
            }                                                                                \
        }                                                                                    \
        for (; i < n; i++)                                                                   \
            out[i] = ((bits[(offset + i) >> 3] >> ((offset + i) & 7)) & 1) ? values[i] : fill; \
    }
FILL_NULLS(lp_fill_nulls_i64, i64)
FILL_NULLS(lp_fill_nulls_i32, i32)
FILL_NULLS(lp_fill_nulls_f64, double)

/* out = (Σg, Σg²) over the gaps g between consecutive sorted times, in seconds, as numpy's
 * `g = np.diff(times) / 1e9; g.sum(), (g * g).sum()` give them; scratch has room for n - 1. */
void lp_gap_sums(const i64 *restrict times, i64 n, double *restrict scratch, double *restrict out) {
    const i64 m = n > 1 ? n - 1 : 0;
    for (i64 i = 0; i < m; i++) scratch[i] = (double)(times[i + 1] - times[i]) / 1e9;
    out[0] = numpy_sum(scratch, m);
    for (i64 i = 0; i < m; i++) scratch[i] = scratch[i] * scratch[i];
    out[1] = numpy_sum(scratch, m);
}

/* The smallest and largest of n > 0 values, in one pass. */
void lp_min_max(const i64 *restrict a, i64 n, i64 *restrict out) {
    i64 lo = a[0], hi = a[0];
    for (i64 i = 1; i < n; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    out[0] = lo;
    out[1] = hi;
}

/* Sorts `a` in place by insertion, for data already nearly in order (request start times in
 * a file written in end order). Gives up after `budget` moves, leaving a permutation of `a`,
 * and returns 0; 1 when sorted. */
int lp_sort_nearly_sorted(i64 *restrict a, i64 n, i64 budget) {
    for (i64 i = 1; i < n; i++) {
        i64 v = a[i], j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
        budget -= i - j;
        if (budget < 0) return 0;
    }
    return 1;
}

/* The layout compiled in, for ckernel.py to check against loadprobe/analysis/histogram.py. */
void lp_layout(i64 *out) {
    out[0] = HIGHEST_TRACKABLE;
    out[1] = HALF_MAGNITUDE;
    out[2] = HALF_COUNT;
    out[3] = SUB_MASK;
    out[4] = COUNTS_LEN;
    out[5] = MAX_DEPTH;
    out[6] = (i64)sizeof(map_input);
    out[7] = (i64)sizeof(map_output);
    out[8] = ROOT;
}

